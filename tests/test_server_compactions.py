"""What the model remembers, over real HTTP on SQLite and PostgreSQL (issue 16).

A ``ctxstack serve --auth`` process talks to the stub LLM with a 4,000-token budget; turns
go on until the stored history is compacted on load. Then the ``compact`` event's counts
must match the stored messages exactly (counted over stored history only: never the
system prompt or the current question), the divider's position (``last_seq``) must be a
stored message, ``GET /api/conversations/{id}/compactions`` must return the same span,
summary and facts, and another user must get a 404. The ``context`` meter events must add
up. Pure parts (mid-turn fold counting, the meter's classification) are tested below
without a server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from ctxstack.budget import ModelBudget
from ctxstack.guard import CompactionEvent
from ctxstack.llm.stub import StubServer
from ctxstack.messages import ChatMessage
from ctxstack.server.compactions import GuardFold, Span, run_compaction, split_summary
from ctxstack.server.context_meter import measure, part_of
from tests.service_support import ServiceRule, SSEEvent, chat, llm_env, running_server
from tests.test_server_access import make_user
from tests.test_server_injects import PG_URL, pg_schema  # noqa: F401 (fixture)

LONG_ANSWER = ("Context windows are finite, so older turns must be compacted. " * 40).strip()
SUMMARY = "The user asked several questions about context windows."


@pytest.fixture(scope="module")
def stub() -> Iterator[tuple[StubServer, ServiceRule]]:
    rule = ServiceRule(answer=LONG_ANSWER, summary=SUMMARY)
    with StubServer(rule=rule) as server:
        yield server, rule


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> dict[str, str]:
    if request.param == "sqlite":
        return {}
    schema = request.getfixturevalue("pg_schema")
    return {"CTXSTACK_DATABASE_URL": PG_URL, "CTXSTACK_DATABASE_SCHEMA": schema}


def _compact_until_load(alice: httpx.Client, cid: str) -> tuple[SSEEvent, list[SSEEvent], int]:
    for turn in range(1, 12):
        events = chat(alice, cid, f"Question {turn}: tell me more about windows "
                                  f"(ticket TCK-{turn}00).")
        assert events[-1].event == "done", [e.event for e in events]
        found = [e for e in events if e.event == "compact" and e.data["scope"] == "load"]
        if found:
            return found[0], events, turn
    raise AssertionError("the history never compacted at a 4,000-token budget")


def test_compact_event_counts_stored_history_and_the_route_shows_the_summary(
    stub: tuple[StubServer, ServiceRule], backend: dict[str, str], tmp_path: Path
) -> None:
    server, _ = stub
    env = llm_env(server, LLM_CONTEXT_SIZE="8000", LLM_MAX_OUTPUT_TOKENS="4000", **backend)
    with running_server(tmp_path, env, auth=True) as proc, \
            make_user(proc, "alice") as alice, make_user(proc, "bob") as bob:
        cid = alice.post("/api/conversations", json={}).json()["id"]
        compact, events, turns = _compact_until_load(alice, cid)
        data = compact.data
        stored = alice.get(f"/api/conversations/{cid}/messages").json()
        earlier = stored[:-2]  # this turn's question and answer are not history
        assert len(earlier) == 2 * (turns - 1)
        assert data["original_messages"] == len(earlier)
        assert data["method"] == "llm"
        assert data["cleared_tool_outputs"] == 0
        summarized = data["summarized_messages"]
        assert summarized >= 1
        assert summarized + data["kept_messages"] == data["original_messages"]
        # the divider goes right after the last summarised stored message
        assert data["first_seq"] == earlier[0]["seq"]
        assert data["last_seq"] == earlier[summarized - 1]["seq"]
        assert data["summary"] == SUMMARY
        assert "TCK-100" in data["facts"]  # the first question's ticket, kept verbatim
        # after the summariser's compact_start / compact_end
        assert stored[-1]["events"][2] == {"event": "compact", "data": data}

        meters = [e.data for e in events if e.event == "context"]
        assert meters[0]["at"] == "load"
        assert [m["model_calls"] for m in meters[1:]] == list(range(1, len(meters)))
        for meter in meters:
            assert meter["budget"] == 4000
            assert meter["used"] == sum(meter["parts"].values())
            assert meter["parts"]["summary"] > 0, meters
            assert meter["parts"]["question"] > 0
        assert meters[-1]["parts"]["tools"] > 0  # the calculator's call and result
        stored_meters = [e for e in stored[-1]["events"] if e["event"] == "context"]
        assert stored_meters == [{"event": "context", "data": meters[-1]}]  # the last only

        listed = alice.get(f"/api/conversations/{cid}/compactions")
        assert listed.status_code == 200, listed.text
        [entry] = listed.json()
        assert entry["method"] == "llm"
        assert entry["summarized_messages"] == summarized
        assert (entry["first_seq"], entry["last_seq"]) == (data["first_seq"], data["last_seq"])
        assert entry["summary"] == SUMMARY
        assert entry["facts"] == data["facts"]

        assert bob.get(f"/api/conversations/{cid}/compactions").status_code == 404
        missing = alice.get("/api/conversations/" + "0" * 32 + "/compactions")
        assert missing.status_code == 404

        # The next turn starts from the checkpoint: the summary now covers at least as much.
        events = chat(alice, cid, "Question last: and now?")
        again = [e.data for e in events if e.event == "compact" and e.data["scope"] == "load"]
        for later in again:
            assert later["summarized_messages"] >= summarized
            assert later["first_seq"] == data["first_seq"]
        listed = alice.get(f"/api/conversations/{cid}/compactions").json()
        assert [c["last_seq"] for c in listed] == sorted(c["last_seq"] for c in listed)

        # Summaries keep their sources (issue 29): talk on until a summary condenses an
        # earlier one; each lists its children with their own spans, which tile its range.
        for turn in range(8):
            if len(listed) >= 2:
                break
            chat(alice, cid, f"Follow-up {turn}: and the ticket TCK-{turn}99?")
            listed = alice.get(f"/api/conversations/{cid}/compactions").json()
        assert len(listed) >= 2, listed
        refs = [c["ref"] for c in listed]
        assert all(re.fullmatch(r"c\d+", r) for r in refs), refs
        for i, entry in enumerate(listed):
            assert [c["ref"] for c in entry["children"]] == refs[:i]
            pieces = [*entry["children"], {"first_seq": entry["own_first_seq"],
                                           "last_seq": entry["own_last_seq"],
                                           "messages": entry["own_messages"]}]
            pieces = [p for p in pieces if p["messages"]]
            assert sum(p["messages"] for p in pieces) == entry["summarized_messages"]
            assert pieces[0]["first_seq"] == entry["first_seq"]
            assert pieces[-1]["last_seq"] == entry["last_seq"]
            for before, after in pairwise(pieces):
                assert before["last_seq"] < after["first_seq"]


# ---------------------------------------------------------------------------- pure parts
def _stored(seq: int, role: str = "user") -> ChatMessage:
    return ChatMessage(role=role, content=f"message {seq}", metadata={"seq": seq})  # type: ignore[arg-type]


def _event(method: str = "llm") -> CompactionEvent:
    return CompactionEvent(hint="react_iteration", method=method, budget=4000,  # type: ignore[arg-type]
                           messages_before=9, messages_after=4, tokens_before=5000,
                           tokens_after=2000, summarized=5)


def test_a_mid_turn_fold_counts_only_stored_messages() -> None:
    summary = ChatMessage.system("[Conversation summary]\nShort.\n\nFacts kept verbatim:\n- 42 EUR",
                                 metadata={"kind": "summary"})
    fold = GuardFold(stored_in=[5, 6, 7, 8], stored_out=[8], turn_in=4, turn_out=2, summary=summary)
    base = Span(count=4, first_seq=1, last_seq=4)
    data, span = run_compaction(_event(), fold, base)
    assert (data.summarized_messages, data.first_seq, data.last_seq) == (7, 1, 7)
    assert data.original_messages == 8
    assert data.kept_messages == 1
    assert data.turn_messages == 2
    assert data.scope == "run"
    assert (data.summary, data.facts) == ("Short.", ["42 EUR"])
    assert span == Span(count=7, first_seq=1, last_seq=7)


def test_a_truncation_mid_turn_summarises_nothing_new() -> None:
    fold = GuardFold(stored_in=[5, 6], stored_out=[6], turn_in=0, turn_out=0, summary=None)
    data, span = run_compaction(_event("truncate"), fold, Span(count=4, first_seq=1, last_seq=4))
    assert data.method == "truncate"
    assert data.summarized_messages == 4
    assert data.kept_messages == 1
    assert span.last_seq == 4


def test_split_summary_without_facts() -> None:
    assert split_summary("[Conversation summary]\nJust prose.") == ("Just prose.", [])


def test_meter_parts_add_up_and_classify_each_message() -> None:
    messages = [
        ChatMessage.system("You are helpful."),
        ChatMessage.system("[Conversation summary]\nEarlier.", metadata={"kind": "summary"}),
        _stored(3), _stored(4, "assistant"),
        ChatMessage.user("the question"),
        ChatMessage(role="tool", content="42", tool_call_id="c1"),
    ]
    assert [part_of(m) for m in messages] == [
        "system", "summary", "history", "history", "question", "tools"]
    budget = ModelBudget(context_size=8000, max_output_tokens=2000)
    data = measure(messages, budget)
    assert data.budget == 6000
    assert data.context_size == 8000
    assert data.used == sum(data.parts.model_dump().values()) > 0
    assert all(v > 0 for v in data.parts.model_dump().values())


def test_the_meter_counts_each_message_in_the_part_part_of_names() -> None:
    """Every part is the sum of its messages' counts as :func:`part_of` classifies them
    (odd ``seq`` values included)."""
    from ctxstack.tokens import HEURISTIC

    messages = [
        ChatMessage.system("You are helpful."),
        ChatMessage.system("[Conversation summary]\nEarlier."),
        ChatMessage.system("kind only", metadata={"kind": "summary", "seq": 2}),
        _stored(3), _stored(4, "assistant"),
        ChatMessage.user("a bool seq", metadata={"seq": True}),
        ChatMessage.user("a text seq", metadata={"seq": "5"}),
        ChatMessage.assistant("a float seq", metadata={"seq": 6.0}),
        ChatMessage.user("the question " * 7),
        ChatMessage(role="tool", content="42 " * 5, tool_call_id="c1"),
        ChatMessage(role="tool", content="stored tool", tool_call_id="c2", metadata={"seq": 9}),
    ]
    expected = dict.fromkeys(("system", "summary", "history", "tools", "question"), 0)
    for message in messages:
        expected[part_of(message)] += HEURISTIC.count_message(message)
    data = measure(messages, ModelBudget(context_size=8000, max_output_tokens=2000),
                   counter=HEURISTIC)
    assert data.parts.model_dump() == expected
    assert data.used == sum(expected.values())


def test_the_demo_budget_replaces_only_the_defaults() -> None:
    from ctxstack.budget import resolve_budget
    from ctxstack.server.demo_model import demo_budget

    first_run = demo_budget(resolve_budget("main", env={}))
    assert (first_run.context_size, first_run.max_output_tokens) == (8000, 4000)
    assert first_run.usable_input_tokens == 4000
    assert first_run.sources == {"context_size": "demo", "max_output_tokens": "demo"}
    fast = demo_budget(resolve_budget("fast", env={}))
    assert fast.usable_input_tokens == 4000
    # an operator's value always wins, number by number
    chosen = demo_budget(resolve_budget("main", env={"LLM_CONTEXT_SIZE": "32000"}))
    assert (chosen.context_size, chosen.max_output_tokens) == (32000, 4000)
    admin = demo_budget(resolve_budget("main", {"context_size": 16000, "max_output_tokens": 2000},
                                       env={}))
    assert admin.usable_input_tokens == 14000
    assert admin.sources == {"context_size": "db", "max_output_tokens": "db"}


async def test_fold_tracker_sees_each_check_and_keeps_what_a_compaction_folded() -> None:
    from ctxstack.guard import ContextGuard
    from ctxstack.llm import ScriptedLLM
    from ctxstack.server.compactions import FoldTracker

    seen: list[tuple[int, int, str]] = []
    folds = FoldTracker()
    guard = ContextGuard(
        compact_llm=ScriptedLLM(handler=lambda messages, tools: "Short summary."),
        default_budget=4000,
        on_check=[folds, lambda e: seen.append((len(e.messages_in), len(e.result.messages),
                                                e.hint))])
    history = [_stored(seq, "user" if seq % 2 else "assistant") for seq in range(1, 9)]
    long_history = [m.replace(content=f"{m.text} " + "words " * 600) for m in history]
    messages = [ChatMessage.system("You are helpful."), *long_history,
                ChatMessage.user("the question", pinned=True),
                ChatMessage(role="tool", content="42", tool_call_id="c1")]
    small = [ChatMessage.system("You are helpful."), _stored(1), ChatMessage.user("q")]
    assert await guard.check_and_compact(small, hint="react_iteration") == small
    assert folds.last_fold is None  # nothing was compacted
    out = await guard.check_and_compact(messages, hint="react_iteration")
    assert seen[0] == (3, 3, "react_iteration")
    assert seen[1] == (len(messages), len(out), "react_iteration")
    fold = folds.last_fold
    assert fold is not None
    assert fold.stored_in == list(range(1, 9))
    assert set(fold.stored_out) < set(fold.stored_in)
    assert fold.summary is not None
    assert split_summary(fold.summary.text)[0].startswith("Short summary.")
    data, after = run_compaction(_event(), fold, Span())
    assert after.last_seq == data.last_seq
    gone = sorted(set(fold.stored_in) - set(fold.stored_out))
    assert (data.summarized_messages, data.first_seq, data.last_seq) == (len(gone), 1, gone[-1])
    assert data.summarized_messages + data.kept_messages == data.original_messages == 8


def test_refolding_messages_the_load_showed_verbatim_counts_them_once() -> None:
    """Stored messages the load's summary already covers (seqs 5–6 of a span ending at 6,
    in a context a caller assembled) folded again mid-turn with seq 7 add only seq 7."""
    summary = ChatMessage.system("[Conversation summary]\nShort.", metadata={"kind": "summary"})
    base = Span(count=6, first_seq=1, last_seq=6)
    fold = GuardFold(stored_in=[5, 6, 7, 8], stored_out=[8], turn_in=0, turn_out=0,
                     summary=summary)
    data, span = run_compaction(_event(), fold, base)
    assert span == Span(count=7, first_seq=1, last_seq=7)
    assert (data.summarized_messages, data.last_seq) == (7, 7)
    again = GuardFold(stored_in=[5, 6], stored_out=[], turn_in=3, turn_out=0, summary=summary)
    data, span = run_compaction(_event(), again, base)
    assert span == base  # nothing stored beyond the span was folded
    assert (data.summarized_messages, data.last_seq) == (6, 6)


async def test_a_load_that_did_not_compact_counts_its_checkpoint_span_only_when_asked(
    tmp_path: Path,
) -> None:
    """The span a checkpoint covers is a COUNT over every row up to it: a load that did
    not compact leaves it pending (no query), and resolving it gives what counting at
    load time gave."""
    from sqlalchemy import event

    from ctxstack.server.compactions import PendingSpan, history_span, load_compaction, resolve_span
    from ctxstack.store import (
        CheckpointCandidate,
        NewMessage,
        append_messages,
        create_conversation,
        create_engine_from_url,
        create_user,
        save_checkpoint,
        session_factory,
        upgrade,
    )
    from ctxstack.store.memory import DbMemory

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'span.db'}")
    try:
        await upgrade(engine)
        sf = session_factory(engine)
        user, _ = await create_user(sf, "span")
        conv = (await create_conversation(sf, user.id)).id
        fresh = (await create_conversation(sf, user.id)).id
        rows = [NewMessage(role="user" if i % 2 == 0 else "assistant", content=f"m{i}")
                for i in range(30)]
        await append_messages(sf, conv, rows)
        await append_messages(sf, fresh, rows[:4])
        await save_checkpoint(sf, conv, CheckpointCandidate(
            summary="[Conversation summary]\nearlier talk", last_seq=20, token_count=8))
        counted: list[str] = []

        def remember(_c: object, _cur: object, statement: str, *_a: object) -> None:
            if "count(" in statement.lower():
                counted.append(statement)

        event.listen(engine.sync_engine, "before_cursor_execute", remember)
        memory = DbMemory(conv, session_factory=sf, budget=64_000)
        history = await memory.get_messages()
        assert memory.checkpoint is not None
        assert not memory.was_compacted
        data, span = await load_compaction(memory, history, sf)
        assert data is None
        assert span == PendingSpan(conv, 20)
        assert not counted  # nothing counted on the way
        event.remove(engine.sync_engine, "before_cursor_execute", remember)
        resolved = await resolve_span(span, sf)
        assert resolved == await history_span(sf, conv, 20)
        assert resolved == Span(count=20, first_seq=1, last_seq=20)
        assert await resolve_span(resolved, sf) is resolved
        plain = DbMemory(fresh, session_factory=sf, budget=64_000)
        assert await load_compaction(plain, await plain.get_messages(), sf) == (None, Span())
    finally:
        await engine.dispose()


def test_the_agent_expands_the_summary_with_recall_in_a_real_turn(
    backend: dict[str, str], tmp_path: Path
) -> None:
    """Issue 29: once the history is summarised, the service's agent calls
    ``recall(ref="summary")`` and reads the summary's sources: the stored messages it
    summarised itself, by their refs, in order."""
    rule = ServiceRule(answer=LONG_ANSWER, summary=SUMMARY, tool="recall",
                       arguments={"ref": "summary"})
    with StubServer(rule=rule) as server:
        env = llm_env(server, LLM_CONTEXT_SIZE="8000", LLM_MAX_OUTPUT_TOKENS="4000", **backend)
        with running_server(tmp_path, env, auth=True) as proc, \
                make_user(proc, "alice") as alice:
            cid = alice.post("/api/conversations", json={}).json()["id"]
            expanded: list[str] = []
            for turn in range(1, 14):
                events = chat(alice, cid, f"Question {turn}: tell me more about windows "
                                          f"(ticket TCK-{turn}00).")
                assert events[-1].event == "done", [e.event for e in events]
                expanded = [e.data["result"] for e in events if e.event == "step"
                            and e.data.get("kind") == "tool_result"
                            and e.data["tool"] == "recall"
                            and e.data["result"].startswith("[summary ")]
                if expanded:
                    break
            assert expanded, "the agent never expanded a summary"
            # the first summary is the load's, offered as this turn's checkpoint (c0): the
            # expansion's range is exactly what the load's compact event says it summarised
            load = next(e.data for e in events
                        if e.event == "compact" and e.data["scope"] == "load")
            head = re.match(r"\[summary c0: m(\d+) … m(\d+) \((\d+) messages\)\]", expanded[0])
            assert head is not None, expanded[0]
            assert int(head.group(1)) == load["first_seq"]
            assert int(head.group(2)) == load["last_seq"]
            assert int(head.group(3)) == load["summarized_messages"]
            # then its own messages, oldest first, by their refs (the preview is cut)
            assert f"\n[m{load['first_seq']} user] Question 1:" in expanded[0]
