"""``ctxstack_recall`` inside the proxy: the upstream model reads back what was compacted.

Once something of a session has been compacted away (its archive is not empty,
:class:`~ctxstack.proxy.sessions.SessionArchive`), the forwarded request carries one more
tool, ``ctxstack_recall(query)``, in the wire's own tool format. When the upstream model
calls it, the proxy answers the call itself from the session's archive and calls the
upstream again — at most :data:`MAX_ROUNDS` times per client request; after that one last
call without the tool, whose answer goes to the client. The client never sees the tool:
not in its request's echo, not as a call in the answer or the stream.

What differs per wire (Chat Completions, Anthropic Messages, Responses) is behind
:class:`RecallWire`: adding and removing the tool, finding the recall calls in a complete
answer, appending one round (the model's call and the proxy's result) to the request,
hiding the calls from the answer, and reading / summing the usage. The loop itself
(:func:`recall_text`, the round bound) is shared.

``usage`` in the answer the client gets is the sum over every upstream call made for the
request (:class:`UpstreamUsage`), and :data:`USAGE_HEADER` says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxstack import ChatMessage, TokenCounter
from ctxstack.compaction import Archive, cut_text_tokens, expand
from ctxstack.compaction._archive import (
    MAX_QUERY_CHARS,
    SNIPPET_CHARS,
    quote_query,
    snippet,
)
from ctxstack.compaction._summaries import parse_page_ref, render_expansion
from ctxstack.llm.wire import reported_count

RECALL_TOOL = "ctxstack_recall"
MAX_ROUNDS = 3
USAGE_HEADER = "x-ctxstack-usage"
"""``sum; upstream_calls=N`` (the answer's ``usage`` sums N upstream calls), or ``sum``
on a stream (the figure in its final usage chunk is the sum)."""
RECALL_DESCRIPTION = (
    "Search the earlier part of this conversation that was summarised or cleared to save "
    "context (old tool outputs, older messages). Pass words, names or values to look for, "
    "or the ref a cleared output or the summary names (such as r12)."
)
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string",
                             "description": "what to look for, or an archive ref"}},
    "required": ["query"],
    "additionalProperties": False,
}
SEARCH_RESULTS = 5
MIN_RESULT_TOKENS = 64
_REF = re.compile(r"^\s*(?:ref\s*)?([ra]\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class RecallCall:
    """One call of the recall tool by the upstream model."""

    id: str
    query: str


def usage_count(value: object) -> int:
    """One figure of an upstream ``usage`` object: the count, or 0 when it is absent or
    not a count (:func:`ctxstack.llm.wire.reported_count`: negative, a bool, over 10**12 —
    the stats sum these into 64-bit counters)."""
    return reported_count(value) or 0


@dataclass(frozen=True)
class UpstreamUsage:
    """What one upstream answer (or a sum of them) reported, in wire-neutral terms."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    calls: int = 0

    def __add__(self, other: UpstreamUsage) -> UpstreamUsage:
        return UpstreamUsage(self.input_tokens + other.input_tokens,
                             self.output_tokens + other.output_tokens,
                             self.cache_read_tokens + other.cache_read_tokens,
                             self.cache_write_tokens + other.cache_write_tokens,
                             self.calls + other.calls)


class RecallWire(Protocol):
    """The wire-specific half of the recall loop (Chat: :mod:`ctxstack.proxy.chat_wire`)."""

    def tool_tokens(self, counter: TokenCounter) -> int:
        """What the recall tool's definition costs in the prompt."""
        ...

    def can_offer(self, body: Mapping[str, Any]) -> bool:
        """Whether this request may be offered the tool at all."""
        ...

    def add_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the recall tool added to its tools (a new dict)."""
        ...

    def remove_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` without the recall tool (the last call of a request)."""
        ...

    def recall_calls(self, answer: Mapping[str, Any]) -> list[RecallCall]:
        """The recall calls in a complete answer (empty: deliver it)."""
        ...

    def has_other_calls(self, answer: Mapping[str, Any]) -> bool:
        """Whether the answer also calls the client's own tools."""
        ...

    def strip(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer without its recall calls."""
        ...

    def append_round(self, body: dict[str, Any], answer: Mapping[str, Any],
                     results: Sequence[tuple[RecallCall, str]]) -> dict[str, Any]:
        """``body`` with the model's turn and the proxy's results appended."""
        ...

    def round_tokens(self, answer: Mapping[str, Any], counter: TokenCounter) -> int:
        """What the model's recall turn costs once appended (before the results)."""
        ...

    def usage(self, answer: Mapping[str, Any]) -> UpstreamUsage:
        """The usage one answer reports (zeros where it reports none)."""
        ...

    def with_usage(self, answer: dict[str, Any], usage: UpstreamUsage) -> dict[str, Any]:
        """The answer reporting ``usage`` (the sum) instead of its own."""
        ...


def with_tool(body: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` whose ``tools`` list ends with ``spec`` (the wire's recall tool)."""
    tools = body.get("tools")
    out = dict(body)
    out["tools"] = [*(tools if isinstance(tools, list) else []), spec]
    return out


def parse_query(arguments: object) -> str:
    """The ``query`` of a recall call's arguments (a JSON text or object); "" if none."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return str(arguments).strip()
    if isinstance(arguments, Mapping):
        query = arguments.get("query")
        return query.strip() if isinstance(query, str) else ""
    return ""


async def recall_text(archive: Archive, query: str, max_tokens: int,
                      counter: TokenCounter) -> str:
    """The tool result for one recall: a summary's expansion when the query is a summary
    ref the archive keeps (:func:`ctxstack.compaction.expand`; ``s3/2`` its next page), the
    message a ref names, or the best matches (the best whole when it fits, the others in
    the room left), within ``max_tokens``. Never
    raises for a bad query: the model reads what went wrong."""
    room = max(MIN_RESULT_TOKENS, max_tokens)
    if not query.strip():
        return "ctxstack_recall: pass a `query` (words to look for, or a ref such as r12)."
    page_ref = parse_page_ref(query)
    if page_ref is not None:
        expansion = await expand(archive, *page_ref)
        if expansion is not None:
            text = render_expansion(expansion, RECALL_TOOL, max_chars=room * 4)
            return cut_text_tokens(text, room, counter)
    ref = _REF.match(query)
    if ref is not None:
        found = await archive.get(ref.group(1).lower())
        if found is not None:
            return cut_text_tokens(f"[{ref.group(1)}] {_render(found)}", room, counter)
    hits = await archive.search(query, SEARCH_RESULTS)
    if not hits:
        return f"ctxstack_recall: nothing archived matches {quote_query(query)}."
    # The best match first and whole if it fits, the next ones in the room left: cutting
    # every match to an equal share cut the answer out of the best one when room was short
    # (a request near its budget). A match too long for the room left shows the part
    # around what the query names, not its head and tail (which cut the value out of
    # "The vault combination is 7391-ALPHA." in a long message).
    parts: list[str] = []
    left = room
    for h in hits:
        if left < MIN_RESULT_TOKENS // 2:
            break
        part = f"[{h.ref}] {_focused(_render(h.message), query, left - 8, counter)}"
        part = cut_text_tokens(part, left, counter)
        parts.append(part)
        left -= counter.count_text(part) + 2
    return cut_text_tokens("\n\n".join(parts), room, counter)


def _focused(text: str, query: str, room: int, counter: TokenCounter) -> str:
    """``text`` whole within ``room`` tokens, else about ``room`` tokens of it around the
    query's first match (:func:`~ctxstack.compaction._archive.snippet`)."""
    if counter.count_text(text) <= room:
        return text
    query = query[:MAX_QUERY_CHARS]
    chars = max(SNIPPET_CHARS, room * 4)
    piece = snippet(text, query, chars)
    while counter.count_text(piece) > room and chars > 40:  # narrower, the match kept
        chars = chars * 3 // 4
        piece = snippet(text, query, chars)
    return cut_text_tokens(piece, max(1, room), counter)


def _render(message: ChatMessage) -> str:
    label = message.role if message.role != "tool" else f"tool result {message.name or ''}"
    calls = " ".join(f"{c.name}({c.arguments_json})" for c in message.tool_calls or ())
    return f"({label.strip()}) {message.text} {calls}".strip()
