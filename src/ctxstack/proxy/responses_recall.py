"""The Responses side of ``ctxstack_recall`` (:mod:`ctxstack.proxy.recall`).

* :class:`ResponsesRecallWire` — :class:`~ctxstack.proxy.recall.RecallWire` for
  ``/v1/responses``: the tool is a ``{"type": "function", "name": "ctxstack_recall", …}``
  entry of ``tools``; a recall call is a ``function_call`` output item of that name; a
  round appends the model's turn (the whole output of that upstream response: its
  reasoning, any text, the calls) and one ``function_call_output`` item per call.
* :func:`responses_usage` — ``usage.input_tokens`` / ``output_tokens`` and
  ``input_tokens_details.cached_tokens`` (cache reads).
* :func:`hide_tool` — a response object as the client may see it: the recall tool gone
  from the ``tools`` it echoes (and from a ``tool_choice`` naming it), the recall calls
  gone from its ``output``.

With ``store: false`` the appended turn carries no item ids (the upstream keeps no items
to look them up by) and only the reasoning items that carry their ``encrypted_content``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack import TokenCounter
from ctxstack.proxy.recall import (
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RECALL_TOOL,
    RecallCall,
    UpstreamUsage,
    parse_query,
    usage_count,
)
from ctxstack.proxy.responses_request import CALL_OUTPUTS
from ctxstack.proxy.responses_view import ResponsesConversation, schema_tokens

RECALL_TOOL_SPEC: dict[str, Any] = {
    "type": "function", "name": RECALL_TOOL, "description": RECALL_DESCRIPTION,
    "parameters": RECALL_PARAMETERS,
}
CALL_OVERHEAD = 8
"""Tokens counted per ``function_call_output`` item beside its text."""


def is_recall(item: object) -> bool:
    """Whether an output item is a call of the recall tool."""
    return (isinstance(item, Mapping) and item.get("type") == "function_call"
            and item.get("name") == RECALL_TOOL)


def _is_recall_tool(tool: object) -> bool:
    return isinstance(tool, Mapping) and tool.get("name") == RECALL_TOOL \
        and tool.get("type") == "function"


def responses_usage(response: Mapping[str, Any]) -> UpstreamUsage:
    """The usage one response object reports (zeros where it reports none; ``calls`` 1)."""
    usage = response.get("usage")
    if not isinstance(usage, Mapping):
        return UpstreamUsage(calls=1)
    details = usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return UpstreamUsage(usage_count(usage.get("input_tokens")),
                         usage_count(usage.get("output_tokens")), usage_count(cached), 0, 1)


def hide_tool(response: Mapping[str, Any]) -> dict[str, Any]:
    """``response`` without any trace of the recall tool (a new dict; see module doc)."""
    out = dict(response)
    tools = response.get("tools")
    if isinstance(tools, list) and any(_is_recall_tool(t) for t in tools):
        out["tools"] = [t for t in tools if not _is_recall_tool(t)]
    if _is_recall_tool(response.get("tool_choice")):
        out["tool_choice"] = "auto"
    output = response.get("output")
    if isinstance(output, list) and any(is_recall(it) for it in output):
        out["output"] = [it for it in output if not is_recall(it)]
    return out


def _client_call(item: Mapping[str, Any]) -> bool:
    """An output item the client must act on (its own tool's call)."""
    kind = item.get("type")
    return (kind in CALL_OUTPUTS or (isinstance(kind, str) and kind.endswith("_call")
                                     and "call_id" in item)) and not is_recall(item)


class ResponsesRecallWire:
    """:class:`~ctxstack.proxy.recall.RecallWire` for the Responses API."""

    def tool_tokens(self, counter: TokenCounter) -> int:
        return counter.count_text(json.dumps(RECALL_TOOL_SPEC, separators=(",", ":")))

    def added_tokens(self, body: dict[str, Any], counter: TokenCounter) -> int:
        """What adding the tool to ``body`` adds to its schemas' count, exactly."""
        return schema_tokens(self.add_tool(body), counter) - schema_tokens(body, counter)

    def can_offer(self, body: Mapping[str, Any]) -> bool:
        """Not when the client turned tools off (``tool_choice: "none"``), and not beside
        a tool of the same name (the client's own ``ctxstack_recall``)."""
        tools = body.get("tools")
        return body.get("tool_choice") != "none" and not (
            isinstance(tools, list) and any(isinstance(t, Mapping)
                                            and t.get("name") == RECALL_TOOL for t in tools))

    def add_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = body.get("tools")
        return {**body, "tools": [*(tools if isinstance(tools, list) else []),
                                  RECALL_TOOL_SPEC]}

    def remove_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the client's own tools, in place (none: no ``tools`` at all)."""
        tools = body.get("tools")
        kept = [t for t in tools if not _is_recall_tool(t)] if isinstance(tools, list) else []
        return {**body, "tools": kept} if kept else {
            k: v for k, v in body.items() if k != "tools"}

    def recall_calls(self, answer: Mapping[str, Any]) -> list[RecallCall]:
        return [RecallCall(str(it.get("call_id") or ""), parse_query(it.get("arguments")))
                for it in _output(answer) if is_recall(it)]

    def has_other_calls(self, answer: Mapping[str, Any]) -> bool:
        return any(_client_call(it) for it in _output(answer))

    def strip(self, answer: dict[str, Any]) -> dict[str, Any]:
        return hide_tool(answer)

    def turn(self, answer: Mapping[str, Any], *, store: bool) -> list[dict[str, Any]]:
        """The model's turn of a recall round as input items (see the module doc)."""
        items: list[dict[str, Any]] = []
        for it in _output(answer):
            if not isinstance(it, Mapping):
                continue
            if it.get("type") == "reasoning":
                if store or it.get("encrypted_content"):
                    items.append(dict(it))
                continue
            items.append(dict(it) if store else {k: v for k, v in it.items() if k != "id"})
        return items

    def append_round(self, body: dict[str, Any], answer: Mapping[str, Any],
                     results: Sequence[tuple[RecallCall, str]]) -> dict[str, Any]:
        out = dict(body)
        current = body.get("input")
        out["input"] = [*(current if isinstance(current, list) else []),
                        *self.turn(answer, store=body.get("store") is not False),
                        *({"type": "function_call_output", "call_id": call.id, "output": text}
                          for call, text in results)]
        return out

    def round_tokens(self, answer: Mapping[str, Any], counter: TokenCounter) -> int:
        turn = self.turn(answer, store=True)
        calls = sum(1 for it in turn if is_recall(it))
        return ResponsesConversation(turn, None).conversation.tokens(counter) \
            + CALL_OVERHEAD * calls

    def usage(self, answer: Mapping[str, Any]) -> UpstreamUsage:
        return responses_usage(answer)

    def with_usage(self, answer: dict[str, Any], usage: UpstreamUsage) -> dict[str, Any]:
        own = answer.get("usage")
        own = own if isinstance(own, Mapping) else {}
        details = own.get("input_tokens_details")
        return {**answer, "usage": {
            **own, "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "input_tokens_details": {**(details if isinstance(details, Mapping) else {}),
                                     "cached_tokens": usage.cache_read_tokens}}}


def _output(answer: Mapping[str, Any]) -> list[Any]:
    output = answer.get("output")
    return output if isinstance(output, list) else []


WIRE = ResponsesRecallWire()
"""The one instance (the wire keeps no state)."""
