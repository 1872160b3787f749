"""Users, conversations, messages, checkpoints and model configs on both backends."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import select, text, update

from ctxstack.budget import ModelBudget
from ctxstack.errors import ConfigError, InputError
from ctxstack.llm import Usage
from ctxstack.messages import ChatMessage
from ctxstack.store import (
    CheckpointCandidate,
    NewMessage,
    SessionFactory,
    UserRecord,
    append_message,
    append_messages,
    append_messages_in,
    count_conversations,
    create_conversation,
    create_user,
    delete_conversation,
    get_active_model_config,
    get_conversation,
    get_user,
    latest_checkpoint,
    list_conversations,
    list_messages,
    list_model_configs,
    load_budget,
    load_budgets,
    rename_conversation,
    save_checkpoint,
    set_model_config,
    user_by_token,
)
from ctxstack.store.errors import NotFoundError, StorageError
from ctxstack.store.models import Conversation, Message, User


# ---------------------------------------------------------------- users
async def test_token_finds_its_user_and_only_the_hash_is_stored(sf: SessionFactory) -> None:
    user, token = await create_user(sf, "  dana  ")
    assert user.name == "dana"
    assert token.startswith("ctx_")
    assert len(token) > 40
    assert await user_by_token(sf, token) == user
    assert await user_by_token(sf, token + "x") is None
    assert await user_by_token(sf, "") is None
    async with sf() as session:
        stored = await session.scalar(select(User.token_hash).where(User.id == user.id))
    assert stored != token
    assert token not in (stored or "")
    assert (await get_user(sf, user.id)).name == "dana"
    with pytest.raises(NotFoundError):
        await get_user(sf, 10_000)


async def test_user_creation_refuses_bad_input(sf: SessionFactory) -> None:
    await create_user(sf, "erin", token="a-given-token-of-length")
    assert (await user_by_token(sf, "a-given-token-of-length")) is not None
    with pytest.raises(InputError, match="already exists"):
        await create_user(sf, "erin")
    with pytest.raises(InputError, match="must not be empty"):
        await create_user(sf, "   ")
    with pytest.raises(InputError, match="token: at least 16"):
        await create_user(sf, "frank", token="short")


# ---------------------------------------------------------------- conversations
async def test_conversations_are_scoped_to_their_owner(
    sf: SessionFactory, alice: UserRecord, bob: UserRecord
) -> None:
    first = await create_conversation(sf, alice.id)
    second = await create_conversation(sf, alice.id, "  Trip   planning ")
    theirs = await create_conversation(sf, bob.id, "Bob's")
    assert first.title == "New conversation"
    assert second.title == "Trip planning"
    assert len(first.id) == 32
    assert first.last_seq == 0
    # Newest activity first; bob's never listed for alice.
    await append_message(sf, first.id, NewMessage(role="user", content="hello"))
    listed = await list_conversations(sf, alice.id)
    assert [c.id for c in listed] == [first.id, second.id]
    assert await count_conversations(sf, alice.id) == 2
    assert [c.id for c in await list_conversations(sf, alice.id, limit=1, offset=1)] == [second.id]
    # Another owner's conversation looks exactly like a missing one.
    for call in (
        get_conversation(sf, theirs.id, owner_id=alice.id),
        rename_conversation(sf, alice.id, theirs.id, "mine now"),
        delete_conversation(sf, alice.id, theirs.id),
        list_messages(sf, theirs.id, owner_id=alice.id),
        append_message(sf, theirs.id, NewMessage(role="user", content="x"), owner_id=alice.id),
    ):
        with pytest.raises(NotFoundError, match="not found"):
            await call
    assert (await get_conversation(sf, theirs.id)).title == "Bob's"
    assert await list_messages(sf, theirs.id) == []


async def test_rename_validates_and_delete_cascades(sf: SessionFactory, alice: UserRecord) -> None:
    conv = await create_conversation(sf, alice.id)
    renamed = await rename_conversation(sf, alice.id, conv.id, "Budget\nreview")
    assert renamed.title == "Budget review"
    assert renamed.updated_at >= conv.updated_at
    with pytest.raises(InputError, match="title: must not be empty"):
        await rename_conversation(sf, alice.id, conv.id, " \n ")
    with pytest.raises(InputError, match="at most 200"):
        await rename_conversation(sf, alice.id, conv.id, "x" * 201)
    await append_messages(sf, conv.id, [NewMessage(role="user", content="a"),
                                        NewMessage(role="assistant", content="b")])
    await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="s", last_seq=1,
                                                           token_count=1))
    await delete_conversation(sf, alice.id, conv.id)
    with pytest.raises(NotFoundError):
        await get_conversation(sf, conv.id)
    async with sf() as session:
        left = await session.scalar(text("select count(*) from messages"))
        checkpoints = await session.scalar(text("select count(*) from compaction_checkpoints"))
    assert left == 0
    assert checkpoints == 0


@pytest.mark.parametrize("bad_id", ["", "../etc/passwd", "A" * 32, "1; drop table users", "x"])
async def test_malformed_conversation_ids_are_not_found(
    sf: SessionFactory, alice: UserRecord, bad_id: str
) -> None:
    with pytest.raises(NotFoundError):
        await get_conversation(sf, bad_id)
    with pytest.raises(NotFoundError):
        await append_message(sf, bad_id, NewMessage(role="user", content="x"))


# ---------------------------------------------------------------- messages
async def test_messages_get_consecutive_sequence_numbers_and_keep_their_data(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await create_conversation(sf, alice.id)
    one = await append_message(sf, conv.id, ChatMessage.user("Hi", metadata={"kind": "query"}))
    batch = await append_messages(sf, conv.id, [
        NewMessage(role="assistant", content="Hello!",
                   usage=Usage(input_tokens=120, output_tokens=30, calls=2)),
        NewMessage(role="user", content="Look", metadata={
            "images": [{"file_id": "0" * 32, "mime_type": "image/png"}]}),
    ])
    assert one.seq == 1
    assert [m.seq for m in batch] == [2, 3]
    assert one.kind == "query"
    stored = await list_messages(sf, conv.id)
    assert [(m.seq, m.role, m.content) for m in stored] == [
        (1, "user", "Hi"), (2, "assistant", "Hello!"), (3, "user", "Look")]
    assert stored[1].usage == Usage(input_tokens=120, output_tokens=30, calls=2)
    assert stored[2].image_refs == [{"file_id": "0" * 32, "mime_type": "image/png"}]
    assert stored[0].created_at.tzinfo is not None
    as_chat = stored[2].to_chat_message()
    assert as_chat.metadata["seq"] == 3
    assert as_chat.text == "Look"
    conv_after = await get_conversation(sf, conv.id)
    assert conv_after.last_seq == 3
    assert (conv_after.input_tokens, conv_after.output_tokens) == (120, 30)
    assert [m.seq for m in await list_messages(sf, conv.id, after_seq=1, limit=1)] == [2]
    assert [m.seq for m in await list_messages(sf, conv.id, roles=["assistant"])] == [2]
    assert await append_messages(sf, conv.id, []) == []


async def test_records_read_back_equal_what_was_stored_field_by_field(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """Rows become records by position (MessageRecord.from_row): every field of every
    kind of stored message comes back as written — read through a page and as the
    append's RETURNING — and the table's columns are in the order unpacked. A history
    load's tuples (HistoryRow) carry the same values."""
    from ctxstack.store.messages import (
        MESSAGE_COLUMNS,
        MessageRecord,
        page_statement,
        read_history_page,
    )
    from ctxstack.store.models import table_of

    assert tuple(c.name for c in table_of(Message).c) == MESSAGE_COLUMNS
    conv = await create_conversation(sf, alice.id)
    written = [
        NewMessage(role="user", content="Hi", metadata={"kind": "query", "pinned": True}),
        NewMessage(role="assistant", content=None,
                   usage=Usage(input_tokens=120, output_tokens=30, calls=2),
                   metadata={"status": "failed", "nested": {"a": [1, 2.5, None, "x"]}}),
        NewMessage(role="user", content="Look", metadata={
            "images": [{"file_id": "0" * 32, "mime_type": "image/png"}]}),
        NewMessage(role="tool", content="42", metadata={"tool_call_id": "call_1"}),
        NewMessage(role="system", content="日本語 ✓", metadata={"kind": "summary"}),
    ]
    returned = await append_messages(sf, conv.id, written)
    read = await list_messages(sf, conv.id)
    assert read == returned
    async with sf() as session:
        rows = list(await session.execute(page_statement(conv.id, roles=None)))
    by_name = [MessageRecord(**{**row._asdict(), "metadata": dict(row._asdict()["metadata"]),
                                "usage": row.usage and Usage.model_validate(row.usage)})
               for row in rows]
    assert read == by_name
    # a history load reads four columns into tuples: the same values
    async with sf() as session:
        history = await read_history_page(session, conv.id)
    user_or_assistant = [r for r in read if r.role in ("user", "assistant")]
    assert [(h.seq, h.role, h.content, h.metadata) for h in history] == [
        (r.seq, r.role, r.content, r.metadata) for r in user_or_assistant]
    assert [h.to_chat_message() for h in history] == [
        r.to_chat_message() for r in user_or_assistant]
    assert [h.image_refs for h in history] == [r.image_refs for r in user_or_assistant]
    async with sf() as session:
        newest = await read_history_page(session, conv.id, after_seq=1, limit=2,
                                         newest_first=True)
    assert [h.seq for h in newest] == [3, 2]
    for record, message in zip(read, written, strict=True):
        assert (record.role, record.content, record.metadata, record.usage) == (
            message.role, message.content, message.metadata, message.usage)
        assert record.kind == message.metadata.get("kind")
        assert record.conversation_id == conv.id
        assert record.created_at.tzinfo is not None
    assert read[3].to_chat_message() == ChatMessage.tool(
        "call_1", "42", metadata={"tool_call_id": "call_1", "seq": 4})
    assert read[2].image_refs == [{"file_id": "0" * 32, "mime_type": "image/png"}]


class _Abort(Exception):
    pass


async def test_append_inside_a_transaction_commits_or_rolls_back_with_it(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await create_conversation(sf, alice.id)
    await append_message(sf, conv.id, NewMessage(role="user", content="first"))
    numbered: list[int] = []

    async def append_then_fail() -> None:
        async with sf() as session, session.begin():
            records = await append_messages_in(session, conv.id, [
                NewMessage(role="assistant", content="lost", usage=Usage(input_tokens=5)),
            ], owner_id=alice.id)
            numbered.extend(r.seq for r in records)
            raise _Abort

    with pytest.raises(_Abort):
        await append_then_fail()
    assert numbered == [2]
    assert [m.content for m in await list_messages(sf, conv.id)] == ["first"]
    assert (await get_conversation(sf, conv.id)).last_seq == 1
    assert (await get_conversation(sf, conv.id)).input_tokens == 0

    async with sf() as session, session.begin():
        records = await append_messages_in(session, conv.id, [
            ChatMessage.assistant("kept"), NewMessage(role="user", content="next")])
        assert await append_messages_in(session, conv.id, []) == []
    assert [(r.seq, r.content) for r in records] == [(2, "kept"), (3, "next")]
    assert [m.seq for m in await list_messages(sf, conv.id)] == [1, 2, 3]

    bob, _ = await create_user(sf, "bob-in-tx")
    with pytest.raises(NotFoundError):
        async with sf() as session, session.begin():
            await append_messages_in(session, conv.id, [NewMessage(role="user", content="x")],
                                     owner_id=bob.id)
    with pytest.raises(NotFoundError):
        async with sf() as session, session.begin():
            await append_messages_in(session, "../x", [NewMessage(role="user", content="x")])
    assert (await get_conversation(sf, conv.id)).last_seq == 3


async def test_equal_timestamps_keep_sequence_order(sf: SessionFactory, alice: UserRecord) -> None:
    conv = await create_conversation(sf, alice.id)
    same = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    texts = [f"m{i}" for i in range(12)]
    for i, t in enumerate(texts):
        await append_message(sf, conv.id, NewMessage(
            role="user" if i % 2 == 0 else "assistant", content=t, created_at=same))
    stored = await list_messages(sf, conv.id)
    assert [m.content for m in stored] == texts
    assert {m.created_at for m in stored} == {same}


async def test_storing_embedded_images_or_tool_calls_is_refused(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await create_conversation(sf, alice.id)
    with_image = ChatMessage.user([
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ])
    with pytest.raises(InputError, match=r"FileStore\.save"):
        await append_message(sf, conv.id, with_image)
    tool_call = ChatMessage.assistant(None, tool_calls=[{"id": "c1", "name": "f"}])
    with pytest.raises(InputError, match="tool traffic"):
        await append_message(sf, conv.id, tool_call)
    assert await list_messages(sf, conv.id) == []


async def test_concurrent_turns_lose_and_reorder_nothing(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """Eight turns of one conversation save at once, each a user then an assistant message."""
    conv = await create_conversation(sf, alice.id)

    async def turn(n: int) -> list[int]:
        user = await append_message(sf, conv.id, NewMessage(role="user", content=f"q{n}"))
        await asyncio.sleep(0)
        answer = await append_message(sf, conv.id, NewMessage(role="assistant", content=f"a{n}"))
        batch = await append_messages(sf, conv.id, [
            NewMessage(role="user", content=f"q{n}b"),
            NewMessage(role="assistant", content=f"a{n}b"),
        ])
        return [user.seq, answer.seq, *(m.seq for m in batch)]

    seqs = await asyncio.gather(*(turn(n) for n in range(8)))
    stored = await list_messages(sf, conv.id)
    assert len(stored) == 32
    assert [m.seq for m in stored] == list(range(1, 33))
    by_seq = {m.seq: m.content for m in stored}
    for n, (q, a, qb, ab) in enumerate(seqs):
        # Each turn's own messages are stored in the order it saved them; a batch is
        # contiguous.
        assert q < a < qb
        assert ab == qb + 1
        assert [by_seq[q], by_seq[a], by_seq[qb], by_seq[ab]] == [f"q{n}", f"a{n}", f"q{n}b",
                                                                  f"a{n}b"]
    assert (await get_conversation(sf, conv.id)).last_seq == 32


async def test_a_lagging_sequence_counter_is_resynchronised(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """Rows written behind the counter's back (a restore, another tool) are not overwritten."""
    conv = await create_conversation(sf, alice.id)
    await append_messages(sf, conv.id, [NewMessage(role="user", content=str(i))
                                        for i in range(5)])
    async with sf() as session, session.begin():
        await session.execute(update(Conversation).where(Conversation.id == conv.id)
                              .values(last_seq=2))
    record = await append_message(sf, conv.id, NewMessage(role="assistant", content="next"))
    assert record.seq == 6
    assert [m.content for m in await list_messages(sf, conv.id)] == ["0", "1", "2", "3", "4",
                                                                     "next"]


async def test_unexpected_database_errors_are_storage_errors(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await create_conversation(sf, alice.id)
    async with sf() as session, session.begin():
        await session.execute(text("DROP TABLE messages"))
    with pytest.raises(StorageError, match=r"appending 1 message\(s\) to conversation"):
        await append_message(sf, conv.id, NewMessage(role="user", content="x"))
    with pytest.raises(StorageError, match="listing messages"):
        await list_messages(sf, conv.id)
    async with sf() as session:
        assert await session.scalar(select(Conversation.last_seq)) == 0  # rolled back


# ---------------------------------------------------------------- checkpoints
async def test_latest_checkpoint_is_the_one_covering_most(
    sf: SessionFactory, alice: UserRecord, bob: UserRecord
) -> None:
    conv = await create_conversation(sf, alice.id)
    assert await latest_checkpoint(sf, conv.id) is None
    await append_messages(sf, conv.id, [NewMessage(role="user", content=str(i))
                                        for i in range(10)])
    await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="up to 6", last_seq=6,
                                                           token_count=3))
    # A slower concurrent turn saves an older candidate afterwards: it must not win.
    await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="up to 4", last_seq=4,
                                                           token_count=3))
    latest = await latest_checkpoint(sf, conv.id, owner_id=alice.id)
    assert latest is not None
    assert (latest.summary, latest.last_seq, latest.method) == ("up to 6", 6, "llm")
    assert latest.created_at.tzinfo is not None
    again = await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="6 again",
                                                                   last_seq=6, token_count=2))
    assert (await latest_checkpoint(sf, conv.id)) == again
    with pytest.raises(InputError, match=r"covers up to message 11 but .* has only 10"):
        await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="x", last_seq=11,
                                                               token_count=1))
    with pytest.raises(NotFoundError):
        await save_checkpoint(sf, conv.id, CheckpointCandidate(summary="x", last_seq=1,
                                                               token_count=1), owner_id=bob.id)
    with pytest.raises(NotFoundError):
        await latest_checkpoint(sf, conv.id, owner_id=bob.id)


# ---------------------------------------------------------------- model configs / budget
async def test_budget_comes_from_the_active_model_config(sf: SessionFactory) -> None:
    env = {"LLM_CONTEXT_SIZE": "50000", "LLM_MAX_OUTPUT_TOKENS": "10000"}
    assert (await load_budget(sf, "main", env=env)).usable_input_tokens == 40_000
    await set_model_config(sf, "main", "big-model", context_size=32_000,
                           max_output_tokens=8_000)
    budget = await load_budget(sf, "main", env=env)
    assert isinstance(budget, ModelBudget)
    assert budget.usable_input_tokens == 24_000
    assert budget.sources == {"context_size": "db", "max_output_tokens": "db"}
    # A newer config replaces the old one; a NULL limit falls through to the environment.
    await set_model_config(sf, "main", "bigger-model", context_size=100_000)
    main = await load_budget(sf, "main", env=env)
    assert (main.context_size, main.max_output_tokens) == (100_000, 10_000)
    assert main.sources["max_output_tokens"] == "env:LLM_MAX_OUTPUT_TOKENS"
    # The fast role without its own row falls back to the main role's resolved values.
    fast = await load_budget(sf, "fast", env={})
    assert (fast.context_size, fast.sources["context_size"]) == (100_000, "main:db")
    assert (await load_budgets(sf, env={}))[1] == fast
    await set_model_config(sf, "fast", "small-model", context_size=16_000,
                           max_output_tokens=2_000)
    assert (await load_budget(sf, "fast", env={})).usable_input_tokens == 14_000
    # Both roles from one query (what the service reads per turn) resolve the same way.
    assert await load_budgets(sf, env=env) == (await load_budget(sf, "main", env=env),
                                                await load_budget(sf, "fast", env=env))
    active = await get_active_model_config(sf, "main")
    assert active is not None
    assert active.model == "bigger-model"
    history = await list_model_configs(sf)
    assert [(c.role, c.model, c.active) for c in history] == [
        ("fast", "small-model", True), ("main", "bigger-model", True),
        ("main", "big-model", False)]
    with pytest.raises(ConfigError, match="LLM_MAX_OUTPUT_TOKENS"):
        await load_budget(sf, "main", env={"LLM_MAX_OUTPUT_TOKENS": "abc"})


async def test_model_config_input_is_validated(sf: SessionFactory) -> None:
    with pytest.raises(InputError, match="role"):
        await set_model_config(sf, "huge", "m")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="context_size"):
        await set_model_config(sf, "main", "m", context_size=0)
    with pytest.raises(InputError, match="model"):
        await set_model_config(sf, "main", " ")
    assert await get_active_model_config(sf, "main") is None


async def test_concurrent_model_config_saves_leave_one_active(sf: SessionFactory) -> None:
    await asyncio.gather(*(set_model_config(sf, "main", f"m{i}", context_size=10_000 + i)
                           for i in range(4)))
    configs = await list_model_configs(sf)
    assert len(configs) == 4
    assert sum(c.active for c in configs) == 1


async def test_rows_are_in_the_tables_the_issue_names(sf: SessionFactory,
                                                       alice: UserRecord) -> None:
    conv = await create_conversation(sf, alice.id)
    await append_message(sf, conv.id, NewMessage(role="user", content="q",
                                                 metadata={"kind": "query"}))
    async with sf() as session:
        row = await session.scalar(select(Message))
    assert row is not None
    assert (row.kind, row.meta, row.seq) == ("query", {"kind": "query"}, 1)
