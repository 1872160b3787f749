"""Audio and file parts under every stage that shortens a conversation.

The contract (``ctxstack.compaction._cut``, ``ctxstack.guard._rules``): a binary part is never
cut, never read as text; a message holding one keeps it byte-identical (the very part
object) or is dropped whole; summaries, facts and the archive index never see its base64.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstack import ChatMessage, ContextGuard, HistoryArchive
from ctxstack.compaction import CompactUtils
from ctxstack.compaction import cut_message as cut_to_budget
from ctxstack.compaction._archive import searchable_text
from ctxstack.compaction._cut import cut_group
from ctxstack.guard._rules import cut_message, cut_to_tokens, is_oversized
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import AudioPart, FilePart, TextPart, ToolCall
from ctxstack.messages._tool_turns import tool_turn_problems
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget
from ctxstack.tokens._parts import binary_part_tokens
from tests.conversations import conversation, fixed_tokens, rarely, snapshot

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
MARK = "PAYLOAD/0123+ORD-4521/"
"""Base64-alphabet text that looks like facts (digits, slashes, an order id): if any stage
read a payload as text, this would show up in a summary, a facts list or an index."""


def payload(chars: int) -> str:
    return (MARK * (chars // len(MARK) + 1))[: max(4, chars - chars % 4)]


def audio_part(chars: int, fmt: str = "mp3") -> AudioPart:
    return AudioPart.model_validate({"input_audio": {"data": payload(chars), "format": fmt}})


def pdf_part(chars: int) -> FilePart:
    return FilePart.model_validate({"file": {
        "file_data": f"data:application/pdf;base64,{payload(chars)}", "filename": "c.pdf"}})


def with_parts(text: str, *parts: AudioPart | FilePart, **kw: object) -> ChatMessage:
    return ChatMessage.user([TextPart(text=text), *parts], **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- unit rules
def test_the_oversize_rule_exempts_binary_parts_and_keeps_them_identical() -> None:
    big = audio_part(400_000)
    only_binary = with_parts("short", big)
    assert not is_oversized(only_binary, 50_000)
    assert cut_message(only_binary, 50_000) is only_binary

    message = with_parts("x" * 120_000, big, pdf_part(200_000))
    assert is_oversized(message, 50_000)
    cut = cut_message(message, 50_000)
    assert len(cut.text) <= 50_000
    assert "[Truncated:" in cut.text
    assert len(cut.binary_parts) == 2
    assert all(a is b for a, b in zip(cut.binary_parts, message.binary_parts, strict=True))
    assert isinstance(cut.content, list)
    assert [type(p) for p in cut.content] == [type(p) for p in message.content or []]


def test_a_pinned_query_cut_to_tokens_keeps_its_attachments() -> None:
    query = ChatMessage.query([TextPart(text="word " * 5_000), audio_part(2_000)])
    cut = cut_to_tokens(query, 400, HEURISTIC)
    assert cut.binary_parts[0] is query.binary_parts[0]
    assert len(cut.text) < len(query.text)


def test_token_cuts_keep_binary_parts_or_give_up_on_the_message() -> None:
    part = audio_part(40_000)  # ~30,000 bytes of mp3: 240 tokens
    cost = binary_part_tokens(part)
    message = with_parts("word " * 2_000, part)
    cut = cut_to_budget(message, cost + 200, HEURISTIC)
    assert cut is not None
    assert cut.binary_parts[0] is part
    assert HEURISTIC.count_message(cut) <= cost + 200
    assert cut_to_budget(message, cost - 1, HEURISTIC) is None  # dropped whole, never split
    group = cut_group([message], cost - 1, HEURISTIC)
    assert group is None


def test_images_may_go_but_binary_parts_stay() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    part = audio_part(4_000)
    message = ChatMessage.user([{"type": "text", "text": "look and listen " * 50}, image,
                                part])  # type: ignore[list-item]
    room = HEURISTIC.count_message(message) - 700  # less than the image costs
    cut = cut_to_budget(message, room, HEURISTIC)
    assert cut is not None
    assert not cut.images
    assert "image(s) omitted" in cut.text
    assert cut.binary_parts[0] is part


def test_summaries_facts_and_the_archive_never_read_base64() -> None:
    history = [
        ChatMessage.system("You are terse."),
        with_parts("Here is the contract for order ORD-77.", pdf_part(30_000)),
        ChatMessage.assistant("Read it: clause 4 sets a 30-day term."),
        with_parts("And my voice note.", audio_part(20_000)),
        ChatMessage.assistant("Noted: you want the term shortened to 14 days."),
        *[m for i in range(6) for m in (ChatMessage.user(f"question {i} " * 40),
                                        ChatMessage.assistant(f"answer {i} " * 40))],
        ChatMessage.query("What did we agree?"),
    ]
    llm = ScriptedLLM(handler=lambda messages, tools: "Summary: contract ORD-77, 14 days.")
    archive = HistoryArchive()
    guard = ContextGuard(compact_llm=llm, default_budget=1_500, archive=archive)
    out = asyncio.run(guard.check_and_compact(history))
    assert llm.calls
    for call in llm.calls:
        for m in call.messages:
            assert "PAYLOAD" not in m.text
    transcript = "\n".join(m.text for c in llm.calls for m in c.messages)
    assert "[file: c.pdf]" in transcript
    assert "[audio (mp3)]" in transcript
    for m in out:
        assert "PAYLOAD" not in m.text
        for part in m.binary_parts:
            assert any(part is p for h in history for p in h.binary_parts)
    for m in history:
        assert "PAYLOAD" not in searchable_text(m)
    hits = asyncio.run(archive.search("PAYLOAD ORD-4521", k=5))
    assert all("PAYLOAD" not in hit.snippet for hit in hits)


# --------------------------------------------------------------------------- properties
_binary = st.one_of(
    st.integers(200, 300_000).map(lambda n: audio_part(n, "mp3")),
    st.integers(200, 200_000).map(lambda n: audio_part(n, "flac")),
    st.integers(1_000, 120_000).map(pdf_part),
    st.just(FilePart.model_validate({"file": {"file_id": "file-abc"}})),
)


@st.composite
def attached(draw: st.DrawFn) -> tuple[list[ChatMessage], int]:
    """A random conversation whose user messages sometimes carry audio or files, each
    message tagged with its index; and a budget, as ``conversation_and_budget`` draws."""
    msgs: list[ChatMessage] = []
    for i, m in enumerate(draw(conversation(max_turns=10))):
        if m.role == "user" and draw(rarely(3)):
            parts = draw(st.lists(_binary, min_size=1, max_size=2))
            m = m.replace(content=[TextPart(text=m.text or "see attached"), *parts])
        msgs.append(m.replace(metadata={**m.metadata, "tag": i}))
    total = HEURISTIC.count_messages(msgs)
    fixed = fixed_tokens(msgs)
    if draw(rarely(8)):
        return msgs, max(40, int(fixed * draw(st.floats(0.1, 1.0))))
    return msgs, max(40, fixed + int(max(0, total - fixed) * draw(st.floats(0.0, 1.1))))


def check(out: Sequence[ChatMessage], msgs: Sequence[ChatMessage], budget: int) -> None:
    """Fits (when the fixed part does), order kept, no orphan tool turn, and every binary
    part kept — the very object — with its message, or the message gone whole."""
    if fixed_tokens(msgs) <= effective_budget(budget, HEURISTIC):
        assert HEURISTIC.count_messages(out) <= effective_budget(budget, HEURISTIC)
    assert tool_turn_problems(out) == []
    tags = [m.metadata["tag"] for m in out if "tag" in m.metadata]
    assert tags == sorted(tags), "order changed"
    assert len(set(tags)) == len(tags), "a message duplicated"
    for m in out:
        assert "PAYLOAD" not in m.text
        if "tag" not in m.metadata:
            assert not m.binary_parts  # a summary or note ctxstack made
            continue
        origin = msgs[m.metadata["tag"]]
        assert len(m.binary_parts) == len(origin.binary_parts)
        assert all(a is b for a, b in zip(m.binary_parts, origin.binary_parts, strict=True))
    for m in msgs:
        if m.pinned and m.kind == "query":
            assert any(o.metadata.get("tag") == m.metadata["tag"] for o in out)


@SETTINGS
@given(case=attached())
def test_smart_truncate_keeps_or_drops_binary_messages_whole(
        case: tuple[list[ChatMessage], int]) -> None:
    msgs, budget = case
    before = snapshot(msgs)
    out = CompactUtils.smart_truncate(msgs, budget)
    assert snapshot(msgs) == before, "input mutated"
    check(out, msgs, budget)


@SETTINGS
@given(case=attached(), keep_recent=st.integers(0, 6))
def test_llm_compaction_keeps_or_drops_binary_messages_whole(
        case: tuple[list[ChatMessage], int], keep_recent: int) -> None:
    msgs, budget = case
    llm = ScriptedLLM(handler=lambda messages, tools: "Summary: ORD-4521 discussed.")
    result = asyncio.run(CompactUtils.compact_detailed(msgs, llm, budget,
                                                       keep_recent=keep_recent))
    check(result.messages, msgs, budget)
    for call in llm.calls:
        assert all("PAYLOAD" not in m.text for m in call.messages)


@SETTINGS
@given(case=attached(), summarise=st.booleans(), max_chars=st.sampled_from([1_000, 50_000]))
def test_the_guard_keeps_or_drops_binary_messages_whole(
        case: tuple[list[ChatMessage], int], summarise: bool, max_chars: int) -> None:
    msgs, budget = case
    llm = ScriptedLLM(handler=lambda messages, tools: "Summary.") if summarise else None
    guard = ContextGuard(compact_llm=llm, default_budget=budget, max_message_chars=max_chars)
    out = asyncio.run(guard.check_and_compact(msgs))
    assert tool_turn_problems(out) == []
    tags = [m.metadata["tag"] for m in out if "tag" in m.metadata]
    assert tags == sorted(tags)
    for m in out:
        if "tag" in m.metadata:
            origin = msgs[m.metadata["tag"]]
            assert all(a is b for a, b in zip(m.binary_parts, origin.binary_parts,
                                               strict=True))
            assert len(m.binary_parts) == len(origin.binary_parts)
        else:
            assert not m.binary_parts


@pytest.mark.parametrize("max_chars", [1_000, 50_000])
def test_a_conversation_that_fits_passes_through_the_guard_untouched(max_chars: int) -> None:
    msgs = [ChatMessage.system("s"), with_parts("listen", audio_part(300_000)),
            ChatMessage.assistant("ok"), ChatMessage.query("and now?")]
    guard = ContextGuard(default_budget=64_000, max_message_chars=max_chars)
    out = asyncio.run(guard.check_and_compact(msgs))
    assert all(a is b for a, b in zip(out, msgs, strict=True))
    assert len(out) == len(msgs)


def test_tool_call_ids_stay_paired_around_binary_messages() -> None:
    call = ToolCall(id="c1", name="read", arguments={"q": "x"})
    msgs = [ChatMessage.system("s"), with_parts("file", pdf_part(100_000)),
            ChatMessage.assistant(None, tool_calls=[call]), ChatMessage.tool("c1", "y" * 4_000),
            ChatMessage.assistant("done"), ChatMessage.query("next")]
    for budget in (300, 1_000, 3_000, 8_000, 20_000):
        out = CompactUtils.smart_truncate(msgs, budget)
        assert tool_turn_problems(out) == []
        kept = [m for m in out if m.binary_parts]
        assert all(m is msgs[1] for m in kept)


def test_the_newest_message_is_cut_around_its_binary_part_when_that_fits() -> None:
    part = audio_part(8_000)
    newest = with_parts("word " * 3_000, part)
    msgs = [ChatMessage.system("s"), ChatMessage.user("hello"), ChatMessage.assistant("hi"),
            newest]
    budget = 1_200
    out = CompactUtils.smart_truncate(msgs, budget)
    assert HEURISTIC.count_messages(out) <= effective_budget(budget, HEURISTIC)
    assert out[-1] is not newest
    assert out[-1].binary_parts[0] is part
    assert out[-1].metadata["truncated_chars"] > 0
    too_small = CompactUtils.smart_truncate(msgs, binary_part_tokens(part) // 2)
    assert all(not m.binary_parts for m in too_small)  # dropped whole, not split


def test_masking_a_tool_output_that_carries_a_file_drops_the_file_whole() -> None:
    from ctxstack.compaction import CompactionOptions
    from ctxstack.compaction._mask import apply_mask, plan_mask

    msgs: list[ChatMessage] = [ChatMessage.system("s"), ChatMessage.user("go")]
    for i in range(4):
        call = ToolCall(id=f"c{i}", name="fetch", arguments={"n": i})
        output = ChatMessage(role="tool", tool_call_id=f"c{i}", content=[
            {"type": "text", "text": f"fetched report {i} " * 200},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,"
                                      + payload(40_000), "filename": f"r{i}.pdf"}}])
        msgs += [ChatMessage.assistant(None, tool_calls=[call]), output]
    msgs.append(ChatMessage.query("and?"))
    options = CompactionOptions()
    plan = plan_mask(msgs, 2_000, options, HEURISTIC)
    assert plan
    out = apply_mask(msgs, plan, [f"a{i}" for i in range(len(plan.indices))], options)
    for i in plan.indices:
        assert not out[i].binary_parts
        assert "PAYLOAD" not in out[i].text
        assert out[i].text.startswith("[tool output cleared: fetch(")
        assert f"characters and [file: r{i // 2 - 1}.pdf]; head:" in out[i].text
    for i, m in enumerate(out):
        if i not in plan.indices:
            assert m is msgs[i]
    assert tool_turn_problems(out) == []
