"""Summaries that keep their sources (issue 29 item 5): a summary's range and its
expansion round-trip, condensation stays two levels deep, and recall expands a summary."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack import ContextGuard, HistoryArchive
from ctxstack.agent._recall import recall_tool
from ctxstack.compaction import SummaryNode, SummaryStore, expand
from ctxstack.compaction._summaries import (
    SUMMARY_REF_KEY,
    condensed_children,
    make_node,
    parse_page_ref,
    render_expansion,
    summary_text,
    with_ref,
)
from ctxstack.guard import CompactionEvent
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.protocol import ToolSpec
from ctxstack.proxy.recall import recall_text
from ctxstack.tokens import HEURISTIC


def summariser() -> ScriptedLLM:
    """Answers every summary request with a numbered summary (the text is not under test)."""
    count = {"n": 0}

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> str:
        count["n"] += 1
        return f"Summary number {count['n']}: the user asked questions and got answers."

    return ScriptedLLM(handler=reply)


def exchange(k: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"Question Q{k:03d}: " + "words " * 40),
            ChatMessage.assistant(f"Answer A{k:03d}: " + "reply " * 40)]


async def grow(guard: ContextGuard, rounds: int, per_round: int = 12
               ) -> tuple[list[ChatMessage], list[ChatMessage], list[CompactionEvent]]:
    """Run a conversation through the guard: ``rounds`` × ``per_round`` exchanges, a check
    after each round. Returns (every original message in order, the final context, the
    compaction events)."""
    originals: list[ChatMessage] = []
    context = [ChatMessage.system("You are a helpful assistant.")]
    events: list[CompactionEvent] = []
    k = 0
    for _ in range(rounds):
        for _ in range(per_round):
            k += 1
            pair = exchange(k)
            originals.extend(pair)
            context.extend(pair)
        check = await guard.check(context)
        if check.event is not None:
            events.append(check.event)
        context = check.messages
    return originals, context, events


def context_summary(context: Sequence[ChatMessage]) -> ChatMessage:
    (summary,) = [m for m in context if m.kind == "summary"]
    return summary


async def all_pages(archive: HistoryArchive, ref: str) -> list[ChatMessage]:
    """The messages a summary summarised itself, every page read."""
    first = await expand(archive, ref)
    assert first is not None
    out = [m.message for m in first.messages]
    for page in range(2, first.pages + 1):
        more = await expand(archive, ref, page)
        assert more is not None
        out.extend(m.message for m in more.messages)
    assert all(m is not None for m in out)
    return [m for m in out if m is not None]


def texts(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.text for m in messages]


async def test_a_summary_records_the_range_it_covers_and_expands_to_it() -> None:
    archive = HistoryArchive()
    guard = ContextGuard(compact_llm=summariser(), default_budget=1_500, archive=archive)
    originals, context, events = await grow(guard, rounds=2)
    assert [e.method for e in events] == ["llm"]
    summary = context_summary(context)
    ref = summary.metadata[SUMMARY_REF_KEY]
    assert events[0].summary_ref == ref
    # the summary in the context names its ref, so the model can expand it
    assert f'"{ref}"' in summary.text
    node = await archive.get_summary(ref)
    assert node is not None
    assert node.children == ()
    assert node.level == 1
    # the range covers exactly the summarised messages: the originals before the first one
    # still verbatim in the context, in order
    verbatim = {m.text for m in context if m.kind != "summary" and m.role != "system"}
    folded = [m for m in originals if m.text not in verbatim]
    assert folded == originals[: len(folded)]
    assert folded
    assert node.count == len(folded) == events[0].summarized
    expanded = await all_pages(archive, ref)
    assert texts(expanded) == texts(folded)
    assert (await archive.get(node.first or "")).text == folded[0].text  # type: ignore[union-attr]
    assert (await archive.get(node.last or "")).text == folded[-1].text  # type: ignore[union-attr]


async def test_condensed_summary_keeps_its_childrens_ranges_two_levels_deep() -> None:
    archive = HistoryArchive()
    guard = ContextGuard(compact_llm=summariser(), default_budget=1_500, archive=archive)
    originals, context, events = await grow(guard, rounds=5)
    refs = [e.summary_ref for e in events]
    assert len(refs) >= 3, refs  # several condensations happened
    assert all(refs), refs
    top = await archive.get_summary(context_summary(context).metadata[SUMMARY_REF_KEY])
    assert top is not None
    assert top.ref == refs[-1]
    # every earlier summary is a child of the top one, oldest first (two levels, never a
    # chain): each keeps its own range, and the ranges tile the top one's without overlap
    assert list(top.children) == refs[:-1]
    children = [await archive.get_summary(r) for r in top.children]
    assert all(c is not None for c in children)
    tiled = [ref for c in children if c is not None for ref in c.messages] + list(top.messages)
    assert len(tiled) == len(set(tiled)) == top.count
    assert top.first == tiled[0]
    assert top.last == tiled[-1]

    # nothing is more than two expansions away: top → child → its messages, and together
    # they are every summarised original, in conversation order
    reached: list[ChatMessage] = []
    first = await expand(archive, top.ref)
    assert first is not None
    assert [c.ref for c in first.children] == list(top.children)
    for child in first.children:
        reached.extend(await all_pages(archive, child.ref))  # the second call
    reached.extend(await all_pages(archive, top.ref))
    verbatim = {m.text for m in context if m.kind != "summary" and m.role != "system"}
    folded = [m for m in originals if m.text not in verbatim]
    assert texts(reached) == texts(folded)


async def test_expansion_pages_are_bounded_and_name_the_next_page() -> None:
    archive = HistoryArchive()
    refs = await archive.add([ChatMessage.user(f"message M{i:02d} " + "x" * 3_000)
                              for i in range(45)])
    ref = await archive.add_summary(make_node("forty-five messages", refs, []))
    page1 = await expand(archive, ref, per_page=20)
    assert page1 is not None
    assert (page1.page, page1.pages) == (1, 3)
    assert [m.ref for m in page1.messages] == refs[:20]
    text = render_expansion(page1, max_chars=4_000)
    assert len(text) < 4_000 + 20 * 200  # every message cut to its share
    assert f'"{ref}/2"' in text
    assert "page 1 of 3" in text
    last = await expand(archive, *parse_page_ref(f"{ref}/3") or ("", 0))
    assert last is not None
    assert [m.ref for m in last.messages] == refs[40:]
    assert "More:" not in render_expansion(last)
    beyond = await expand(archive, ref, 4)
    assert beyond is not None
    assert beyond.messages == []
    assert "No page 4" in render_expansion(beyond)


async def test_unknown_refs_and_archives_without_summaries_expand_to_nothing() -> None:
    archive = HistoryArchive()
    assert await expand(archive, "s9") is None

    class MessagesOnly:  # an Archive that keeps no summaries
        async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
            return []

        async def search(self, query: str, k: int = 5) -> list[Any]:
            return []

        async def get(self, ref: str) -> ChatMessage | None:
            return None

        def __len__(self) -> int:
            return 0

    plain = MessagesOnly()
    assert not isinstance(plain, SummaryStore)
    assert await expand(plain, "s1") is None  # type: ignore[arg-type]
    assert parse_page_ref("what did we decide?") is None
    assert parse_page_ref(" s12 ") == ("s12", 1)
    assert parse_page_ref("s12/0") == ("s12", 1)


async def test_a_guard_whose_archive_keeps_no_summaries_still_compacts() -> None:
    class MessagesOnly(HistoryArchive):
        add_summary = None  # type: ignore[assignment]
        get_summary = None  # type: ignore[assignment]

    archive = MessagesOnly()
    assert not isinstance(archive, SummaryStore)
    guard = ContextGuard(compact_llm=summariser(), default_budget=1_500, archive=archive)
    _, context, events = await grow(guard, rounds=2)
    assert [e.method for e in events] == ["llm"]
    assert events[0].summary_ref is None
    summary = context_summary(context)
    assert SUMMARY_REF_KEY not in summary.metadata
    assert "Summary ref" not in summary.text
    assert len(archive) > 0  # what it folded was still archived


async def test_recall_tool_expands_a_summary_then_a_child() -> None:
    archive = HistoryArchive()
    guard = ContextGuard(compact_llm=summariser(), default_budget=1_500, archive=archive)
    _originals, context, _events = await grow(guard, rounds=3)
    tool = recall_tool(archive)
    top_ref = context_summary(context).metadata[SUMMARY_REF_KEY]
    first = await tool.call({"ref": top_ref})
    assert isinstance(first, str)
    assert first.startswith(f"[summary {top_ref}:")
    child = re.search(r"^- (s\d+): (a\d+) … (a\d+)", first, re.MULTILINE)
    assert child is not None, first
    second = await tool.call({"ref": child.group(1)})
    assert isinstance(second, str)
    # the child's expansion shows its own text (not in the context) and starts with the
    # conversation's first message
    assert "Its text: Summary number 1:" in second
    assert "Question Q001" in second
    assert f"[{child.group(2)} user]" in second
    # a message ref still reads one message whole
    whole = await tool.call({"ref": child.group(2)})
    assert isinstance(whole, str)
    assert "Question Q001" in whole


async def test_proxy_recall_expands_a_summary_ref_within_its_size() -> None:
    archive = HistoryArchive()
    refs = await archive.add([ChatMessage.user(f"note N{i} " + "y" * 2_000) for i in range(8)])
    ref = await archive.add_summary(make_node("eight notes", refs, []))
    text = await recall_text(archive, ref, 400, HEURISTIC)
    assert text.startswith(f"[summary {ref}:")
    assert "note N0" in text
    assert HEURISTIC.count_text(text) <= 400
    # a query that is no ref still searches
    hits = await recall_text(archive, "note N3", 400, HEURISTIC)
    assert "N3" in hits


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6))
def test_condensation_keeps_every_range_once_in_order(sizes: list[int]) -> None:
    """A rolling chain of summaries (each condensing the previous one and summarising
    ``sizes[i]`` new messages) keeps two levels, and its children's own ranges plus its
    own tile exactly the messages summarised so far, in order."""
    counter = iter(range(10_000))
    previous: SummaryNode | None = None
    chain: list[SummaryNode] = []
    every: list[str] = []
    for n, size in enumerate(sizes, start=1):
        own = [f"a{next(counter)}" for _ in range(size)]
        every.extend(own)
        earlier = [previous] if previous is not None else []
        lookup = {node.ref: node for node in chain}
        children = [lookup[r] for r in condensed_children(earlier)]
        node = make_node(f"summary {n}", own, children).model_copy(update={"ref": f"s{n}"})
        chain.append(node)
        for child in children:
            assert child.children == () or set(child.children) <= set(node.children)
        tiled = [r for c in children for r in c.messages] + list(node.messages)
        assert tiled == every
        assert node.count == len(every)
        assert (node.first, node.last) == ((every[0], every[-1]) if every else (None, None))
        assert list(node.children) == [f"s{i}" for i in range(1, n)]
        previous = node


def test_summary_text_drops_the_notes() -> None:
    node = SummaryNode(ref="s2", text="t", messages=("a1", "a2"), first="a1", last="a2",
                       count=2)
    message = with_ref(ChatMessage.summary("[Conversation summary]\nThe plan.\n\nHINT"), node)
    assert "Summary ref s2 covers a1 … a2 (2 messages)" in message.text
    assert summary_text(message, "HINT") == "The plan."


@settings(max_examples=15, deadline=None)
@given(rounds=st.lists(st.integers(min_value=1, max_value=14), min_size=2, max_size=5)
       .filter(lambda r: sum(r) >= 16),
       budget=st.integers(min_value=900, max_value=1_600),
       tool_every=st.integers(min_value=0, max_value=4))
def test_guard_summaries_tile_exactly_what_left_the_context(
    rounds: list[int], budget: int, tool_every: int
) -> None:
    """Whatever the conversation's growth and budget (tool turns whose outputs get cleared
    included): the newest summary's children's own messages plus its own are exactly the
    originals no longer in the context verbatim, in conversation order, each read back
    whole within two expansions."""
    import asyncio

    from ctxstack.messages import ToolCall

    async def run() -> None:
        archive = HistoryArchive()
        guard = ContextGuard(compact_llm=summariser(), default_budget=budget,
                             archive=archive)
        originals: list[ChatMessage] = []
        context = [ChatMessage.system("You are a helpful assistant.")]
        k = 0
        for size in rounds:
            for _ in range(size):
                k += 1
                if tool_every and k % tool_every == 0:
                    call = ToolCall(id=f"c{k}", name="lookup", arguments={"n": k})
                    turn = [ChatMessage.user(f"Look up L{k:03d}"),
                            ChatMessage.assistant(None, tool_calls=[call]),
                            ChatMessage.tool(f"c{k}", f"Output O{k:03d} " + "data " * 80,
                                             name="lookup"),
                            ChatMessage.assistant(f"Found O{k:03d}.")]
                else:
                    turn = exchange(k)
                originals.extend(turn)
                context.extend(turn)
            context = (await guard.check(context)).messages
        summaries = [m for m in context if m.kind == "summary"]
        assert summaries  # 16+ exchanges never fit 1,600 tokens: a summary was made
        top = await archive.get_summary(summaries[0].metadata[SUMMARY_REF_KEY])
        assert top is not None
        reached: list[str] = []
        first = await expand(archive, top.ref)
        assert first is not None
        for child in first.children:
            second = await expand(archive, child.ref, 1, 10_000)
            assert second is not None
            reached.extend(m.ref for m in second.messages)
        reached.extend(top.messages)
        assert len(reached) == top.count
        texts_back = [(await archive.get(r)) for r in reached]
        assert all(m is not None for m in texts_back)
        def key(m: ChatMessage) -> tuple[Any, ...]:
            if m.role == "tool":  # a cleared output's placeholder: its original's place
                return (m.role, m.tool_call_id)
            return (m.role, m.text, tuple(c.id for c in m.tool_calls or ()))

        still = {key(m) for m in context if m.kind != "summary" and m.role != "system"}
        gone = [key(m) for m in originals if key(m) not in still]
        assert [key(m) for m in texts_back if m is not None] == gone

    asyncio.run(run())
