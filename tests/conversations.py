"""Random conversations (Hypothesis) and the invariants every compaction must keep.

Shared by the compaction and memory property tests. Conversations are well formed — the
history opens with a user turn, every tool call has its results — and mix ASCII, CJK and
emoji text, images, pinned messages, tool groups, an optional earlier summary and
mid-conversation system notes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import strategies as st

from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import HEURISTIC

_ids = itertools.count()

WORDS = ["alpha", "order", "ORD-4521", "/srv/data.csv", "2024-03-15", "42", "$19.99", "ok"]
CJK = "日本語の会話テキスト注文番号価格東京中文测试"
EMOJI = "😀🎉🚀✨"

text_chunk = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join),
    st.text(alphabet=CJK, min_size=1, max_size=30),
    st.text(alphabet=EMOJI, min_size=1, max_size=5),
)
text = st.lists(text_chunk, min_size=0, max_size=25).map(" ".join)
short_text = st.lists(text_chunk, min_size=0, max_size=4).map(" ".join)
long_text = st.lists(text_chunk, min_size=10, max_size=120).map(" ".join)
any_text = st.one_of(text, text, long_text)

def rarely(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (plain integer ranges are biased to their ends)."""
    return st.sampled_from([False] * (n - 1) + [True])


IMAGE = ImagePart(image_url=ImageURL(url="data:image/png;base64,AAAA"))


@st.composite
def user_message(draw: st.DrawFn) -> ChatMessage:
    body = draw(any_text) or "hi"
    pinned = draw(rarely(8))
    if draw(rarely(10)):
        return ChatMessage.user([TextPart(text=body), IMAGE], pinned=pinned)
    meta = {"kind": "query"} if pinned else {}
    return ChatMessage.user(body, pinned=pinned, metadata=meta)


@st.composite
def tool_group(draw: st.DrawFn) -> list[ChatMessage]:
    n = draw(st.integers(1, 3))
    calls = [
        ToolCall(id=f"call_{next(_ids)}", name=draw(st.sampled_from(["search", "read"])),
                 arguments={"q": draw(text)})
        for _ in range(n)
    ]
    pinned = draw(rarely(16))
    group = [ChatMessage.assistant(draw(st.sampled_from([None, "checking"])), tool_calls=calls)]
    group += [ChatMessage.tool(c.id, draw(any_text), pinned=pinned and i == 0)
              for i, c in enumerate(calls)]
    return group


@st.composite
def turn(draw: st.DrawFn) -> list[ChatMessage]:
    out = [draw(user_message())]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["group", "group", "answer", "note"]))
        if kind == "group":
            out += draw(tool_group())
        elif kind == "answer":
            out.append(ChatMessage.assistant(draw(any_text)))
        else:
            out.append(ChatMessage.system(f"note: {draw(text)}", metadata={"kind": "warning"}))
    return out


@st.composite
def conversation(draw: st.DrawFn, max_turns: int = 12) -> list[ChatMessage]:
    msgs = [ChatMessage.system(f"You are a helpful assistant. {draw(short_text)}")
            for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()) and draw(st.booleans()):
        msgs.append(ChatMessage.system(f"{SUMMARY_PREFIX}\nEarlier: {draw(text)}",
                                       metadata={"kind": "summary"}))
    for _ in range(draw(st.integers(1, max_turns))):
        msgs += draw(turn())
    return msgs


@st.composite
def conversation_and_budget(draw: st.DrawFn, minimum: int = 20) -> tuple[list[ChatMessage], int]:
    """A conversation and a budget: mostly between its fixed part and 110% of its size.

    One case in eight draws a budget below the fixed part (system prompt + pinned), where
    only the "everything fixed is kept" properties apply.
    """
    msgs = draw(conversation())
    total = HEURISTIC.count_messages(msgs)
    fixed = fixed_tokens(msgs)
    if draw(rarely(8)):
        return msgs, max(minimum, int(fixed * draw(st.floats(0.1, 1.0))))
    share = draw(st.floats(0.0, 1.1))
    return msgs, max(minimum, fixed + int(max(0, total - fixed) * share))


# ---------------------------------------------------------------------- invariants
def is_summary(m: ChatMessage) -> bool:
    return m.role == "system" and m.kind == "summary"


def system_prompt(msgs: Sequence[ChatMessage]) -> list[ChatMessage]:
    out = []
    for m in msgs:
        if m.role != "system" or is_summary(m):
            break
        out.append(m)
    return out


def fixed_tokens(msgs: Sequence[ChatMessage]) -> int:
    """System prompt + pinned (non-summary) messages: what must always fit."""
    prompt = system_prompt(msgs)
    pinned = [m for m in msgs[len(prompt):] if m.pinned and not is_summary(m)]
    # a pinned tool result keeps its whole group
    groups: list[ChatMessage] = []
    for i, m in enumerate(msgs):
        if m.role == "assistant" and m.tool_calls:
            ids = {c.id for c in m.tool_calls}
            j = i + 1
            while j < len(msgs) and msgs[j].role == "tool" and msgs[j].tool_call_id in ids:
                j += 1
            if any(x.pinned for x in msgs[i:j]):
                groups += [x for x in msgs[i:j] if not x.pinned]
    return HEURISTIC.count_messages([*prompt, *pinned, *groups])


def same_origin(out: ChatMessage, original: ChatMessage) -> bool:
    """``out`` is ``original`` or a head+tail cut of it."""
    if out is original:
        return True
    return (
        "truncated_chars" in out.metadata
        and out.role == original.role
        and out.tool_calls == original.tool_calls
        and out.tool_call_id == original.tool_call_id
    )


def assert_subsequence(out: Sequence[ChatMessage], original: Sequence[ChatMessage]) -> None:
    it = iter(original)
    for m in out:
        assert any(same_origin(m, o) for o in it), f"out of order or invented: {m!r}"


def assert_tool_pairing(out: Sequence[ChatMessage]) -> None:
    for i, m in enumerate(out):
        if m.role == "tool":
            j = i - 1
            while j >= 0 and out[j].role == "tool":
                j -= 1
            assert j >= 0, "tool result at the start"
            owner = out[j]
            assert owner.role == "assistant", "tool result without call"
            assert owner.tool_calls, "tool result without call"
            assert m.tool_call_id in {c.id for c in owner.tool_calls}
        if m.role == "assistant" and m.tool_calls:
            answered = set()
            j = i + 1
            while j < len(out) and out[j].role == "tool":
                answered.add(out[j].tool_call_id)
                j += 1
            assert answered == {c.id for c in m.tool_calls}, "tool call without its results"


def assert_opens_with_user(out: Sequence[ChatMessage]) -> None:
    """The history opens with a user turn, unless the caller pinned the opening unit."""
    i = next((i for i, m in enumerate(out) if m.role != "system"), None)
    if i is None or out[i].role == "user":
        return
    group = [out[i]]
    j = i + 1
    while j < len(out) and out[j].role == "tool":
        group.append(out[j])
        j += 1
    assert any(m.pinned for m in group), f"opens with {out[i]!r}"


def snapshot(msgs: Sequence[ChatMessage]) -> list[tuple[int, dict[str, object]]]:
    return [(id(m), m.model_dump()) for m in msgs]


def budget_for(tokens: int, counter: object = HEURISTIC) -> int:
    """The smallest nominal budget whose usable part (after ``counter``'s margin, see
    :func:`ctxstack.tokens._counter.effective_budget`) holds ``tokens``: tests written as "a budget
    that fits exactly this much" stay exact whatever the default margin."""
    from ctxstack.tokens._counter import effective_budget

    budget = max(1, tokens)
    while effective_budget(budget, counter) < tokens:  # type: ignore[arg-type]
        budget += 1 + (tokens - effective_budget(budget, counter)) // 2  # type: ignore[arg-type]
    while budget > 1 and effective_budget(budget - 1, counter) >= tokens:  # type: ignore[arg-type]
        budget -= 1
    return budget
