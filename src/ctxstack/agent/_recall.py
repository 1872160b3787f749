"""The ``recall`` tool: the model reads back what compaction moved out of its context.

Offered by :class:`~ctxstack.agent.ReActAgent` (and so by every DAG step agent) whenever
its guard has an archive holding at least one message. Two uses, one tool:

* ``recall(query="...")`` — search the earlier conversation (the archive's ranked search,
  works for Chinese and Japanese); each hit shows its reference and a snippet;
* ``recall(ref="a7")`` — read one archived message whole (a cleared tool output's
  placeholder names its ref);
* ``recall(ref="s3")`` — expand a summary (the summary in the context names its ref):
  the earlier summaries it condensed, each with its range, and the messages it
  summarised itself, in order, a page at a time (``"s3/2"`` the next page; see
  :mod:`ctxstack.compaction._summaries`). Every original message is at most two such
  calls from the summary in the context.

The output is a tool result like any other: it enters the context through the same guard
on the next iteration (cut if oversized, masked later like any old output), and a message
read back is bounded here to :data:`MAX_RECALL_CHARS` around a truncation marker.
"""

from __future__ import annotations

from typing import Any

from ctxstack.agent._tools import Tool
from ctxstack.compaction import Archive, HistoryArchive
from ctxstack.compaction._archive import quote_query
from ctxstack.compaction._summaries import expand, parse_page_ref, render_expansion
from ctxstack.errors import ToolArgumentsError
from ctxstack.guard._rules import cut_text
from ctxstack.protocol import ToolSpec

RECALL_TOOL_NAME = "recall"
MAX_RECALL_CHARS = 12_000
SEARCH_RESULTS = 5

DESCRIPTION = (
    "Read back parts of this conversation archived to save context. `query` searches them "
    "(best matches with refs); `ref` reads one whole (a cleared output names its ref) or "
    "expands a summary (e.g. s3, or summary for the newest)."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "words, names or values to look for"},
        "ref": {"type": "string", "description": "a ref such as a7 or s3"},
    },
    "additionalProperties": False,
}


def _validate(arguments: Any) -> dict[str, Any]:
    query = arguments.get("query") or ""
    ref = arguments.get("ref") or ""
    unknown = set(arguments) - {"query", "ref"}
    if unknown:
        raise ToolArgumentsError(f"recall: unknown argument(s) {sorted(unknown)}")
    if not isinstance(query, str) or not isinstance(ref, str):
        raise ToolArgumentsError("recall: query and ref must be strings")
    if not query.strip() and not ref.strip():
        raise ToolArgumentsError("recall: pass a search `query` or an archive `ref`")
    return {"query": query.strip(), "ref": ref.strip()}


def recall_tool(archive: Archive) -> Tool:
    """A :class:`Tool` named ``recall`` over ``archive`` (see the module doc)."""

    async def recall(query: str = "", ref: str = "") -> str:
        if ref:
            page_ref = parse_page_ref(ref)
            if page_ref is not None:
                expansion = await expand(archive, *page_ref)
                if expansion is not None:
                    return render_expansion(expansion, RECALL_TOOL_NAME, MAX_RECALL_CHARS)
            message = await archive.get(ref)
            if message is None:
                return (f"No archived message has ref {quote_query(ref)}. "
                        "Search with `query` instead.")
            label = message.role if not message.name else f"{message.role} {message.name}"
            body = message.text
            for call in message.tool_calls or ():
                body += f"\n[tool call] {call.name}({call.arguments_json})"
            return f"[archived {label}, ref {ref}]\n{cut_text(body, MAX_RECALL_CHARS)}"
        hits = await archive.search(query, k=SEARCH_RESULTS)
        if not hits:
            return f"Nothing archived matches {quote_query(query)}."
        lines = [f"{len(hits)} archived message(s) match {quote_query(query)} (best first):"]
        for hit in hits:
            label = hit.message.role if not hit.message.name else hit.message.name
            lines.append(f"- ref {hit.ref} ({label}): {' '.join(hit.snippet.split())}")
        lines.append("Call recall with a ref to read one in full.")
        return "\n".join(lines)

    return Tool(RECALL_TOOL_NAME, DESCRIPTION, PARAMETERS, recall, validator=_validate)


def recall_spec() -> ToolSpec:
    """The ``recall`` tool's spec exactly as the agent offers it (its archive plays no part
    in it): what a caller rebuilding the tools of a call that offered recall — DbMemory's
    cache-aligned summary request — adds to its own."""
    return recall_tool(HistoryArchive()).spec()
