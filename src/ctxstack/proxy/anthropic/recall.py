"""``ctxstack_recall`` on the Anthropic Messages wire (:mod:`ctxstack.proxy.recall`).

* :class:`AnthropicRecallWire` — the :class:`~ctxstack.proxy.recall.RecallWire` of
  ``/v1/messages``: the tool is ``{"name", "description", "input_schema"}`` appended to
  ``tools``; a recall call is a ``tool_use`` block named ``ctxstack_recall``; a round
  appends the model's whole turn (its ``thinking`` blocks byte-identical, as Anthropic
  requires them back) and a user message whose ``tool_result`` blocks come first. The last
  call of a request keeps the tool's *definition* but sets ``tool_choice`` to ``none``:
  the model can no longer call it, and Anthropic refuses a request whose history holds
  ``tool_use`` / ``tool_result`` blocks without ``tools`` ("Requests which include
  tool_use or tool_result blocks must define tools", anthropics/anthropic-sdk-python#494;
  Bedrock's Claude says the same of its ``toolConfig``).
* :func:`anthropic_usage` — ``input_tokens``, ``output_tokens``,
  ``cache_read_input_tokens`` (cache reads), ``cache_creation_input_tokens`` (writes).
* :func:`answer_with_recall` — a JSON answer: recall calls answered from the session's
  archive and the upstream called again (at most :data:`~ctxstack.proxy.recall.MAX_ROUNDS`
  rounds), the calls removed, ``usage`` the sum.
* :func:`stream_with_recall` — an SSE answer relayed event by event as it arrives, held
  back only from the first ``ctxstack_recall`` ``tool_use`` block on; then either the next
  round's stream continues the same client message (its ``message_start`` dropped, its
  blocks renumbered after those already sent), or the held events are released without
  the recall blocks. The final ``message_delta`` reports the summed usage (the SDKs take
  its figures as the message's totals).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
from starlette.responses import Response

from ctxstack import TokenCounter
from ctxstack.proxy import recall as loop
from ctxstack.proxy.anthropic.errors import anthropic_error, error_body
from ctxstack.proxy.anthropic.relay import error_passthrough
from ctxstack.proxy.anthropic.units import to_units
from ctxstack.proxy.chat_wire import RecallRun, dumps_body
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.forwarding import read_error, response_headers
from ctxstack.proxy.recall import RECALL_TOOL, RecallCall, UpstreamUsage, usage_count
from ctxstack.proxy.request import guard_view

log = logging.getLogger("ctxstack.proxy")

RECALL_TOOL_SPEC: dict[str, Any] = {
    "name": RECALL_TOOL, "description": loop.RECALL_DESCRIPTION,
    "input_schema": loop.RECALL_PARAMETERS,
}


def anthropic_usage(usage: object, calls: int = 1) -> UpstreamUsage:
    """An Anthropic ``usage`` object in wire-neutral terms (zeros where absent)."""
    if not isinstance(usage, Mapping):
        return UpstreamUsage(calls=calls)
    return UpstreamUsage(usage_count(usage.get("input_tokens")),
                         usage_count(usage.get("output_tokens")),
                         usage_count(usage.get("cache_read_input_tokens")),
                         usage_count(usage.get("cache_creation_input_tokens")), calls)


def usage_object(usage: UpstreamUsage, base: object = None) -> dict[str, Any]:
    """``base`` (an Anthropic ``usage`` object) reporting ``usage``'s figures."""
    out: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
    out.update(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
               cache_read_input_tokens=usage.cache_read_tokens,
               cache_creation_input_tokens=usage.cache_write_tokens)
    return out


def _blocks(answer: Mapping[str, Any]) -> list[Any]:
    content = answer.get("content")
    return content if isinstance(content, list) else []


def _is_recall(block: object) -> bool:
    return (isinstance(block, Mapping) and block.get("type") == "tool_use"
            and block.get("name") == RECALL_TOOL)


def _is_call(block: object) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use"


class AnthropicRecallWire:
    """:class:`~ctxstack.proxy.recall.RecallWire` for Anthropic Messages."""

    def tool_tokens(self, counter: TokenCounter) -> int:
        return counter.count_text(json.dumps(RECALL_TOOL_SPEC, separators=(",", ":")))

    def can_offer(self, body: Mapping[str, Any]) -> bool:
        """Not when the client turned tools off or forces one tool, not when a tool of its
        own has the name, not after a prefilled assistant turn (the answer continues it)."""
        choice = body.get("tool_choice")
        if isinstance(choice, Mapping) and choice.get("type") in ("none", "tool"):
            return False
        tools = body.get("tools")
        if isinstance(tools, list) and any(
                isinstance(t, Mapping) and t.get("name") == RECALL_TOOL for t in tools):
            return False
        messages = body.get("messages")
        return not (isinstance(messages, list) and messages
                    and isinstance(messages[-1], Mapping)
                    and messages[-1].get("role") == "assistant")

    def added_tokens(self, body: Mapping[str, Any], counter: TokenCounter) -> int:
        """What adding the tool to ``body`` adds to the count of its ``tools``, exactly as
        the fitter counts them (their compact JSON)."""
        def count(tools: object) -> int:
            return counter.count_text(json.dumps(tools, ensure_ascii=False,
                                                 separators=(",", ":"))) if tools else 0
        tools = body.get("tools")
        return count(self.add_tool(dict(body))["tools"]) - count(tools)

    def add_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        return loop.with_tool(body, RECALL_TOOL_SPEC)

    def remove_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        out = dict(body)
        out["tool_choice"] = {"type": "none"}
        return out

    def recall_calls(self, answer: Mapping[str, Any]) -> list[RecallCall]:
        return [RecallCall(str(b.get("id") or ""), loop.parse_query(b.get("input")))
                for b in _blocks(answer) if _is_recall(b)]

    def has_other_calls(self, answer: Mapping[str, Any]) -> bool:
        return any(_is_call(b) and not _is_recall(b) for b in _blocks(answer))

    def strip(self, answer: dict[str, Any]) -> dict[str, Any]:
        blocks = _blocks(answer)
        kept = [b for b in blocks if not _is_recall(b)]
        out = dict(answer)
        out["content"] = kept
        if answer.get("stop_reason") == "tool_use" and not any(_is_call(b) for b in kept):
            out["stop_reason"] = "end_turn"
        return out

    def append_round(self, body: dict[str, Any], answer: Mapping[str, Any],
                     results: Sequence[tuple[RecallCall, str]]) -> dict[str, Any]:
        out = dict(body)
        turn = {"role": "assistant", "content": _blocks(answer)}
        answers = {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": text}
            for call, text in results]}
        out["messages"] = [*body["messages"], turn, answers]
        return out

    def round_tokens(self, answer: Mapping[str, Any], counter: TokenCounter) -> int:
        units = to_units(None, [{"role": "assistant", "content": _blocks(answer)}])
        return sum(counter.count_message(guard_view(d, i)) for i, d in enumerate(units.dicts))

    def usage(self, answer: Mapping[str, Any]) -> UpstreamUsage:
        return anthropic_usage(answer.get("usage"))

    def with_usage(self, answer: dict[str, Any], usage: UpstreamUsage) -> dict[str, Any]:
        out = dict(answer)
        out["usage"] = usage_object(usage, answer.get("usage"))
        return out


Opener = Callable[[bytes], Awaitable[httpx.Response]]
Done = Callable[[UpstreamUsage, int], None]
"""Called once per client request: the summed usage and the recall rounds made."""


# ----------------------------------------------------------------- JSON answers
async def answer_with_recall(first: httpx.Response, run: RecallRun, open_next: Opener,
                             extra: Mapping[str, str], done: Done) -> Response:
    """The JSON answer of a request offered the tool (see the module doc). A completed
    answer is delivered, never asked for again; a later round's error passes through.

    Raises:
        ProxyError: a round's body could not be read (502/504).
    """
    try:
        outcome = await run.answer(first, open_next)
    finally:
        done(run.usage, run.rounds)
    last, raw, data = outcome.last, outcome.raw, outcome.data
    if outcome.failed:
        return error_passthrough(last, raw, data, extra)
    headers = response_headers(last, {**extra, loop.USAGE_HEADER:
                                      f"sum; upstream_calls={run.usage.calls}"},
                               keep_length=False)
    if data is None:
        log.warning("proxy: the Anthropic upstream answered %d with a body that is not "
                    "JSON (%d bytes)", last.status_code, len(raw))
        return anthropic_error(502, "the upstream model server sent an answer that is not "
                               "valid JSON", dict(extra))
    if run.rounds == 0 and not outcome.stripped:
        return Response(raw, status_code=last.status_code, headers=headers)
    final = run.wire.with_usage(data, run.usage) if isinstance(data, dict) and run.rounds \
        else data
    return Response(dumps_body(final), status_code=last.status_code, headers=headers)


# ----------------------------------------------------------------- streams
class _Event:
    """One Server-Sent Event: its bytes as received and its decoded ``data``."""

    __slots__ = ("data", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        lines = [line[5:].strip() for line in raw.decode("utf-8", "replace").splitlines()
                 if line.startswith("data:")]
        try:
            found = json.loads("\n".join(lines)) if lines else None
        except json.JSONDecodeError:
            found = None
        self.data: dict[str, Any] = found if isinstance(found, dict) else {}

    @property
    def type(self) -> str:
        kind = self.data.get("type")
        return kind if isinstance(kind, str) else ""

    @property
    def index(self) -> int | None:
        index = self.data.get("index")
        return index if isinstance(index, int) and not isinstance(index, bool) else None


def _encode(data: Mapping[str, Any]) -> bytes:
    return b"event: " + str(data.get("type", "")).encode() + b"\ndata: " + dumps_body(
        data) + b"\n\n"


def _split(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete events (each with its blank-line end) and the rest of ``buffer``."""
    out: list[bytes] = []
    while True:
        cuts = [(i, n) for i, n in ((buffer.find(b"\n\n"), 2), (buffer.find(b"\r\n\r\n"), 4))
                if i >= 0]
        if not cuts:
            return out, buffer
        end, size = min(cuts)
        out.append(buffer[:end + size])
        buffer = buffer[end + size:]


class _Round:
    """What one upstream stream said: its blocks (rebuilt from their deltas, for the next
    round's assistant turn), its usage (the last figure of each field wins: message_delta
    repeats cumulative usage), the recall blocks' indexes."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, str] = {}
        self.usage: dict[str, Any] = {}
        self.recall: set[int] = set()
        self.failed = False

    def note(self, event: _Event) -> None:
        data = event.data
        kind = event.type
        index = event.index
        if kind == "message_start" and isinstance(data.get("message"), Mapping):
            self._usage(data["message"].get("usage"))
        elif kind == "message_delta":
            self._usage(data.get("usage"))
        elif kind == "error":
            self.failed = True
        elif kind == "content_block_start" and index is not None:
            block = data.get("content_block")
            self.blocks[index] = dict(block) if isinstance(block, Mapping) else {}
            if _is_recall(block):
                self.recall.add(index)
        elif kind == "content_block_delta" and index is not None and index in self.blocks:
            self._delta(self.blocks[index], index, data.get("delta"))

    def _usage(self, usage: object) -> None:
        if isinstance(usage, Mapping):
            self.usage.update({k: v for k, v in usage.items() if v is not None})

    def _delta(self, block: dict[str, Any], index: int, delta: object) -> None:
        if not isinstance(delta, Mapping):
            return
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature", ""))
        elif kind == "input_json_delta":
            self.partial[index] = self.partial.get(index, "") + str(
                delta.get("partial_json", ""))
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]

    def answer(self) -> dict[str, Any]:
        """The round's message as a JSON answer would have carried it."""
        content = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if index in self.partial:
                try:
                    block["input"] = json.loads(self.partial[index] or "{}")
                except json.JSONDecodeError:
                    block["input"] = {}
            content.append(block)
        return {"type": "message", "role": "assistant", "content": content,
                "stop_reason": "tool_use"}

    def other_calls(self) -> bool:
        return any(_is_call(b) and i not in self.recall for i, b in self.blocks.items())


async def stream_with_recall(first: httpx.Response, run: RecallRun, open_next: Opener,
                             done: Done) -> AsyncIterator[bytes]:
    """The client's stream over one or more upstream streams (see the module doc)."""
    upstream = first
    offset = 0  # blocks the client has been sent by earlier rounds
    try:
        while True:
            state = _Round()
            held: list[_Event] = []
            sent: set[int] = set()
            buffer = b""
            try:
                async for chunk in upstream.aiter_bytes():
                    events, buffer = _split(buffer + chunk)
                    for raw in events:
                        event = _Event(raw)
                        state.note(event)
                        out = _passing(event, state, held, sent, offset, run.rounds)
                        if out is not None:
                            yield out
                if buffer.strip():
                    held.append(_Event(buffer + b"\n\n"))
            except httpx.HTTPError as exc:
                log.warning("proxy: Anthropic upstream stream broke during recall (%s)",
                            type(exc).__name__)
                timed_out = isinstance(exc, httpx.TimeoutException)
                yield _encode(error_body(504 if timed_out else 502, "the upstream model "
                                         "server stopped sending" if timed_out else
                                         "the connection to the upstream model server broke"))
                return
            finally:
                await upstream.aclose()
            run.usage = run.usage + anthropic_usage(state.usage)
            answer = state.answer()
            calls = run.wire.recall_calls(answer)
            if (calls and not state.failed and not state.other_calls()
                    and run.rounds < loop.MAX_ROUNDS):
                body = await run.next_body(answer, calls)
                offset += len(sent)
                try:
                    upstream = await open_next(dumps_body(body))
                except ProxyError as exc:
                    yield _encode(error_body(exc.status, exc.message))
                    return
                if upstream.status_code >= 400:
                    raw_error, data = await read_error(upstream)
                    error = data if isinstance(data, dict) and data.get("type") == "error" \
                        else error_body(upstream.status_code, raw_error.decode(
                            "utf-8", "replace")[:300])
                    yield _encode(error)
                    return
                continue
            for raw in _released(held, state, offset, run):
                yield raw
            return
    finally:
        done(run.usage, run.rounds)


def _passing(event: _Event, state: _Round, held: list[_Event], sent: set[int], offset: int,
             rounds: int) -> bytes | None:
    """What to send the client now for ``event`` (None: held back, or dropped)."""
    kind = event.type
    if kind == "message_start":
        return event.raw if rounds == 0 else None  # the client's message started once
    if kind == "ping":
        return event.raw
    index = event.index
    holding = bool(state.recall) or bool(held)
    if holding or kind in ("message_delta", "message_stop", "error") or index is None:
        held.append(event)
        return None
    sent.add(index)
    if offset == 0:
        return event.raw
    return _encode({**event.data, "index": index + offset})


def _released(held: list[_Event], state: _Round, offset: int, run: RecallRun) -> list[bytes]:
    """The held events as the client gets them: the recall blocks removed and the blocks
    after them renumbered, the stop reason ``end_turn`` when no call is left, the usage
    the sum over the request's upstream calls."""
    recall = sorted(state.recall)
    calls_left = state.other_calls()
    out: list[bytes] = []
    for event in held:
        index = event.index
        data = event.data
        if index is not None and event.type.startswith("content_block"):
            if index in state.recall:
                continue
            shift = offset - sum(1 for r in recall if r < index)
            out.append(event.raw if shift == 0 else _encode({**data, "index": index + shift}))
            continue
        if event.type == "message_delta" and (run.rounds or recall):
            new = dict(data)
            delta = dict(data.get("delta") or {})
            if delta.get("stop_reason") == "tool_use" and not calls_left:
                delta["stop_reason"] = "end_turn"
            new["delta"] = delta
            if run.rounds:
                new["usage"] = usage_object(run.usage, data.get("usage"))
            out.append(_encode(new))
            continue
        out.append(event.raw)
    return out
