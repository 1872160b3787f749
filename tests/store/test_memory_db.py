"""DbMemory (layer 4) on SQLite and PostgreSQL: loading, images, compaction, checkpoints."""

from __future__ import annotations

import base64
import logging
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, text

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.errors import ConfigError
from ctxstack.llm import ScriptedLLM
from ctxstack.memory import BaseMemory, DbMemory
from ctxstack.messages import ChatMessage, ImagePart, TextPart
from ctxstack.store import (
    CheckpointCandidate,
    NewMessage,
    SessionFactory,
    UserRecord,
    append_messages,
    create_conversation,
    latest_checkpoint,
    list_messages,
    load_budget,
    save_checkpoint,
    session_factory,
    set_model_config,
)
from ctxstack.store.errors import NotFoundError, StorageError
from ctxstack.store.files import FileStore
from ctxstack.store.messages import HistoryRow, MessageRecord
from ctxstack.tokens import HEURISTIC, HeuristicCounter
from ctxstack.tokens._counter import effective_budget
from tests.conversations import budget_for
from tests.store.samples import GIF, png


def turn_text(i: int, words: int = 30) -> str:
    role = "question" if i % 2 == 0 else "answer"
    return f"{role} {i}: " + " ".join(f"word{i}x{j}" for j in range(words))


async def seed(sf: SessionFactory, conversation_id: str, n: int, *, start: int = 0,
               words: int = 30, batch: int = 1000) -> None:
    """Append ``n`` alternating user/assistant messages (user first when ``start`` is even)."""
    for lo in range(start, start + n, batch):
        hi = min(start + n, lo + batch)
        await append_messages(sf, conversation_id, [
            NewMessage(role="user" if i % 2 == 0 else "assistant", content=turn_text(i, words))
            for i in range(lo, hi)
        ])


def summariser(label: str = "Summary") -> ScriptedLLM:
    """A compact LLM whose summaries say how many messages they were shown."""

    def reply(messages: Sequence[ChatMessage], _tools: Any) -> str:
        return f"{label}: the user asked questions and got answers ({len(messages)} msgs)."

    return ScriptedLLM(handler=reply, context_size=32_000, max_output_tokens=4_000)


@contextmanager
def count_message_rows() -> Iterator[list[int]]:
    """Count ``messages`` rows materialised (independently of DbMemory): every row read
    becomes a record through :meth:`MessageRecord.from_row` or, in a history load, a
    :class:`HistoryRow` through :meth:`HistoryRow.from_row` — the store's conversions."""
    seen = [0]
    original_record, original_row = MessageRecord.from_row, HistoryRow.from_row

    def counted_record(row: Any) -> MessageRecord:
        seen[0] += 1
        return original_record(row)

    def counted_row(row: Any) -> HistoryRow:
        seen[0] += 1
        return original_row(row)

    with patch.object(MessageRecord, "from_row", side_effect=counted_record), \
            patch.object(HistoryRow, "from_row", side_effect=counted_row):
        yield seen


@pytest.fixture
async def conv(sf: SessionFactory, alice: UserRecord) -> str:
    return (await create_conversation(sf, alice.id)).id


@pytest.fixture
def files(sf: SessionFactory, tmp_path: Path) -> FileStore:
    return FileStore(sf, tmp_path / "files")


def memory(sf: SessionFactory, conv: str, **kw: Any) -> DbMemory:
    kw.setdefault("budget", 64_000)
    return DbMemory(conv, session_factory=sf, **kw)


# ---------------------------------------------------------------- loading
async def test_loads_user_and_assistant_messages_in_order_and_drops_the_trailing_query(
    sf: SessionFactory, conv: str, alice: UserRecord
) -> None:
    await append_messages(sf, conv, [
        NewMessage(role="user", content="What is 2+2?"),
        NewMessage(role="assistant", content="4"),
        NewMessage(role="system", content="internal note"),
        NewMessage(role="user", content="And 3+3?", metadata={"kind": "query"}),
    ])
    mem = memory(sf, conv, user_id=alice.id)
    assert isinstance(mem, BaseMemory)
    history = await mem.get_messages()
    assert [(m.role, m.content) for m in history] == [("user", "What is 2+2?"),
                                                      ("assistant", "4")]
    assert [m.metadata["seq"] for m in history] == [1, 2]
    assert mem.trailing_message is not None
    assert mem.trailing_message.text == "And 3+3?"
    assert mem.trailing_message.metadata["seq"] == 4
    assert (mem.was_compacted, mem.method, mem.original_count, mem.compacted_count) == (
        False, "none", 2, 2)
    assert mem.checkpoint_candidate is None
    # Every call is a fresh load returning a new list.
    again = await mem.get_messages()
    assert again == history
    assert again is not history


async def test_only_one_trailing_user_message_is_dropped(sf: SessionFactory, conv: str) -> None:
    await append_messages(sf, conv, [
        NewMessage(role="user", content="first try (no answer came)"),
        NewMessage(role="user", content="second try"),
    ])
    mem = memory(sf, conv)
    assert [m.text for m in await mem.get_messages()] == ["first try (no answer came)"]
    await append_messages(sf, conv, [NewMessage(role="assistant", content="answer")])
    history = await mem.get_messages()
    assert [m.text for m in history] == ["first try (no answer came)", "second try", "answer"]
    assert mem.trailing_message is None


async def test_equal_timestamps_load_in_sequence_order(sf: SessionFactory, conv: str) -> None:
    same = datetime(2024, 1, 1, tzinfo=UTC)
    await append_messages(sf, conv, [
        NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}", created_at=same)
        for i in range(10)
    ])
    history = await memory(sf, conv).get_messages()
    assert [m.text for m in history] == [f"m{i}" for i in range(10)]


async def test_add_message_and_clear_change_nothing(sf: SessionFactory, conv: str) -> None:
    await seed(sf, conv, 2)
    mem = memory(sf, conv)
    await mem.add_message(ChatMessage.user("not stored"))
    await mem.clear()
    assert len(await list_messages(sf, conv)) == 2
    assert len(await mem.get_messages()) == 2


async def test_another_users_conversation_is_not_found(
    sf: SessionFactory, conv: str, bob: UserRecord
) -> None:
    with pytest.raises(NotFoundError):
        await memory(sf, conv, user_id=bob.id).get_messages()
    with pytest.raises(NotFoundError):
        await memory(sf, "../" + conv).get_messages()


async def test_database_errors_raise_instead_of_returning_nothing(
    sf: SessionFactory, conv: str, tmp_path: Path
) -> None:
    await seed(sf, conv, 4)
    async with sf() as session, session.begin():
        await session.execute(text("DROP TABLE messages CASCADE"
                                   if sf.kw["bind"].dialect.name == "postgresql"
                                   else "DROP TABLE messages"))
    with pytest.raises(StorageError, match="loading the history of conversation"):
        await memory(sf, conv).get_messages()
    broken = session_factory("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    try:
        with pytest.raises(StorageError, match=r"127\.0\.0\.1:1"):
            await DbMemory(conv, session_factory=broken, budget=4000).get_messages()
    finally:
        await broken.kw["bind"].dispose()


def test_bad_arguments_are_config_errors(sf: SessionFactory) -> None:
    with pytest.raises(ConfigError, match="budget"):
        DbMemory("c", session_factory=sf, budget=0)
    with pytest.raises(ConfigError, match="load_window"):
        DbMemory("c", session_factory=sf, budget=4000, load_window=0.5)


# ---------------------------------------------------------------- images
async def test_images_are_rebuilt_as_data_urls_from_the_owners_files(
    sf: SessionFactory, conv: str, alice: UserRecord, files: FileStore
) -> None:
    image = await files.save(alice.id, png(2, 2))
    gif = await files.save(alice.id, GIF)
    await append_messages(sf, conv, [
        NewMessage(role="user", content="What is in these?", metadata={"images": [
            {"file_id": image.id, "mime_type": "image/png"},
            {"file_id": gif.id, "mime_type": "image/gif"}]}),
        NewMessage(role="assistant", content="A grey square and a dot."),
        NewMessage(role="user", content="current question"),
    ])
    history = await memory(sf, conv, file_store=files).get_messages()
    first = history[0]
    assert isinstance(first.content, list)
    assert first.content[0] == TextPart(text="What is in these?")
    assert [p.image_url.url for p in first.images] == [
        "data:image/png;base64," + base64.b64encode(png(2, 2)).decode(),
        "data:image/gif;base64," + base64.b64encode(GIF).decode(),
    ]
    assert first.metadata["images"][0]["file_id"] == image.id
    assert HEURISTIC.count_message(first) > 2 * 765


async def test_missing_foreign_and_path_like_images_become_notes(
    sf: SessionFactory, conv: str, alice: UserRecord, bob: UserRecord, files: FileStore,
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    mine = await files.save(alice.id, png(seed=1))
    gone = await files.save(alice.id, png(seed=2))
    theirs = await files.save(bob.id, png(seed=3))
    for path in files.directory.rglob(f"{gone.id}.*"):
        path.unlink()
    (tmp_path / "secret.png").write_bytes(png(seed=4))
    refs = [
        {"file_id": mine.id, "mime_type": "image/png"},
        {"file_id": gone.id, "mime_type": "image/png"},
        {"file_id": theirs.id, "mime_type": "image/png"},
        {"file_id": "../secret", "mime_type": "image/png"},
        {"file_id": "../../" + mine.id, "mime_type": "image/png"},
        {"file_id": "0" * 32, "mime_type": "image/png"},
        "not-an-object",
    ]
    await append_messages(sf, conv, [
        NewMessage(role="user", content="look", metadata={"images": refs}),
        NewMessage(role="assistant", content="ok"),
    ])
    caplog.set_level(logging.WARNING, logger="ctxstack.store.memory")
    mem = memory(sf, conv, file_store=files)
    history = await mem.get_messages()
    parts = history[0].content
    assert isinstance(parts, list)
    assert [type(p).__name__ for p in parts] == ["TextPart", "ImagePart"] + ["TextPart"] * 6
    assert all(p.text == "[image unavailable]" for p in parts[2:] if isinstance(p, TextPart))
    image = parts[1]
    assert isinstance(image, ImagePart)
    assert image.image_url.url == "data:image/png;base64," + base64.b64encode(
        png(seed=1)).decode()
    # Nobody else's bytes, nor the file outside the store, ever appear.
    everything = str([m.to_openai() for m in history])
    for other in (png(seed=3), png(seed=4)):
        assert base64.b64encode(other).decode() not in everything
    assert len(mem.warnings) == 6
    assert any(theirs.id in w and "not one of the conversation owner's files" in w
               for w in mem.warnings)
    assert any(gone.id in w and "missing" in w for w in mem.warnings)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 6


# ---------------------------------------------------------------- compaction
async def test_over_budget_without_llm_is_smart_truncated(sf: SessionFactory, conv: str) -> None:
    await seed(sf, conv, 41)  # ends with a user message: the current query
    mem = memory(sf, conv, budget=800)
    history = await mem.get_messages()
    assert mem.was_compacted
    assert mem.method == "truncate"
    assert mem.original_count == 40
    assert mem.compacted_count == len(history) < 40
    assert HEURISTIC.count_messages(history) <= 800
    assert history[0].role == "user"  # never starts with an orphan assistant turn
    assert history[-1].metadata["seq"] == 40  # the newest kept, the query dropped
    seqs = [m.metadata["seq"] for m in history]
    assert seqs == list(range(seqs[0], 41))
    assert mem.usage.calls == 0
    assert mem.checkpoint_candidate is None


async def test_over_budget_with_llm_summarises_and_offers_a_checkpoint(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 41)
    llm = summariser()
    mem = memory(sf, conv, budget=1200, compact_llm=llm)
    history = await mem.get_messages()
    assert (mem.was_compacted, mem.method) == (True, "llm")
    assert len(llm.calls) == 1
    assert mem.usage.calls == 1
    assert mem.usage.input_tokens > 0
    assert history[0].role == "system"
    assert history[0].kind == "summary"
    assert history[0].text.startswith(SUMMARY_PREFIX)
    assert HEURISTIC.count_messages(history) <= 1200
    assert (mem.original_count, mem.compacted_count) == (40, len(history))
    candidate = mem.checkpoint_candidate
    assert candidate is not None
    kept = [m.metadata["seq"] for m in history[1:]]
    # The checkpoint covers what the summary replaced (down to target_fill, so the next
    # turns have room); the load shows the summary, then exactly what it does not cover.
    assert kept == list(range(candidate.last_seq + 1, 41))
    assert candidate.summary == history[0].text
    assert candidate.token_count == HEURISTIC.count_message(history[0])
    assert candidate.method == "llm"


async def test_the_turn_after_a_summary_extends_the_call_that_summarised(
    sf: SessionFactory, conv: str
) -> None:
    """The load that summarised shows what the next load, from its checkpoint, starts
    with: the next turn's call extends it byte for byte, so the provider reads it from its
    cache instead of writing the whole context again (as showing the newest summarised
    messages verbatim on the summarising turn made it do)."""
    await seed(sf, conv, 41)
    llm = summariser()
    mem = memory(sf, conv, budget=1200, compact_llm=llm)
    first = await mem.get_messages()
    assert mem.method == "llm"
    await mem.save_checkpoint()
    await append_messages(sf, conv, [
        NewMessage(role="assistant", content="The answer to the query."),
        NewMessage(role="user", content="And the next question?")])
    mem = memory(sf, conv, budget=1200, compact_llm=llm)
    second = await mem.get_messages()
    assert (mem.method, len(llm.calls)) == ("none", 1)
    assert [m.to_openai() for m in second[:len(first)]] == [m.to_openai() for m in first]
    assert [m.text for m in second[len(first):]] == [
        turn_text(40, 30), "The answer to the query."]  # the last query, then its answer


async def test_llm_failure_falls_back_to_truncation_without_a_checkpoint(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 201)
    llm = ScriptedLLM([RuntimeError("provider down")])
    mem = memory(sf, conv, budget=800, compact_llm=llm)
    history = await mem.get_messages()
    assert mem.method == "truncate"
    assert mem.was_compacted
    assert mem.checkpoint_candidate is None
    assert HEURISTIC.count_messages(history) <= 800
    # Folding the rows older than the window failed: the load's compaction does not ask
    # the failed summariser again.
    assert mem.omitted_count > 0
    assert len(llm.calls) == 1


async def test_budget_from_the_model_config_row(sf: SessionFactory, conv: str) -> None:
    await set_model_config(sf, "main", "tiny", context_size=6_000, max_output_tokens=2_000)
    budget = await load_budget(sf, "main", env={})
    assert isinstance(budget, ModelBudget)
    assert budget.usable_input_tokens == 4_000
    await seed(sf, conv, 201)
    mem = memory(sf, conv, budget=budget)
    history = await mem.get_messages()
    assert mem.method == "truncate"
    # A window that starts at its seq block keeps a stable start: between target_fill
    # (0.6) of what fits and all of it, less one message.
    assert 2_000 < HEURISTIC.count_messages(history) <= 4_000


# ---------------------------------------------------------------- checkpoints
async def test_checkpoint_is_written_then_reused_so_the_summariser_runs_once(
    sf: SessionFactory, conv: str, alice: UserRecord
) -> None:
    await seed(sf, conv, 41)
    llm = summariser("First summary")
    mem = memory(sf, conv, budget=budget_for(1200), compact_llm=llm, user_id=alice.id)
    first = await mem.get_messages()
    saved = await mem.save_checkpoint()
    assert saved is not None
    assert saved == await latest_checkpoint(sf, conv)
    assert saved.last_seq == mem.checkpoint_candidate.last_seq  # type: ignore[union-attr]

    # The next turns: the answer to the query and one more exchange arrive; each load
    # starts from the checkpoint and needs no summariser.
    await seed(sf, conv, 1, start=41, words=3)  # the answer to message 41
    for turn in range(3):
        await seed(sf, conv, 2, start=42 + 2 * turn, words=3)  # user, assistant
        await seed(sf, conv, 1, start=48 + turn * 2, words=3)  # the new current query
        history = await mem.get_messages()
        assert mem.checkpoint == saved
        assert history[0].kind == "summary"
        assert history[0].text == saved.summary
        assert history[0].metadata["checkpoint_seq"] == saved.last_seq
        seqs = [m.metadata["seq"] for m in history[1:]]
        assert seqs[0] == saved.last_seq + 1
        assert mem.rows_read == len(seqs) + 1  # the rows after the checkpoint, no more
        assert not mem.was_compacted
        assert mem.checkpoint_candidate is None
    assert len(llm.calls) == 1
    assert first[0].text == history[0].text


async def test_next_overflow_folds_the_checkpoint_into_a_new_one(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 41)
    llm = summariser()
    mem = memory(sf, conv, budget=1200, compact_llm=llm)
    await mem.get_messages()
    first = await mem.save_checkpoint()
    assert first is not None
    await seed(sf, conv, 40, start=41)  # far over budget again
    history = await mem.get_messages()
    assert mem.method == "llm"
    assert len(llm.calls) == 2
    # The summariser saw the old summary (rolling), and the new checkpoint goes further.
    assert any("Summary: the user asked" in m.text for m in llm.calls[1].messages)
    second = await mem.save_checkpoint()
    assert second is not None
    assert second.last_seq > first.last_seq
    assert (await latest_checkpoint(sf, conv)) == second
    assert HEURISTIC.count_messages(history) <= 1200


async def test_load_after_a_checkpoint_reads_only_the_rows_after_it(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 10_000, words=8)
    await save_checkpoint(sf, conv, _candidate(9_980))
    executed: list[str] = []
    engine = sf.kw["bind"]

    def remember(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM messages" in statement:
            executed.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", remember)
    try:
        with count_message_rows() as rows:
            mem = memory(sf, conv, budget=4_000)
            history = await mem.get_messages()
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", remember)
    assert rows[0] == 20  # seq 9,981 … 10,000
    assert mem.rows_read == 20
    assert all("LIMIT" in s for s in executed)
    assert [m.metadata["seq"] for m in history[1:]] == list(range(9_981, 10_001))
    assert mem.trailing_message is None  # the last message is an answer


async def test_without_a_checkpoint_the_load_window_bounds_the_rows_read(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 3_001, words=8)
    with count_message_rows() as rows:
        mem = memory(sf, conv, budget=4_000)
        history = await mem.get_messages()
    assert rows[0] < 1_000
    assert mem.rows_read == rows[0]
    assert mem.omitted_count > 0
    assert mem.original_count == 3_000  # everything before the query, read or not
    assert mem.method == "truncate"
    assert mem.warnings
    assert "left out" in mem.warnings[0]
    assert HEURISTIC.count_messages(history) <= 4_000
    assert history[-1].metadata["seq"] == 3_000
    # The seed's behaviour (read everything) is still available. A read from the first row
    # keeps a stable window (its start counted from there, so it stays put from turn to
    # turn); the read window, which moves every turn, fills the budget. Both are the
    # newest messages, in order.
    with count_message_rows() as all_rows:
        full = memory(sf, conv, budget=4_000, load_window=None)
        whole = await full.get_messages()
    assert all_rows[0] == 3_001
    assert HEURISTIC.count_messages(whole) <= 4_000
    assert whole[-len(whole) + 1:] == history[-len(whole) + 1:]
    assert [m.metadata["seq"] for m in whole[1:]] == list(
        range(whole[1].metadata["seq"], 3_001))


async def test_a_window_that_leaves_rows_out_keeps_its_start_from_turn_to_turn(
    sf: SessionFactory, conv: str
) -> None:
    """Without a summariser, a long conversation's load window moves with every message.
    It starts at a block of seqs, and a question shorter than the room a load leaves for
    it does not change the history's budget, so the first message a load returns — where
    the prefix the provider caches begins — stays put for most turns (every turn missed
    the cache before: 0 of 79 loads kept their start)."""
    await seed(sf, conv, 301)
    total, kept_prefix = 301, 0
    rng = random.Random(5)
    previous: list[ChatMessage] = []
    for _ in range(60):
        mem = memory(sf, conv, budget=4_000)
        history = await mem.get_messages()
        assert mem.omitted_count > 0
        assert mem.method == "truncate"
        assert HEURISTIC.count_messages(history) <= 4_000
        seqs = [m.metadata["seq"] for m in history]
        assert seqs == list(range(seqs[0], total))  # the newest messages, in order
        assert mem.trailing_message is not None
        assert mem.trailing_message.metadata["seq"] == total
        assert mem.rows_read < 2 * 200  # still bounded by the budget, not the conversation
        if previous and history[0] == previous[0]:
            kept_prefix += 1
            # the whole previous history is still a byte-identical prefix of this one
            assert [m.to_openai() for m in history[: len(previous)]] == [
                m.to_openai() for m in previous]
        previous = history
        await append_messages(sf, conv, [
            NewMessage(role="assistant", content=turn_text(total)),
            NewMessage(role="user", content=turn_text(total + 1, rng.randint(3, 25)))])
        total += 2
    assert kept_prefix >= 0.6 * 59


async def test_a_window_of_huge_rows_falls_back_to_filling_the_budget(
    sf: SessionFactory, conv: str
) -> None:
    """A seq block whose rows hold more than another window of tokens is not read
    whole: the rows read stay bounded, and the load fills the budget from the newest."""
    await seed(sf, conv, 40, words=3_000)  # ~12K tokens a row: one is three windows
    await seed(sf, conv, 199, start=40)  # the first page (200 rows) reaches seq 40
    with count_message_rows() as rows:
        mem = memory(sf, conv, budget=4_000)
        history = await mem.get_messages()
    assert HEURISTIC.count_messages(history) <= 4_000
    assert HEURISTIC.count_messages(history) > 3_000
    assert mem.omitted_count == 39  # the page read seq 40; no row of its block was taken
    assert mem.rows_read == rows[0] <= 200 + 39  # the block: at most half the page more
    assert [m.metadata["seq"] for m in history][-1] == 238


def _candidate(last_seq: int) -> CheckpointCandidate:
    return CheckpointCandidate(summary=f"{SUMMARY_PREFIX}\nEverything up to {last_seq}.",
                               last_seq=last_seq, token_count=12)


async def test_a_checkpoint_never_covers_a_message_kept_verbatim(sf: SessionFactory) -> None:
    """If the summary skipped a message in the middle, the checkpoint stops before it."""
    mem = DbMemory("0" * 32, session_factory=sf, budget=4000)
    history = [ChatMessage.system(f"{SUMMARY_PREFIX} old", metadata={"kind": "summary"})] + [
        ChatMessage(role="user" if s % 2 else "assistant", content=str(s), metadata={"seq": s})
        for s in range(5, 12)
    ]
    summary = ChatMessage.system(f"{SUMMARY_PREFIX} new", metadata={"kind": "summary"})
    folded = [history[0], *history[1:4], *history[5:7]]  # seq 5,6,7 and 9,10 (8 kept)
    candidate = mem._candidate(history, folded, summary)
    assert candidate is not None
    assert candidate.last_seq == 7
    assert mem._candidate(history, [history[0], history[2]], summary) is None


# ---------------------------------------------------------------- property: nothing lost
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    turns=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 160)), min_size=6,
                   max_size=30),
    budget=st.integers(600, 1_500),
)
async def test_checkpoint_chain_never_drops_a_message_for_good(
    sf: SessionFactory, alice: UserRecord, turns: list[tuple[int, int]], budget: int
) -> None:
    """Turn after turn, as the service runs it. Each load fits the budget and is the summary
    (if any) then a contiguous run of the newest messages; a new checkpoint covers only
    messages the summariser was actually shown; everything after the checkpoint is still
    loaded next time. So no message is lost for good, and a load that summarised shows
    nothing the checkpoint covers (the next load, from the checkpoint, extends it)."""
    conv = (await create_conversation(sf, alice.id)).id
    llm = summariser()
    mem = memory(sf, conv, budget=budget, compact_llm=llm)
    seq = 0
    covered = 0  # what the saved checkpoint covers
    for question_words, answer_words in turns:
        seq += 1
        await append_messages(sf, conv, [NewMessage(role="user",
                                                    content=turn_text(seq, question_words))])
        history = await mem.get_messages()
        assert HEURISTIC.count_messages(history) <= budget
        verbatim = [m.metadata["seq"] for m in history if m.kind != "summary"]
        if verbatim:
            assert verbatim == list(range(verbatim[0], seq))  # contiguous, newest last
            assert verbatim[0] > covered
        assert [m.kind for m in history].count("summary") <= 1
        if covered and mem.method == "none":
            assert history[0].kind == "summary"
            assert verbatim == list(range(covered + 1, seq))  # nothing dropped
        candidate = mem.checkpoint_candidate
        if candidate is not None:
            transcript = "\n".join(m.text for m in llm.calls[-1].messages)
            for folded in range(covered + 1, candidate.last_seq + 1):
                marker = f"{'question' if folded % 2 == 0 else 'answer'} {folded}:"
                assert marker in transcript
            # What the checkpoint covers is in the summary only (what is newer may still
            # be truncated away when even the summarised history does not fit: the next
            # load, from the checkpoint, reads it again).
            assert all(s > candidate.last_seq for s in verbatim)
            await mem.save_checkpoint()
            covered = candidate.last_seq
        seq += 1
        await append_messages(sf, conv, [NewMessage(role="assistant",
                                                    content=turn_text(seq, answer_words))])


# ---------------------------------------------------------------- folding older history
async def test_a_thousand_messages_without_a_checkpoint_are_all_summarised(
    sf: SessionFactory, conv: str
) -> None:
    """Nothing silently dropped on load: history older than the read window is folded
    into the rolling summary in chunks, and the counts reported are exact."""
    await append_messages(sf, conv, [NewMessage(
        role="user", content="Keep this: my order id is ORD-99812-XK, weight 3.14159 kg.")])
    await seed(sf, conv, 1000, start=1, words=20)  # 1,000 more; the last is the query
    seen: list[str] = []

    def reply(messages: Sequence[ChatMessage], _tools: Any) -> str:
        seen.append("\n".join(m.text for m in messages))
        return "Summary: a long exchange of questions and answers."

    llm = ScriptedLLM(handler=reply, context_size=16_000, max_output_tokens=2_000)
    mem = memory(sf, conv, budget=4_000, compact_llm=llm)
    history = await mem.get_messages()
    assert "ORD-99812-XK" in seen[0]  # message 0's fact reached the summariser input
    assert len(seen) >= 3  # several chunks, rolling
    assert mem.omitted_count == 0
    assert mem.original_count == 1000  # every stored message before the query
    verbatim = [m.metadata["seq"] for m in history if m.kind != "summary"]
    candidate = mem.checkpoint_candidate
    assert candidate is not None
    # Exact: the summary covers messages 1..last_seq, all of them; the rest are verbatim up
    # to the query; nothing in between is missing.
    assert mem.summarized_count == candidate.last_seq
    assert verbatim == list(range(candidate.last_seq + 1, 1001))
    assert mem.folded_count > 0
    assert mem.method == "llm"
    assert mem.was_compacted
    assert history[0].kind == "summary"
    assert "ORD-99812-XK" in history[0].text  # the fact survives into the summary's facts
    assert HEURISTIC.count_messages(history) <= 4_000


async def test_folding_is_bounded_per_load_and_reports_what_is_left(
    sf: SessionFactory, conv: str
) -> None:
    await seed(sf, conv, 1001, words=20)
    llm = ScriptedLLM(handler=lambda m, t: "Summary.", context_size=16_000,
                      max_output_tokens=2_000)
    mem = memory(sf, conv, budget=4_000, compact_llm=llm, max_fold_chunks=1)
    await mem.get_messages()
    assert mem.folded_count > 0
    assert mem.omitted_count > 0  # the rest waits for the next turn, and says so
    assert mem.original_count == 1000
    assert any("left out" in w for w in mem.warnings)
    first = mem.checkpoint_candidate
    assert first is not None
    # The checkpoint stops where folding stopped: the rows left out are not covered.
    assert first.last_seq == mem.folded_count
    await mem.save_checkpoint()
    await mem.get_messages()  # the next turn continues from the checkpoint
    assert mem.checkpoint_candidate is not None
    assert mem.checkpoint_candidate.last_seq > first.last_seq


async def test_the_load_leaves_room_for_what_every_call_adds(sf: SessionFactory, conv: str) -> None:
    """What the agent adds to the loaded history — system prompt, tool specs, the trailing
    question — fits beside it, so the guard does not compact again at the first call."""
    from ctxstack.agent import tool
    from ctxstack.tokens._counter import effective_budget, tool_specs_tokens

    @tool
    def lookup(order_id: str) -> str:
        """Find an order.

        Args:
            order_id: the order number.
        """
        return order_id

    await seed(sf, conv, 41)
    system = "You are a careful assistant. " * 80
    specs = [lookup.spec()]
    plain = memory(sf, conv, budget=1_200)
    reserved = memory(sf, conv, budget=1_200, system_prompt=system, tools=specs)
    bare = await plain.get_messages()
    history = await reserved.get_messages()
    assert reserved.trailing_message is not None
    call = [ChatMessage.system(system), *history, reserved.trailing_message]
    # the whole call fits what the guard allows a call that carries these tools
    allowed = effective_budget(1_200 - tool_specs_tokens(specs, HEURISTIC), HEURISTIC)
    assert HEURISTIC.count_messages(call) <= allowed
    assert len(history) < len(bare)  # the room came out of the history
    without = [ChatMessage.system(system), *bare, plain.trailing_message]
    assert HEURISTIC.count_messages(without) > allowed  # the case the reserve exists for


async def test_a_short_question_of_any_size_leaves_the_history_the_same_budget(
    sf: SessionFactory, conv: str
) -> None:
    """The load leaves the question a room (5% of the call): questions shorter than it
    load the very same history, so the cached prefix does not move with each question's
    size; a longer one takes what it needs, and the call still fits."""
    await seed(sf, conv, 200)  # the conversation, without its question
    loads = []
    for words in (1, 12, 30, 400):
        async with sf() as session:  # replace the question: the history stays the same
            await session.execute(text("DELETE FROM messages WHERE conversation_id = :c "
                                       "AND seq > 200"), {"c": conv})
            await session.commit()
        await append_messages(sf, conv, [NewMessage(role="user",
                                                    content=turn_text(200, words))])
        mem = memory(sf, conv, budget=4_000)
        history = await mem.get_messages()
        assert mem.trailing_message is not None
        call = [*history, mem.trailing_message]
        assert HEURISTIC.count_messages(call) <= effective_budget(4_000, HEURISTIC)
        loads.append([m.metadata["seq"] for m in history])
    short, *others, long = loads
    assert all(seqs == short for seqs in others)  # 1 to 30 words: one history
    assert long[-1] == short[-1]
    assert len(long) < len(short)  # 400 words (~1,700 tokens) do not fit in the room


async def test_a_history_that_fits_beside_its_question_is_not_compacted_for_the_room(
    sf: SessionFactory, conv: str
) -> None:
    """The question's room only shapes a compaction: a history that fits beside the
    actual question is returned whole, however little room that leaves."""
    await seed(sf, conv, 20)
    await append_messages(sf, conv, [NewMessage(role="user", content="Thanks!")])
    whole = await memory(sf, conv, budget=64_000).get_messages()
    size = HEURISTIC.count_messages(whole)

    async def whole_at(budget: int) -> bool:
        mem = memory(sf, conv, budget=budget)
        return await mem.get_messages() == whole and mem.method == "none"

    low, budget = size, 2 * size  # the least budget that loads it whole, by bisection
    assert await whole_at(budget)
    while low < budget:
        middle = (low + budget) // 2
        low, budget = (low, middle) if await whole_at(middle) else (middle + 1, budget)
    # the room (5%) would not have fitted: the question took less than 3% of the call
    assert size > effective_budget(int(budget * 0.97), HEURISTIC)
    assert (await memory(sf, conv, budget=budget - 1).get_messages()) != whole


class _CountingHeuristic(HeuristicCounter):
    """The default heuristic, recording every text it estimates (to count passes)."""

    def __init__(self) -> None:
        super().__init__()
        self.estimated: Counter[str] = Counter()

    def count_text(self, text: str) -> int:
        self.estimated[text] += 1
        return super().count_text(text)


async def test_each_stored_message_is_estimated_once_per_load(
    sf: SessionFactory, conv: str
) -> None:
    """The rows' window count and the compaction check count the same message objects,
    so a load estimates (and classifies) every stored text once; the turn's later passes
    over the history — the guard, the context meter — find every figure cached on them.
    With the service's calibrating counter (per-kind factors learnt, upward only)."""
    from ctxstack.protocol import Usage
    from ctxstack.tokens import CalibratingCounter
    from ctxstack.tokens import _calibration as calibration

    await seed(sf, conv, 301)  # several pages, each counted in slices
    spy = _CountingHeuristic()
    counter = CalibratingCounter(spy, min_factor=1.0)
    warm = [ChatMessage.user("some prose to learn from " * 20)]
    assert counter.observe_call(warm, Usage(input_tokens=200, output_tokens=1))
    assert counter._kinds_learnt()
    spy.estimated.clear()
    classified: list[str] = []
    original_kind = calibration.content_kind

    def kind(text: str) -> int:
        classified.append(text)
        return original_kind(text)

    with patch.object(calibration, "content_kind", side_effect=kind):
        mem = memory(sf, conv, counter=counter, budget=200_000)  # everything fits
        history = await mem.get_messages()
        assert mem.trailing_message is not None
        stored = {turn_text(i) for i in range(300)}
        assert [m.text for m in history] == [turn_text(i) for i in range(300)]
        assert {t: n for t, n in spy.estimated.items() if t in stored} == dict.fromkeys(stored, 1)
        assert sorted(t for t in classified if t in stored) == sorted(stored)
        spy.estimated.clear()
        classified.clear()
        # what the guard and the meter do next costs no estimate and no classification
        counter.count_messages(history)
        [counter.count_message(m) for m in history]
        HEURISTIC.count_messages(history)  # another rule: its own figures, counted anew
        assert not spy.estimated
        assert not classified


@given(st.lists(st.one_of(st.none(), st.integers(min_value=0, max_value=3_000)), max_size=200))
def test_a_page_is_counted_in_slices_bounded_by_rows_and_characters(
    sizes: list[int | None],
) -> None:
    """The event loop gets a turn between slices of at most 64 rows and at most
    ``INLINE_COUNT_CHARS`` characters (a single longer row is a slice of its own); the
    slices cover the page in order. (The character bound is lowered to 1,000 here.)"""
    from ctxstack.store import memory
    from ctxstack.store.messages import HistoryRow

    page = [HistoryRow(i, "user", None if n is None else "x" * n, {})
            for i, n in enumerate(sizes)]
    with patch.object(memory, "INLINE_COUNT_CHARS", 1_000):
        slices = memory._slices(page)
    assert [i for start, stop in slices for i in range(start, stop)] == list(range(len(page)))
    for start, stop in slices:
        assert 0 < stop - start <= memory.INLINE_COUNT_ROWS
        chars = sum(len(r.content or "") for r in page[start:stop])
        assert chars <= 1_000 or stop - start == 1


# ---------------------------------------------------------------- the message cache
async def test_a_message_cache_gives_back_unchanged_rows_as_the_same_messages(
    sf: SessionFactory, conv: str
) -> None:
    """With a shared :class:`HistoryMessageCache` the next load takes back the previous
    load's message for every unchanged row (the same object, its figures cached: nothing
    is estimated again); the history is the one a load without the cache returns. A row
    changed in the database since (text or metadata) is built anew from what is stored."""
    from ctxstack.store.history_messages import HistoryMessageCache

    await seed(sf, conv, 301)
    cache = HistoryMessageCache()
    spy = _CountingHeuristic()
    first = await memory(sf, conv, counter=spy, message_cache=cache).get_messages()
    assert len(cache) == 301  # the trailing question's row too
    assert first == await memory(sf, conv, counter=spy).get_messages()
    spy.estimated.clear()
    second = await memory(sf, conv, counter=spy, message_cache=cache).get_messages()
    assert second == first
    assert all(a is b for a, b in zip(second, first, strict=True))
    # only the trailing question, set aside as its own message, is counted again
    assert set(spy.estimated) == {turn_text(300)}

    async with sf() as session, session.begin():
        await session.execute(text(
            "UPDATE messages SET content = 'edited' WHERE conversation_id = :c AND seq = 5"),
            {"c": conv})
        await session.execute(text(
            "UPDATE messages SET metadata = :m WHERE conversation_id = :c AND seq = 7"),
            {"c": conv, "m": '{"kind": "note"}'})
    third = await memory(sf, conv, counter=spy, message_cache=cache).get_messages()
    assert third == await memory(sf, conv).get_messages()
    changed = {m.metadata["seq"]: m for m in third if m.metadata["seq"] in (5, 7)}
    assert changed[5].text == "edited"
    assert changed[7].metadata == {"kind": "note", "seq": 7}
    assert [m.metadata["seq"] for a, m in zip(second, third, strict=True)
            if a is not m] == [5, 7]
    assert set(spy.estimated) == {"edited", turn_text(6), turn_text(300)}


def test_the_message_cache_keeps_the_latest_loads_within_its_bounds() -> None:
    """Each load replaces its conversation's rows; the least recently stored
    conversations go first past ``max_messages`` or ``max_chars`` (text and metadata
    text); a load larger than the whole cache is not kept. A message is reused only for
    the very row it was built from."""
    from ctxstack.store.history_messages import CachedRow, HistoryMessageCache, text_message

    def rows(n: int, size: int = 10) -> dict[int, CachedRow]:
        out = {}
        for seq in range(1, n + 1):
            row = HistoryRow(seq, "user", "x" * (size - 2), {})
            out[seq] = CachedRow(row, "{}", text_message(row))
        return out

    cache = HistoryMessageCache(max_messages=10, max_chars=1_000, min_rows=1)
    cache.store("a", rows(4))
    cache.store("b", rows(4))
    cache.store("a", rows(3))  # replaces a's rows, a becomes the newest
    assert (len(cache), len(cache.rows("a")), len(cache.rows("b"))) == (7, 3, 4)
    cache.store("c", rows(5))  # 12 > 10: b (the oldest) goes
    assert (len(cache), cache.rows("b"), len(cache.rows("c"))) == (8, {}, 5)
    cache.store("d", rows(2, size=480))  # 960 + 80 characters > 1,000: a, then c go
    assert (len(cache), cache.rows("a"), cache.rows("c"), len(cache.rows("d"))) == (2, {}, {}, 2)
    cache.store("e", rows(11))  # larger than the cache: not kept
    short = HistoryMessageCache()  # the default keeps only loads of 128 rows or more
    short.store("s", rows(127, size=4))
    assert (len(short), short.rows("s")) == (0, {})
    short.store("s", rows(128, size=4))
    assert len(short.rows("s")) == 128
    short.store("s", rows(3, size=4))  # a shorter load replaces it: nothing is kept
    assert (len(short), short.rows("s")) == (0, {})
    assert (len(cache), cache.rows("e"), len(cache.rows("d"))) == (2, {}, 2)
    cache.store("d", {})
    assert len(cache) == 0
    row = HistoryRow(1, "user", "hello", {"kind": "query"})
    kept = {1: CachedRow(row, '{"kind": "query"}', text_message(row))}
    assert cache.message(kept, row) is kept[1].message
    equal = HistoryRow(1, "user", "hello", {"kind": "query"})
    assert cache.message(kept, equal) is not kept[1].message
    assert cache.message(kept, equal) == kept[1].message


async def test_rows_read_again_unchanged_are_not_decoded_again(
    sf: SessionFactory, conv: str
) -> None:
    """:func:`read_history_rows` gives back a known row (same ``seq``, role, text and
    metadata text) as that very row, without decoding its metadata; a row whose metadata
    or text changed is decoded from what is stored. The rows equal
    :func:`read_history_page`'s."""
    import json

    from ctxstack.store import messages as store_messages
    from ctxstack.store.db import reading
    from ctxstack.store.history_messages import CachedRow, text_message
    from ctxstack.store.messages import read_history_page, read_history_rows

    events = {"status": "ok", "events": [{"event": "answer", "data": {"delta": "4", "n": 1.5}}]}
    await append_messages(sf, conv, [
        NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}",
                   metadata=events if i % 2 else {})
        for i in range(6)])
    async with reading(sf, "test") as session:
        plain = await read_history_page(session, conv)
        first = await read_history_rows(session, conv)
    assert [row for row, _ in first] == plain
    known = {row.seq: CachedRow(row, text, text_message(row)) for row, text in first}
    async with sf() as session, session.begin():
        await session.execute(text(
            "UPDATE messages SET metadata = :m WHERE conversation_id = :c AND seq = 4"),
            {"c": conv, "m": json.dumps({"status": "failed"})})
        await session.execute(text(
            "UPDATE messages SET content = 'edited' WHERE conversation_id = :c AND seq = 5"),
            {"c": conv})
    decoded: list[str] = []
    original = json.loads

    def loads(s: str) -> Any:
        decoded.append(s)
        return original(s)

    with patch.object(store_messages.json, "loads", side_effect=loads):
        async with reading(sf, "test") as session:
            again = await read_history_rows(session, conv, known=known,
                                            newest_first=True)
    async with reading(sf, "test") as session:
        assert [row for row, _ in again] == await read_history_page(session, conv,
                                                                    newest_first=True)
    assert [row.seq for row, _ in again] == [6, 5, 4, 3, 2, 1]
    assert [row is known[row.seq].row for row, _ in again] == [
        True, False, False, True, True, True]
    assert len(decoded) == 2
    assert again[2][0].metadata == {"status": "failed"}
    assert again[1][0].content == "edited"


def _load_outcome(mem: DbMemory, history: list[ChatMessage]) -> dict[str, Any]:
    return {
        "history": [(m.role, m.text, m.metadata) for m in history],
        "trailing": mem.trailing_message, "rows_read": mem.rows_read,
        "omitted": mem.omitted_count, "folded": mem.folded_count,
        "summarized": mem.summarized_count, "method": mem.method,
        "original": mem.original_count, "compacted": mem.compacted_count,
        "candidate": mem.checkpoint_candidate,
    }


@pytest.mark.parametrize("summarise", [False, True])
async def test_a_load_with_the_message_cache_is_the_load_without_it(
    sf: SessionFactory, conv: str, summarise: bool
) -> None:
    """Beyond the load window too: the cache's read-ahead serves the same pages (where
    the load stops, what it folds, omits and keeps are unchanged) — on a first load, on
    loads after new rows, a deleted row and a longer history than the previous load."""
    from ctxstack.store.history_messages import HistoryMessageCache

    cache = HistoryMessageCache()

    async def both() -> None:
        kw: dict[str, Any] = {"budget": 3_000, "load_window": 1.5, "max_fold_chunks": 2}
        plain = memory(sf, conv, compact_llm=summariser() if summarise else None, **kw)
        cached = memory(sf, conv, compact_llm=summariser() if summarise else None,
                        message_cache=cache, **kw)
        expected = _load_outcome(plain, await plain.get_messages())
        assert _load_outcome(cached, await cached.get_messages()) == expected
        assert expected["omitted"] or expected["folded"] or expected["rows_read"] < 40

    await seed(sf, conv, 30, words=12)
    await both()
    await both()  # every row cached now
    await seed(sf, conv, 7, start=30, words=60)  # longer rows: the window ends sooner
    await both()
    async with sf() as session, session.begin():
        await session.execute(text(
            "DELETE FROM messages WHERE conversation_id = :c AND seq = 33"), {"c": conv})
    await both()
    await seed(sf, conv, 400, start=37, words=5)  # far more than the last load read
    await both()
    await both()


def test_what_the_cache_derives_from_a_message_lives_as_long_as_that_message() -> None:
    """``derived`` makes once per cached message: the same message gives the same copy
    back, also after the next load stored it again; a row built anew (another message
    object), an uncached message or a dropped conversation gets a fresh one."""
    from ctxstack.agent._decisions import context_message
    from ctxstack.store.history_messages import CachedRow, HistoryMessageCache, text_message

    made: list[ChatMessage] = []

    def make(message: ChatMessage) -> ChatMessage:
        made.append(message)
        return context_message(message)

    def cached(*rows: HistoryRow) -> dict[int, CachedRow]:
        return {r.seq: CachedRow(r, "{}", text_message(r)) for r in rows}

    cache = HistoryMessageCache(max_messages=3, min_rows=1)
    first = cached(HistoryRow(1, "user", "q1", {"kind": "query"}),
                   HistoryRow(2, "assistant", "a1", {}))
    cache.store("c", first)
    question = first[1].message
    copy = cache.derived("c", question, make)
    assert copy == context_message(question)
    assert copy.kind is None
    assert not copy.pinned
    assert cache.derived("c", question, make) is copy
    assert cache.derived("c", question.model_copy(), make) is not copy  # not the cached one
    assert cache.derived("other", question, make) is not copy
    # the next load keeps the message: so is its copy; a row built anew gets a new one
    second = {**first, 3: CachedRow(HistoryRow(3, "user", "q2", {"kind": "query"}), "{}",
                                    text_message(HistoryRow(3, "user", "q2",
                                                            {"kind": "query"})))}
    cache.store("c", second)
    assert cache.derived("c", question, make) is copy
    rebuilt = cached(HistoryRow(1, "user", "q1", {"kind": "query"}))
    cache.store("c", rebuilt)
    assert cache.derived("c", rebuilt[1].message, make) is not copy
    assert len(made) == 4
    cache.store("d", cached(*(HistoryRow(i, "user", "x", {}) for i in range(1, 4))))
    assert cache.rows("c") == {}
    assert "c" not in cache._derived
