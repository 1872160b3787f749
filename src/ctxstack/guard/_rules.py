"""The guard's pure rules: cutting oversized messages and capping pinned content.

No I/O, no state: each function takes messages and limits and returns new messages (the
same objects where nothing changed), so the rules are testable on their own and the
guard stays a small driver around them.

Cutting keeps the **head and the tail** of a text: tool output tends to put its structure
(headers, the first rows) at the start and its verdict (totals, the error, the last log
lines) at the end; the middle is what a reader skims. The marker in between says how many
characters were removed, so the model knows the text is incomplete and by how much.

Audio and file parts are exempt from the character limit and never cut: their base64 is
not text a reader skims, and any cut of it is a corrupt file. They count toward the token
budget by their size estimate instead (:mod:`ctxstack.tokens._parts`), where the later
stages keep or drop their message whole. The text parts around them are cut as usual,
the binary parts kept byte-identical (so is the refusal part: a short sentence).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ctxstack.messages import ChatMessage, ContentPart, TextPart
from ctxstack.tokens import TokenCounter

HEAD_SHARE = 0.6
"""Fraction of the kept characters taken from the start of a cut text."""

_SNAP = 0.1  # a cut moves to a line break if one lies within 10% of the kept length


def truncation_marker(removed: int) -> str:
    """The text standing where characters were cut out."""
    return f"\n\n[Truncated: {removed:,} characters removed]\n\n"


def cut_text(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its head and tail around a marker.

    The result, marker included, is never longer than ``max_chars`` (given room for the
    marker at all). Cuts move back to a line break when one is close, so lines stay whole.
    """
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(truncation_marker(len(text))))
    head_len = int(keep * HEAD_SHARE)
    tail_len = keep - head_len
    head = text[:head_len]
    tail = text[len(text) - tail_len:] if tail_len else ""
    newline = head.rfind("\n")
    if newline >= 0 and head_len - newline <= keep * _SNAP:
        head = head[: newline + 1]
    newline = tail.find("\n")
    if 0 <= newline <= keep * _SNAP:
        tail = tail[newline + 1:]
    removed = len(text) - len(head) - len(tail)
    return f"{head.rstrip()}{truncation_marker(removed)}{tail.lstrip()}"


def allocate(lengths: Sequence[int], budget: int) -> list[int]:
    """Share ``budget`` characters among pieces: short ones whole, long ones equally.

    Water-filling: pieces under the equal share keep their length, and what they leave
    unused goes to the longer ones. Used for the text parts of one message and for the
    string values of tool-call arguments.
    """
    out = list(lengths)
    if sum(lengths) <= budget:
        return out
    remaining = max(0, budget)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for position, i in enumerate(order):
        share = remaining // (len(order) - position)
        out[i] = min(lengths[i], share)
        remaining -= out[i]
    return out


def _text_size(message: ChatMessage) -> int:
    """Characters of the text parts: what the limit applies to (binary parts are exempt)."""
    content = message.content
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    return sum(len(p.text) for p in content if isinstance(p, TextPart))


def is_oversized(message: ChatMessage, max_chars: int) -> bool:
    """True when the content text, or any tool call's JSON arguments, exceed ``max_chars``
    (audio, file and image parts are not text and never make a message oversized)."""
    if _text_size(message) > max_chars:
        return True
    return any(len(call.arguments_json) > max_chars for call in message.tool_calls or ())


def _cut_parts(parts: list[ContentPart], max_chars: int) -> list[ContentPart]:
    texts = [(i, p) for i, p in enumerate(parts) if isinstance(p, TextPart)]
    shares = allocate([len(p.text) for _, p in texts], max_chars)
    out = list(parts)
    for (i, part), share in zip(texts, shares, strict=True):
        if len(part.text) > share:
            out[i] = TextPart(text=cut_text(part.text, share))
    return out


def _string_leaves(value: Any, path: tuple[Any, ...], into: list[tuple[tuple[Any, ...], str]]
                   ) -> None:
    if isinstance(value, str):
        into.append((path, value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _string_leaves(v, (*path, k), into)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _string_leaves(v, (*path, i), into)


def _replace_at(value: Any, path: tuple[Any, ...], new: str) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace_at(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace_at(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _cut_arguments(arguments: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Cut the long string values of a tool call's arguments so its JSON fits.

    The JSON escapes of the marker's line breaks are not known before cutting, so the
    budget is tightened by any overshoot and the cut redone (twice at most in practice).
    """
    leaves: list[tuple[tuple[Any, ...], str]] = []
    _string_leaves(arguments, (), leaves)
    budget = max_chars - (_json_len(arguments) - sum(len(s) for _, s in leaves))
    out: Any = arguments
    for _ in range(4):
        shares = allocate([len(s) for _, s in leaves], budget)
        out = arguments
        for (path, text), share in zip(leaves, shares, strict=True):
            if len(text) > share:
                out = _replace_at(out, path, cut_text(text, share))
        overshoot = _json_len(out) - max_chars
        if overshoot <= 0:
            break
        budget -= overshoot
    return dict(out)


def cut_message(message: ChatMessage, max_chars: int) -> ChatMessage:
    """``message`` if within ``max_chars``, else a copy with its text cut head+tail.

    Every other field (role, ids, name, pinned, metadata, images, audio and file parts
    byte-identical) is kept. Text parts of
    a multi-part content share the limit; tool-call arguments are cut per call, in their
    long string values (the JSON structure stays valid).
    """
    changes: dict[str, Any] = {}
    content = message.content
    if _text_size(message) > max_chars:
        if isinstance(content, str):
            changes["content"] = cut_text(content, max_chars)
        elif isinstance(content, list):
            changes["content"] = _cut_parts(content, max_chars)
    calls = message.tool_calls
    if calls and any(len(c.arguments_json) > max_chars for c in calls):
        changes["tool_calls"] = [
            c.model_copy(update={"arguments": _cut_arguments(c.arguments, max_chars)})
            if len(c.arguments_json) > max_chars else c
            for c in calls
        ]
    return message.replace(**changes) if changes else message


def cut_to_tokens(message: ChatMessage, max_tokens: int, counter: TokenCounter) -> ChatMessage:
    """Cut ``message``'s text head+tail until it costs at most ``max_tokens`` (if it can).

    Characters per token vary with the text, so the cut is proportional and then
    tightened; a message whose non-text cost (images, overhead) alone exceeds the limit
    is cut as far as its text allows.
    """
    tokens = counter.count_message(message)
    size = _text_size(message)
    candidate = message
    for _ in range(8):
        if tokens <= max_tokens or size == 0:
            break
        size = int(size * max_tokens / tokens * 0.95)
        candidate = cut_message(message, max(size, 0))
        tokens = counter.count_message(candidate)
    return candidate


def apply_pinned_cap(
    messages: list[ChatMessage], budget: int, cap: float, counter: TokenCounter
) -> tuple[list[ChatMessage], int, int]:
    """Keep pinned content within ``cap`` × ``budget`` tokens.

    The oldest injected messages (pinned, kind "inject") are unpinned first, one at a
    time, until pinned tokens fit; unpinned, they join the compactable pool. The current
    query (kind "query") is never unpinned: if pinned content still exceeds the cap, each
    pinned query is cut head+tail so that it fits what the other pinned messages leave
    (at least a quarter of the cap, so an over-pinned conversation still keeps a usable
    query). Returns ``(messages, unpinned, cut_queries)``; the list is ``messages`` itself
    when nothing changed.
    """
    limit = int(budget * cap)
    pinned_total = sum(counter.count_message(m) for m in messages if m.pinned)
    if pinned_total <= limit:
        return messages, 0, 0
    out = list(messages)
    unpinned = 0
    for i, m in enumerate(messages):
        if pinned_total <= limit:
            break
        if m.pinned and m.kind == "inject":
            out[i] = m.replace(pinned=False)
            pinned_total -= counter.count_message(m)
            unpinned += 1
    cut = 0
    if pinned_total > limit:
        for i, m in enumerate(out):
            if not (m.pinned and m.kind == "query"):
                continue
            own = counter.count_message(m)
            target = max(limit - (pinned_total - own), limit // 4)
            if own > target:
                out[i] = cut_to_tokens(m, target, counter)
                pinned_total += counter.count_message(out[i]) - own
                cut += 1
    return out, unpinned, cut
