"""The guard's pure rules: head+tail cuts and the pinned cap."""

from __future__ import annotations

import re

from ctxstack.guard._rules import (
    allocate,
    apply_pinned_cap,
    cut_message,
    cut_text,
    cut_to_tokens,
    is_oversized,
)
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import HEURISTIC, SEED_HEURISTIC

MARKER = re.compile(r"\[Truncated: ([\d,]+) characters removed\]")


def _removed(text: str) -> int:
    m = MARKER.search(text)
    assert m is not None, "no truncation marker"
    return int(m.group(1).replace(",", ""))


def test_cut_text_keeps_head_and_tail_and_says_how_much_was_removed() -> None:
    text = "HEAD-" + "m" * 10_000 + "-TAIL"
    out = cut_text(text, 1_000)
    assert len(out) <= 1_000
    assert out.startswith("HEAD-mmm")
    assert out.endswith("mmm-TAIL")
    kept = len(out) - len(MARKER.search(out).group(0)) - 4  # type: ignore[union-attr]
    assert _removed(out) == len(text) - kept
    assert cut_text("short", 1_000) == "short"


def test_cut_text_prefers_whole_lines() -> None:
    lines = [f"line {i:05d} " + "x" * 40 for i in range(1_000)]
    out = cut_text("\n".join(lines), 5_000)
    head, tail = MARKER.split(out)[0], MARKER.split(out)[2]
    assert head.strip().splitlines()[-1] in lines  # no half line at the cut
    assert tail.strip().splitlines()[0] in lines
    assert len(out) <= 5_000


def test_allocate_is_water_filling() -> None:
    assert allocate([10, 20], 100) == [10, 20]
    assert allocate([10, 500, 1000], 310) == [10, 150, 150]
    assert allocate([100, 100], 50) == [25, 25]
    assert sum(allocate([7, 3000, 12, 9000], 1000)) <= 1000


def test_cut_message_keeps_every_other_field() -> None:
    msg = ChatMessage.tool(
        "call_9", "A" * 300 + "B" * 100_000 + "Z" * 300, name="fetch",
        pinned=True, metadata={"kind": "inject", "source": "web"},
    )
    assert is_oversized(msg, 50_000)
    cut = cut_message(msg, 50_000)
    assert cut is not msg
    assert (cut.role, cut.tool_call_id, cut.name, cut.pinned, cut.metadata) == (
        "tool", "call_9", "fetch", True, {"kind": "inject", "source": "web"}
    )
    assert isinstance(cut.content, str)
    assert len(cut.content) <= 50_000
    assert cut.content.startswith("A" * 300)
    assert cut.content.endswith("Z" * 300)
    assert _removed(cut.content) > 50_000
    assert msg.content is not None
    assert len(msg.content) == 100_600


def test_cut_message_shares_the_limit_among_text_parts_and_keeps_images() -> None:
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AAAA"))
    msg = ChatMessage.user([TextPart(text="caption"), img, TextPart(text="q" * 80_000)])
    cut = cut_message(msg, 10_000)
    assert isinstance(cut.content, list)
    assert cut.content[0] == TextPart(text="caption")
    assert cut.content[1] == img
    last = cut.content[2]
    assert isinstance(last, TextPart)
    assert len(last.text) <= 10_000 - len("caption")
    assert MARKER.search(last.text)


def test_cut_message_cuts_long_tool_call_arguments_and_keeps_valid_json() -> None:
    call = ToolCall(id="c1", name="write_file",
                    arguments={"path": "/tmp/out.txt", "body": "w" * 60_000, "n": 3})
    msg = ChatMessage.assistant("writing", tool_calls=[call, ToolCall(id="c2", name="ls")])
    assert is_oversized(msg, 50_000)
    cut = cut_message(msg, 50_000)
    assert cut.tool_calls is not None
    first, second = cut.tool_calls
    assert first.arguments["path"] == "/tmp/out.txt"
    assert first.arguments["n"] == 3
    assert MARKER.search(first.arguments["body"])
    assert len(first.arguments_json) <= 50_000
    assert second == ToolCall(id="c2", name="ls")
    assert cut.content == "writing"


def test_a_message_within_the_limit_is_returned_as_is() -> None:
    msg = ChatMessage.user("fine")
    assert not is_oversized(msg, 200)
    assert cut_message(msg, 200) is msg


def test_cut_to_tokens_fits_the_token_limit() -> None:
    msg = ChatMessage.user("日本語のテキスト" * 5_000, pinned=True, metadata={"kind": "query"})
    cut = cut_to_tokens(msg, 2_000, HEURISTIC)
    assert HEURISTIC.count_message(cut) <= 2_000
    assert HEURISTIC.count_message(cut) > 1_500  # not needlessly short
    assert cut.pinned
    assert cut.kind == "query"
    assert cut.text.startswith("日本語のテキスト")


def _pinned(kind: str, chars: int, label: str) -> ChatMessage:
    return ChatMessage.user(label + "x" * chars, pinned=True, metadata={"kind": kind})


def test_pinned_cap_unpins_the_oldest_injected_messages_first_and_never_the_query() -> None:
    system = ChatMessage.system("You are helpful.")
    inj1, inj2, inj3 = (_pinned("inject", 4_000, f"inject{i} ") for i in (1, 2, 3))
    query = _pinned("query", 4_000, "query ")
    msgs = [system, inj1, ChatMessage.assistant("ok"), inj2, inj3, query]
    snapshot = [m.model_dump() for m in msgs]
    # The seed's formula as the ruler (explicitly): 4 characters per token, exactly.
    # Each pinned message costs ~1,000 tokens: 4,000 pinned against a 2,500 cap (5,000 × 0.5).
    out, unpinned, cut = apply_pinned_cap(msgs, 5_000, 0.5, SEED_HEURISTIC)
    assert (unpinned, cut) == (2, 0)
    assert [m.pinned for m in out] == [False, False, False, False, True, True]
    assert out[1].text == inj1.text
    assert out[3].text == inj2.text
    assert out[4] is inj3
    assert out[5] is query
    assert sum(SEED_HEURISTIC.count_message(m) for m in out if m.pinned) <= 2_500
    assert [m.model_dump() for m in msgs] == snapshot  # input never mutated


def test_pinned_cap_cuts_a_huge_query_instead_of_unpinning_it() -> None:
    query = _pinned("query", 40_000, "QUESTION-START ")
    inject = _pinned("inject", 2_000, "inj ")
    msgs = [inject, query]
    out, unpinned, cut = apply_pinned_cap(msgs, 8_000, 0.5, SEED_HEURISTIC)
    assert (unpinned, cut) == (1, 1)
    assert out[1].pinned
    assert out[1].kind == "query"
    assert out[1].text.startswith("QUESTION-START")
    assert MARKER.search(out[1].text)
    assert SEED_HEURISTIC.count_message(out[1]) <= 4_000


def test_pinned_cap_under_the_limit_returns_the_same_list() -> None:
    msgs = [_pinned("inject", 100, "a"), _pinned("query", 100, "q")]
    out, unpinned, cut = apply_pinned_cap(msgs, 64_000, 0.5, HEURISTIC)
    assert out is msgs
    assert (unpinned, cut) == (0, 0)
