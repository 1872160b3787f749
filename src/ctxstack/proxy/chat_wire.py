"""The Chat Completions side of recall and of prefix-reusing summaries.

* :class:`ChatRecallWire` — :class:`~ctxstack.proxy.recall.RecallWire` for
  ``/v1/chat/completions``: the tool is a ``{"type": "function", ...}`` entry of
  ``tools``; a recall call is an assistant ``tool_calls`` entry named ``ctxstack_recall``;
  a round appends that assistant message and one ``tool`` message per call.
* :func:`chat_usage` — ``usage.prompt_tokens`` / ``completion_tokens`` and
  ``prompt_tokens_details.cached_tokens`` (cache reads); cache writes where a provider
  reports them (``prompt_tokens_details.cache_write_tokens``, or an Anthropic-style
  ``cache_creation_input_tokens``).
* :class:`PrefixSummarizer` — the summariser as the conversation's own continuation: the
  request is the conversation's body (system prompt, tools, messages) as last forwarded,
  with the summary instruction appended as a last user message, so the provider's prompt
  cache serves all but the instruction. Any failure falls back to the guard's own
  transcript request (the wrapped summariser).
* :func:`stream_with_recall` — a streamed answer relayed as it arrives, held back only
  from the first tool-call delta on (a recall call may be pending), then released, or
  replaced by the next round's stream.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ctxstack import LLM, ChatMessage, LLMResult, TokenCounter, Usage
from ctxstack.compaction import Archive
from ctxstack.protocol import ChatStream
from ctxstack.proxy.errors import ProxyError, error_body, upstream_failed
from ctxstack.proxy.forwarding import read_error
from ctxstack.proxy.recall import (
    MAX_ROUNDS,
    RECALL_DESCRIPTION,
    RECALL_PARAMETERS,
    RECALL_TOOL,
    RecallCall,
    RecallWire,
    UpstreamUsage,
    parse_query,
    recall_text,
    usage_count,
    with_tool,
)
from ctxstack.proxy.request import guard_view, schema_tokens

log = logging.getLogger("ctxstack.proxy")

RECALL_TOOL_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {"name": RECALL_TOOL, "description": RECALL_DESCRIPTION,
                 "parameters": RECALL_PARAMETERS},
}
_SPEC_JSON = json.dumps(RECALL_TOOL_SPEC, separators=(",", ":"))


def dumps_body(value: object) -> bytes:
    """Compact JSON bytes (what the proxy forwards when it changed a body)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def chat_usage(answer: Mapping[str, Any]) -> UpstreamUsage:
    """The usage a chat completion (or its final stream chunk) reports."""
    usage = answer.get("usage")
    if not isinstance(usage, Mapping):
        return UpstreamUsage()
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}

    write = usage_count(details.get("cache_write_tokens")) or usage_count(
        usage.get("cache_creation_input_tokens"))
    return UpstreamUsage(usage_count(usage.get("prompt_tokens")),
                         usage_count(usage.get("completion_tokens")),
                         usage_count(details.get("cached_tokens")), write, 1)


def _calls(answer: Mapping[str, Any]) -> list[Any]:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return []
    message = choices[0].get("message")
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    return calls if isinstance(calls, list) else []


def _is_recall(call: object) -> bool:
    return (isinstance(call, Mapping) and isinstance(call.get("function"), Mapping)
            and call["function"].get("name") == RECALL_TOOL)


class ChatRecallWire:
    """:class:`~ctxstack.proxy.recall.RecallWire` for Chat Completions."""

    def tool_tokens(self, counter: TokenCounter) -> int:
        return counter.count_text(_SPEC_JSON)

    def can_offer(self, body: Mapping[str, Any]) -> bool:
        """Whether the tool may be added: not beside legacy ``functions`` (providers refuse
        both at once), not when the client turned tools off (``tool_choice: "none"``)."""
        return "functions" not in body and body.get("tool_choice") != "none"

    def added_tokens(self, body: dict[str, Any], counter: TokenCounter) -> int:
        """What adding the tool to ``body`` adds to its schemas' count, exactly."""
        return schema_tokens(self.add_tool(body), counter) - schema_tokens(body, counter)

    def add_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        return with_tool(body, RECALL_TOOL_SPEC)

    def remove_tool(self, body: dict[str, Any]) -> dict[str, Any]:
        tools = body.get("tools")
        out = dict(body)
        kept = [t for t in tools if not (isinstance(t, Mapping) and isinstance(
            t.get("function"), Mapping) and t["function"].get("name") == RECALL_TOOL)
        ] if isinstance(tools, list) else []
        if kept:
            out["tools"] = kept
        else:
            out.pop("tools", None)
            out.pop("tool_choice", None)
            out.pop("parallel_tool_calls", None)
        return out

    def recall_calls(self, answer: Mapping[str, Any]) -> list[RecallCall]:
        return [RecallCall(str(c.get("id") or ""), parse_query(c["function"].get("arguments")))
                for c in _calls(answer) if _is_recall(c)]

    def has_other_calls(self, answer: Mapping[str, Any]) -> bool:
        return any(not _is_recall(c) for c in _calls(answer))

    def strip(self, answer: dict[str, Any]) -> dict[str, Any]:
        choices = answer.get("choices")
        if not isinstance(choices, list):
            return answer
        out = dict(answer)
        out["choices"] = []
        for choice in choices:
            message = choice.get("message") if isinstance(choice, Mapping) else None
            if not isinstance(message, Mapping) or not isinstance(message.get("tool_calls"),
                                                                  list):
                out["choices"].append(choice)
                continue
            kept = [c for c in message["tool_calls"] if not _is_recall(c)]
            new_message = dict(message)
            if kept:
                new_message["tool_calls"] = kept
            else:
                new_message.pop("tool_calls", None)
            new_choice = dict(choice)
            new_choice["message"] = new_message
            if not kept and new_choice.get("finish_reason") == "tool_calls":
                new_choice["finish_reason"] = "stop"
            out["choices"].append(new_choice)
        return out

    def append_round(self, body: dict[str, Any], answer: Mapping[str, Any],
                     results: Sequence[tuple[RecallCall, str]]) -> dict[str, Any]:
        calls = [c for c in _calls(answer) if _is_recall(c)]
        choices = answer.get("choices") or [{}]
        message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        turn = {"role": "assistant", "content": content, "tool_calls": calls}
        out = dict(body)
        out["messages"] = [*body["messages"], turn, *(
            {"role": "tool", "tool_call_id": call.id, "content": text}
            for call, text in results)]
        return out

    def round_tokens(self, answer: Mapping[str, Any], counter: TokenCounter) -> int:
        calls = [c for c in _calls(answer) if _is_recall(c)]
        turn = {"role": "assistant", "content": None, "tool_calls": calls}
        return counter.count_message(guard_view(turn, 0)) + 8 * len(calls)

    def usage(self, answer: Mapping[str, Any]) -> UpstreamUsage:
        return chat_usage(answer)

    def with_usage(self, answer: dict[str, Any], usage: UpstreamUsage) -> dict[str, Any]:
        own = answer.get("usage")
        out = dict(answer)
        merged: dict[str, Any] = dict(own) if isinstance(own, Mapping) else {}
        merged.update(prompt_tokens=usage.input_tokens, completion_tokens=usage.output_tokens,
                      total_tokens=usage.input_tokens + usage.output_tokens)
        details = merged.get("prompt_tokens_details")
        details = dict(details) if isinstance(details, Mapping) else {}
        details["cached_tokens"] = usage.cache_read_tokens
        merged["prompt_tokens_details"] = details
        out["usage"] = merged
        return out


# ----------------------------------------------------------------- the prefix summariser
SUMMARY_INTRO = (
    "[ctxstack: context compaction] Do not answer the conversation above and do not call "
    "tools. Instead, summarise everything above this message (fold any earlier "
    "[Conversation summary] into it) for continuing the conversation, following these "
    "instructions:"
)

Send = Callable[[bytes], Awaitable[tuple[int, object]]]
"""Posts a chat-completions body upstream: ``(status, decoded JSON or None)``."""


class PrefixSummarizer:
    """An :class:`~ctxstack.LLM` for the guard's summary calls (see the module doc).

    ``prefix``: the messages to reuse (what was last forwarded, within budget);
    ``base``: the client's body (model, tools, options); ``fallback``: the summariser
    asked the usual way when this fails.
    """

    def __init__(self, send: Send, base: Mapping[str, Any], prefix: Sequence[Any],
                 fallback: LLM) -> None:
        self.send = send
        self.base = base
        self.prefix = list(prefix)
        self.fallback = fallback
        self.used_prefix = False

    @property
    def context_size(self) -> int:
        return self.fallback.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.fallback.max_output_tokens

    def request_body(self, instruction: str, max_tokens: int | None) -> dict[str, Any]:
        body = dict(self.base)
        body["messages"] = [*self.prefix,
                            {"role": "user", "content": f"{SUMMARY_INTRO}\n\n{instruction}"}]
        for key in ("stream", "stream_options", "response_format", "n", "logprobs",
                    "top_logprobs", "functions", "function_call"):
            body.pop(key, None)
        if body.get("tools"):
            body["tool_choice"] = "none"
        if max_tokens:
            body["max_completion_tokens" if "max_completion_tokens" in body
                 else "max_tokens"] = max_tokens
        return body

    async def chat(self, messages: Sequence[ChatMessage], *, tools: Any = None,
                   **opts: Any) -> LLMResult:
        instruction = messages[0].text if messages else ""
        max_tokens = opts.get("max_tokens")
        try:
            status, data = await self.send(dumps_body(self.request_body(
                instruction, max_tokens if isinstance(max_tokens, int) else None)))
            text = self.answer_text(data) if status < 400 else None
        except Exception as exc:  # the summary falls back; the request goes on
            log.warning("proxy: prefix summary call failed (%s); summarising a transcript",
                        type(exc).__name__)
            text, data = None, None
        if not text:
            return await self.fallback.chat(messages, tools=tools, **opts)
        self.used_prefix = True
        usage = self.answer_usage(data if isinstance(data, Mapping) else {})
        return LLMResult(message=ChatMessage.assistant(text), usage=Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cached_tokens=usage.cache_read_tokens, calls=1))

    def answer_text(self, data: object) -> str | None:
        """The summary in an answer (None: not a usable one). A wire's subclass reads its
        own answer shape."""
        return _answer_text(data)

    def answer_usage(self, data: Mapping[str, Any]) -> UpstreamUsage:
        """The usage an answer reports (a wire's subclass reads its own)."""
        return chat_usage(data)

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return self.fallback.stream_chat(messages, **opts)


def _answer_text(data: object) -> str | None:
    if not isinstance(data, Mapping):
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    if not isinstance(message, Mapping) or message.get("tool_calls"):
        return None
    content = message.get("content")
    return content if isinstance(content, str) and content.strip() else None


def summary_prefix(view: Sequence[Mapping[str, Any]], counts: Sequence[int],
                   room: int) -> list[Mapping[str, Any]]:
    """The longest prefix of ``view`` within ``room`` tokens (``counts`` per message) that
    ends where a request may end: not between tool calls and their results."""
    total = 0
    end = 0
    for i, n in enumerate(counts):
        if total + n > room:
            break
        total += n
        end = i + 1
    while end > 0:
        last = view[end - 1]
        nxt = view[end] if end < len(view) else None
        if (last.get("role") == "assistant" and last.get("tool_calls")) or (
                nxt is not None and nxt.get("role") == "tool"):
            end -= 1
            continue
        break
    return list(view[:end])


# ----------------------------------------------------------------- streams with recall
@dataclass
class RecallRun:
    """One client request's recall loop state (shared by the JSON and stream paths)."""

    wire: RecallWire
    """The wire's half of the loop (Chat here; the Responses wire uses this run too)."""
    archive: Archive
    counter: TokenCounter
    body: dict[str, Any]
    fits: int
    """Tokens the forwarded requests may fill (the budget less the counter's margin)."""
    tokens: int
    """Tokens of the body as it stands (messages and tools)."""
    rounds: int = 0
    usage: UpstreamUsage = field(default_factory=UpstreamUsage)

    async def next_body(self, answer: Mapping[str, Any], calls: Sequence[RecallCall],
                        ) -> dict[str, Any]:
        """Answer ``calls`` from the archive and build the next round's body (without the
        tool once :data:`MAX_ROUNDS` rounds were made)."""
        self.rounds += 1
        turn = self.wire.round_tokens(answer, self.counter)
        room = (self.fits - self.tokens - turn) // max(1, len(calls)) - 16
        results = []
        for call in calls:
            try:
                text = await recall_text(self.archive, call.query, room, self.counter)
            except Exception as exc:  # the archive failed: the model reads that it did
                log.warning("proxy: recall failed: %s", exc)
                text = "ctxstack_recall: the archive could not be read right now."
            results.append((call, text))
            self.tokens += self.counter.count_text(text) + 8
        self.tokens += turn
        body = self.wire.append_round(self.body, answer, results)
        if self.rounds >= MAX_ROUNDS:
            body = self.wire.remove_tool(body)
        self.body = body
        return body

    async def answer(self, first: httpx.Response, open_next: Opener) -> RecallOutcome:
        """The loop for a JSON answer, any wire: while the answer calls only the recall
        tool, answer it and call the upstream again (``open_next``); an answer that also
        calls the client's tools, or comes after :data:`MAX_ROUNDS` rounds, loses its
        recall calls. Stops at a round's error status (the caller passes it through).

        Raises:
            ProxyError: an answer could not be read (502/504).
        """
        wire = self.wire
        last = first
        raw, data = await read_error(first)
        stripped = False
        while isinstance(data, dict):
            self.usage = self.usage + wire.usage(data)
            calls = wire.recall_calls(data)
            if not calls:
                break
            if wire.has_other_calls(data) or self.rounds >= MAX_ROUNDS:
                data, stripped = wire.strip(data), True
                break
            last = await open_next(dumps_body(await self.next_body(data, calls)))
            raw, data = await read_error(last)
            if last.status_code >= 400:
                return RecallOutcome(last, raw, data, stripped, failed=True)
        return RecallOutcome(last, raw, data, stripped)


@dataclass(frozen=True)
class RecallOutcome:
    """Where :meth:`RecallRun.answer` ended: the last upstream response and its body."""

    last: httpx.Response
    raw: bytes
    data: object
    """The decoded body (None: not JSON)."""
    stripped: bool
    """Recall calls were removed from ``data``."""
    failed: bool = False
    """``last`` answered an error status: ``raw`` / ``data`` are its error body."""


Opener = Callable[[bytes], Awaitable[httpx.Response]]


class _Events:
    """Splits a byte stream into Server-Sent Events (each with its blank-line end)."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self.buffer += chunk
        out: list[bytes] = []
        while True:
            cut = [i for i in (self.buffer.find(b"\n\n"), self.buffer.find(b"\r\n\r\n"))
                   if i >= 0]
            if not cut:
                return out
            end = min(cut)
            size = 4 if self.buffer.startswith(b"\r\n\r\n", end) else 2
            out.append(self.buffer[:end + size])
            self.buffer = self.buffer[end + size:]


def _event_json(event: bytes) -> object:
    lines = [line[5:].strip() for line in event.decode("utf-8", "replace").splitlines()
             if line.startswith("data:")]
    data = "\n".join(lines)
    if not data:
        return None
    if data == "[DONE]":
        return "[DONE]"
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return None


def _sse(data: object) -> bytes:
    return b"data: " + dumps_body(data) + b"\n\n"


async def stream_with_recall(first: httpx.Response, run: RecallRun, open_next: Opener,
                             on_usage: Callable[[UpstreamUsage, int], None],
                             ) -> AsyncIterator[bytes]:
    """The client's stream over one or more upstream streams (see the module doc).
    ``on_usage(summed usage, rounds)`` is called once at the end."""
    upstream = first
    try:
        while True:
            held: list[tuple[bytes, object]] = []
            calls: dict[int, dict[str, Any]] = {}
            text: list[str] = []
            holding = False
            round_usage = UpstreamUsage()
            events = _Events()
            try:
                async for chunk in upstream.aiter_bytes():
                    for raw in events.feed(chunk):
                        data = _event_json(raw)
                        if isinstance(data, Mapping):
                            if isinstance(data.get("usage"), Mapping):
                                round_usage = chat_usage(data)
                            holding = _note_deltas(data, calls, text) or holding
                        usage_chunk = isinstance(data, Mapping) and isinstance(
                            data.get("usage"), Mapping) and not data.get("choices")
                        if holding or data == "[DONE]" or usage_chunk:
                            held.append((raw, data))
                        else:
                            yield raw
                if events.buffer.strip():
                    held.append((events.buffer, _event_json(events.buffer)))
            except httpx.HTTPError as exc:
                log.warning("proxy: upstream stream broke during recall (%s)",
                            type(exc).__name__)
                err = upstream_failed()
                yield _sse(error_body(err.message, type=err.type, code=err.code))
                return
            finally:
                await upstream.aclose()
            run.usage = run.usage + round_usage
            recall = [c for c in calls.values() if c.get("name") == RECALL_TOOL]
            others = [c for c in calls.values() if c.get("name") != RECALL_TOOL]
            if recall and not others and run.rounds < MAX_ROUNDS:
                answer = {"choices": [{"message": {
                    "role": "assistant", "content": "".join(text) or None,
                    "tool_calls": [{"id": c.get("id", ""), "type": "function", "function": {
                        "name": RECALL_TOOL, "arguments": c.get("arguments", "")}}
                        for c in recall]}}]}
                body = await run.next_body(answer, run.wire.recall_calls(answer))
                try:
                    upstream = await open_next(dumps_body(body))
                except ProxyError as exc:
                    yield _sse(error_body(exc.message, type=exc.type, code=exc.code))
                    return
                if upstream.status_code >= 400:
                    raw_error = await upstream.aread()
                    await upstream.aclose()
                    try:
                        err_data = json.loads(raw_error)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        err_data = error_body(raw_error.decode("utf-8", "replace")[:300])
                    yield _sse(err_data)
                    return
                continue
            recall_indexes = {i for i, c in calls.items() if c.get("name") == RECALL_TOOL}
            for raw, _ in _released(held, recall_indexes, run):
                yield raw
            return
    finally:
        on_usage(run.usage, run.rounds)


def _note_deltas(data: Mapping[str, Any], calls: dict[int, dict[str, Any]],
                 text: list[str]) -> bool:
    """Record a chunk's tool-call deltas and text; True if it carries tool calls."""
    found = False
    for choice in data.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if not isinstance(delta, Mapping):
            continue
        if isinstance(delta.get("content"), str):
            text.append(delta["content"])
        for part in delta.get("tool_calls") or ():
            if not isinstance(part, Mapping):
                continue
            found = True
            index = part.get("index", 0)
            call = calls.setdefault(index if isinstance(index, int) else 0, {})
            if part.get("id"):
                call["id"] = part["id"]
            fn = part.get("function")
            if isinstance(fn, Mapping):
                if fn.get("name"):
                    call["name"] = fn["name"]
                if isinstance(fn.get("arguments"), str):
                    call["arguments"] = call.get("arguments", "") + fn["arguments"]
    return found


def _released(held: list[tuple[bytes, object]], recall: set[int], run: RecallRun,
              ) -> list[tuple[bytes, object]]:
    """The held events as the client gets them: recall calls removed (the others
    renumbered), the usage chunk reporting the sum when several calls were made."""
    keep = sorted({i for raw, data in held if isinstance(data, Mapping)
                   for i in _indexes(data)} - recall)
    renumber = {old: new for new, old in enumerate(keep)}
    out: list[tuple[bytes, object]] = []
    for raw, data in held:
        if not isinstance(data, Mapping):
            out.append((raw, data))
            continue
        changed = False
        new = dict(data)
        if recall and _indexes(data):
            choices = []
            for choice in data.get("choices") or ():
                delta = dict(choice.get("delta") or {})
                parts = [dict(p, index=renumber[p.get("index", 0)])
                         for p in delta.get("tool_calls") or ()
                         if p.get("index", 0) not in recall]
                if parts:
                    delta["tool_calls"] = parts
                else:
                    delta.pop("tool_calls", None)
                choices.append(dict(choice, delta=delta))
            new["choices"] = choices
            changed = True
            if all(not c["delta"] and not c.get("finish_reason") for c in choices):
                continue
        if run.rounds and isinstance(data.get("usage"), Mapping):
            new = run.wire.with_usage(new, run.usage)
            changed = True
        out.append((_sse(new) if changed else raw, new))
    return out


def _indexes(data: Mapping[str, Any]) -> set[int]:
    found: set[int] = set()
    for choice in data.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        for part in (delta or {}).get("tool_calls") or ():
            if isinstance(part, Mapping):
                found.add(part.get("index", 0))
    return found
