"""The service's summary hierarchy (issue 29 item 5) on SQLite and PostgreSQL: checkpoints
expand to the stored messages they summarised, condensed ones to their children, across a
restart (a new engine over the same database), and a summary the turn's guard makes over a
loaded checkpoint keeps it as a child."""

from __future__ import annotations

from ctxstack import ContextGuard
from ctxstack.compaction import expand
from ctxstack.compaction._summaries import SUMMARY_REF_KEY
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.store import (
    CheckpointCandidate,
    SessionFactory,
    UserRecord,
    create_conversation,
    save_checkpoint,
    session_factory,
)
from ctxstack.store.archive import ConversationArchive
from ctxstack.store.memory import DbMemory
from ctxstack.store.messages import NewMessage, append_messages
from ctxstack.store.summaries import Checkpoint, build_nodes
from tests.store.dbkit import Backend


async def conversation(sf: SessionFactory, user: UserRecord, n: int) -> str:
    conv = await create_conversation(sf, user.id, "hierarchy")
    await append_messages(sf, conv.id, [
        NewMessage(role="user" if i % 2 == 0 else "assistant",
                   content=f"message number {i + 1:02d} " + "text " * 30)
        for i in range(n)])
    return conv.id


async def checkpoints(sf: SessionFactory, conv: str, owner: int, upto: list[int]) -> list[str]:
    refs = []
    for i, last in enumerate(upto, start=1):
        record = await save_checkpoint(sf, conv, CheckpointCandidate(
            summary=f"[Conversation summary]\nsummary {i} up to {last}", last_seq=last,
            token_count=10), owner_id=owner)
        refs.append(f"c{record.id}")
    return refs


async def own_seqs(archive: ConversationArchive, ref: str) -> list[int]:
    """The seqs a summary summarised itself, every page read, checked against the text."""
    out: list[int] = []
    page, pages = 1, 1
    while page <= pages:
        expansion = await expand(archive, ref, page, per_page=7)
        assert expansion is not None
        for item in expansion.messages:
            assert item.message is not None
            seq = int(item.ref[1:])
            assert item.message.text.startswith(f"message number {seq:02d} ")
            out.append(seq)
        page, pages = page + 1, expansion.pages
    return out


async def test_checkpoints_expand_to_their_messages_two_levels_deep_after_a_restart(
    backend: Backend, sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, 40)
    c1, c2, c3 = await checkpoints(sf, conv, alice.id, [10, 22, 30])

    restarted = backend.engine()  # a new engine: nothing kept in memory
    try:
        archive = ConversationArchive(session_factory(restarted), conv)
        top = await archive.get_summary(c3)
        assert top is not None
        assert (top.ref, top.children, top.count) == (c3, (c1, c2), 30)
        assert (top.first, top.last) == ("m1", "m30")
        assert top.text == "summary 3 up to 30"
        # nothing more than two expansions away, and the pieces tile 1..30 in order
        first = await expand(archive, c3)
        assert first is not None
        assert [c.ref for c in first.children] == [c1, c2]
        reached = [s for child in first.children for s in await own_seqs(archive, child.ref)]
        reached += await own_seqs(archive, c3)
        assert reached == list(range(1, 31))
        assert await own_seqs(archive, c2) == list(range(11, 23))
        # "summary" is the newest checkpoint; a turn sees only those before its question
        newest = await archive.get_summary("summary")
        assert newest is not None
        assert newest.ref == c3
        earlier = ConversationArchive(session_factory(restarted), conv, before_seq=25)
        at_question = await earlier.get_summary("summary")
        assert at_question is not None
        assert at_question.ref == c2
        assert await earlier.get_summary(c3) is None
        assert await archive.get_summary("c999999") is None
        assert await archive.get_summary("m3") is None
    finally:
        await restarted.dispose()


async def test_other_conversations_checkpoints_are_not_reachable(
    sf: SessionFactory, alice: UserRecord, bob: UserRecord
) -> None:
    mine = await conversation(sf, alice, 12)
    theirs = await conversation(sf, bob, 12)
    (theirs_ref,) = await checkpoints(sf, theirs, bob.id, [6])
    assert await ConversationArchive(sf, mine).get_summary(theirs_ref) is None
    assert await ConversationArchive(sf, mine).get_summary("summary") is None


async def test_a_guard_summary_over_a_loaded_checkpoint_keeps_it_as_a_child(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, 60)
    c1, c2 = await checkpoints(sf, conv, alice.id, [10, 20])
    memory = DbMemory(conv, session_factory=sf, budget=100_000, user_id=alice.id)
    history = await memory.get_messages()
    loaded = [m for m in history if m.kind == "summary"]
    assert [m.metadata[SUMMARY_REF_KEY] for m in loaded] == [c2]  # metadata only
    assert "Summary ref" not in loaded[0].text

    archive = ConversationArchive(sf, conv, before_seq=60)
    guard = ContextGuard(compact_llm=ScriptedLLM(handler=lambda m, t: "Guard summary."),
                         default_budget=1_000, archive=archive)
    check = await guard.check([ChatMessage.system("You help."), *history])
    assert check.event is not None
    assert check.event.method == "llm"
    ref = check.event.summary_ref
    assert ref is not None
    node = await archive.get_summary(ref)
    assert node is not None
    assert node.children == (c1, c2)  # the loaded checkpoint and the one it condensed
    own = await own_seqs(archive, ref)
    assert own == list(range(21, 21 + len(own)))  # the rows after the checkpoint, in order
    assert node.count == 20 + len(own)
    assert (node.first, node.last) == ("m1", f"m{own[-1]}")
    # its text names "summary", not its turn-scoped ref: saved as the next checkpoint, the
    # text is loaded by later turns, where "summary" is that checkpoint
    summary = next(m for m in check.messages if m.kind == "summary")
    assert 'with "summary"' in summary.text
    assert ref not in summary.text
    newest = await archive.get_summary("summary")
    assert newest is not None
    assert newest.ref == ref


def test_children_are_the_newest_checkpoint_of_each_earlier_span() -> None:
    rows = [Checkpoint(1, 10, "a"), Checkpoint(2, 10, "a again"), Checkpoint(3, 20, "b"),
            Checkpoint(4, 15, "after a rewrite")]
    nodes = build_nodes(rows, list(range(1, 21)))
    assert nodes[3].children == ("c2",)  # of two at seq 10, the newer; none later
    assert nodes[3].messages == tuple(f"m{i}" for i in range(11, 21))
    assert nodes[4].children == ("c2",)  # made after c3, but c3 covers more
    assert nodes[4].count == 15


async def test_the_checkpoint_a_load_offers_is_the_newest_summary_before_it_is_saved(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, 40)
    c1, c2 = await checkpoints(sf, conv, alice.id, [10, 20])
    offered = CheckpointCandidate(summary="[Conversation summary]\nup to 32", last_seq=32,
                                  token_count=5)
    archive = ConversationArchive(sf, conv, before_seq=40, pending=offered)
    newest = await archive.get_summary("summary")
    assert newest is not None
    assert (newest.ref, newest.children, newest.count) == ("c0", (c1, c2), 32)
    assert newest.text == "up to 32"
    assert await own_seqs(archive, "c0") == list(range(21, 33))

    # a summary the turn's guard makes over it keeps it as a child, after its own children
    context = [ChatMessage.system("You help."),
               ChatMessage.summary(offered.summary, **{SUMMARY_REF_KEY: "c0"})]
    context += [ChatMessage(role="user" if s % 2 else "assistant",
                            content=f"message number {s:02d} " + "text " * 90,
                            metadata={"seq": s})
                for s in range(33, 40)]
    guard = ContextGuard(compact_llm=ScriptedLLM(handler=lambda m, t: "Guard summary."),
                         default_budget=400, archive=archive)
    check = await guard.check(context)
    assert check.event is not None
    assert check.event.summary_ref is not None
    node = await archive.get_summary(check.event.summary_ref)
    assert node is not None
    assert node.children == (c1, c2, "c0")
    own = await own_seqs(archive, node.ref)
    assert own == list(range(33, 33 + len(own)))
    assert node.count == 32 + len(own)
    # without the offer, the newest is the newest saved checkpoint
    plain = await ConversationArchive(sf, conv, before_seq=40).get_summary("summary")
    assert plain is not None
    assert plain.ref == c2
