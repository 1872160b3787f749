"""``ctxstack_recall`` rounds on the Responses wire: the client gets one response.

A request whose forwarded ``tools`` carry ``ctxstack_recall``
(:mod:`ctxstack.proxy.responses_recall`) may make several upstream calls: when the
model calls the tool (and nothing else), the proxy answers from the session's archive,
appends the round (:class:`~ctxstack.proxy.chat_wire.RecallRun`, shared with the Chat
wire) and calls the upstream again — at most :data:`~ctxstack.proxy.recall.MAX_ROUNDS`
rounds, then once without the tool. What the client receives is one response:

* **JSON** (:func:`answer_json`) — the last upstream response, the recall calls and the
  tool gone from it, ``usage`` the sum over the calls.
* **Events** (:class:`ClientStream`, :func:`recall_events`; the SSE stream and the
  WebSocket mode alike) — the first round's ``response.created`` /
  ``response.in_progress`` (later rounds' are dropped); output items relayed as they
  arrive, **held back only from the first item that may belong to a recall turn**: a
  ``function_call`` named ``ctxstack_recall`` (held to the end of the round), or a
  ``reasoning`` item (held until the next item shows it is not followed by a recall call
  — a reasoning item must be resent with the item after it, so the client must not keep
  one whose turn it never sees). A recall round's held events are dropped; the next
  round's items continue the client's ``output_index`` and ``sequence_number``. The
  terminal event carries the first round's response id (clients check that a
  lifecycle's id does not change), every item the client was shown, the summed
  ``usage``, and ``tools`` without the recall tool — as every lifecycle event does.

An upstream error in a later round reaches the client as the wire's error (the JSON
status and body; an ``error`` event in a stream); an answer already completed is never
requested again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import httpx

from ctxstack.proxy.chat_wire import RecallRun
from ctxstack.proxy.forwarding import read_error
from ctxstack.proxy.recall import MAX_ROUNDS
from ctxstack.proxy.responses_exchange import TERMINAL, read_events
from ctxstack.proxy.responses_recall import WIRE, hide_tool, is_recall

LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})
OpenNext = Callable[[dict[str, Any]], Awaitable[httpx.Response]]
"""Sends the next round's body upstream (streamed or not, as the first call was)."""


class RoundError(Exception):
    """A later round's upstream answered with an error status (``raw``, ``data``)."""

    def __init__(self, response: httpx.Response, raw: bytes, data: object) -> None:
        super().__init__(f"upstream error {response.status_code} in a recall round")
        self.response = response
        self.raw = raw
        self.data = data


async def answer_json(first: dict[str, Any], run: RecallRun, open_next: OpenNext,
                      ) -> tuple[dict[str, Any], httpx.Response | None]:
    """The client's response object after the rounds (see the module doc) and the last
    upstream response (None: the first one).

    Raises:
        RoundError: a later round's upstream answered with an error status.
    """
    data = first
    last: httpx.Response | None = None
    while True:
        run.usage = run.usage + WIRE.usage(data)
        calls = WIRE.recall_calls(data)
        if (not calls or WIRE.has_other_calls(data) or run.rounds >= MAX_ROUNDS
                or data.get("status") not in (None, "completed")):
            break
        body = await run.next_body(data, calls)
        last = await open_next(body)
        raw, answer = await read_error(last)
        if last.status_code >= 400 or not isinstance(answer, dict):
            raise RoundError(last, raw, answer)
        data = answer
    final = hide_tool(data)
    return (WIRE.with_usage(final, run.usage) if run.rounds else final), last


class ClientStream:
    """The client's event stream over one or more upstream rounds (pure: events in,
    events out; see the module doc)."""

    def __init__(self) -> None:
        self.seq = 0
        self.next_index = 0
        self.shown: list[Any] = []
        """Items of earlier rounds the client was shown (their ``output_item.done``)."""
        self.response_id: str | None = None
        self.round = 0
        self.final: dict[str, Any] | None = None
        self._reset()

    def _reset(self) -> None:
        self.held: list[dict[str, Any]] = []
        self.holding: str | None = None  # None, "reasoning" or "recall"
        self.recall: set[object] = set()
        self.index: dict[object, int] = {}
        self.done: list[Any] = []
        self.terminal: dict[str, Any] | None = None

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events to send the client now for one upstream event."""
        kind = event.get("type")
        if kind in LIFECYCLE:
            if self.round:
                return []
            response = event.get("response")
            if isinstance(response, Mapping):
                if self.response_id is None and isinstance(response.get("id"), str):
                    self.response_id = response["id"]
                event = {**event, "response": hide_tool(response)}
            return self._emit([event])
        if kind in TERMINAL:
            self.terminal = event
            return []
        out: list[dict[str, Any]] = []
        if kind == "response.output_item.added":
            item = event.get("item")
            if is_recall(item):
                self.recall.add(event.get("output_index"))
                self.holding = "recall"
            elif isinstance(item, Mapping) and item.get("type") == "reasoning":
                self.holding = self.holding or "reasoning"
            elif self.holding == "reasoning":  # the reasoning's turn is not a recall
                out = self._emit(self.held)
                self.held, self.holding = [], None
        if self.holding:
            self.held.append(event)
            return out
        return out + self._emit([event])

    def recall_round(self) -> dict[str, Any] | None:
        """The completed response of this round when it called the recall tool."""
        terminal = self.terminal
        response = terminal.get("response") if terminal is not None else None
        if (terminal is None or terminal.get("type") != "response.completed"
                or not isinstance(response, dict) or not self.recall):
            return None
        return response

    def next_round(self) -> list[dict[str, Any]]:
        """This round was a recall round: its held events go, but for those of items the
        client was already shown (their end, had it come after the recall call began);
        its shown items stay. Returns the events to send."""
        out = self._emit([e for e in self.held if e.get("output_index") in self.index])
        self.shown += self.done
        self.round += 1
        self._reset()
        return out

    def finish(self, run: RecallRun) -> list[dict[str, Any]]:
        """The held events (without recall calls) and the terminal event as the client
        gets it."""
        out = self._emit(self.held)
        self.held = []
        terminal = self.terminal
        response = terminal.get("response") if terminal is not None else None
        if terminal is None or not isinstance(response, Mapping):
            return out
        final = hide_tool(response)
        output = final.get("output")
        final["output"] = [*self.shown, *(output if isinstance(output, list) else [])]
        if self.response_id is not None:
            final["id"] = self.response_id
        if run.rounds:
            final = WIRE.with_usage(final, run.usage)
        self.final = final
        return out + self._emit([{**terminal, "response": final}])

    def _emit(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for event in events:
            if "output_index" in event:
                upstream = event["output_index"]
                if upstream in self.recall:
                    continue
                if upstream not in self.index:
                    self.index[upstream] = self.next_index
                    self.next_index += 1
                event = {**event, "output_index": self.index[upstream]}
                if event.get("type") == "response.output_item.done":
                    self.done.append(event.get("item"))
            if "sequence_number" in event:
                event = {**event, "sequence_number": self.seq}
                self.seq += 1
            out.append(event)
        return out


def sse(event: Mapping[str, Any]) -> bytes:
    """One event as Server-Sent Events bytes."""
    return (f"event: {event.get('type')}\n"
            f"data: {json.dumps(event, ensure_ascii=False)}\n\n").encode()


async def recall_events(first: httpx.Response, run: RecallRun, open_next: OpenNext,
                        view: ClientStream) -> AsyncGenerator[dict[str, Any], None]:
    """The client's events over the upstream rounds (see the module doc); ``view``
    holds the final response afterwards (``view.final``). A later round's error status
    ends the stream with an ``error`` event.

    Raises:
        ProxyError: the upstream stalled (504) or broke (502) mid-stream.
    """
    upstream = first
    while True:
        async with contextlib.aclosing(read_events(upstream)) as chunks:
            async for _, events in chunks:
                for _, data in events:
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(event, dict):
                        for out in view.feed(event):
                            yield out
        response = view.recall_round()
        if response is not None:
            run.usage = run.usage + WIRE.usage(response)
            calls = WIRE.recall_calls(response)
            if not WIRE.has_other_calls(response) and run.rounds < MAX_ROUNDS:
                body = await run.next_body(response, calls)
                body["stream"] = True
                upstream = await open_next(body)
                if upstream.status_code >= 400:
                    raw, failure = await read_error(upstream)
                    yield error_event(view, upstream.status_code, raw, failure)
                    return
                for out in view.next_round():
                    yield out
                continue
        elif view.terminal is not None and isinstance(view.terminal.get("response"), dict):
            run.usage = run.usage + WIRE.usage(view.terminal["response"])
        for out in view.finish(run):
            yield out
        return


def error_event(view: ClientStream, status: int, raw: bytes, data: object) -> dict[str, Any]:
    """A later round's upstream error as the stream's ``error`` event."""
    error = data.get("error") if isinstance(data, Mapping) else None
    if not isinstance(error, Mapping):
        error = {"type": "upstream_error", "code": "upstream_error",
                 "message": raw.decode("utf-8", "replace")[:300]}
    event = {"type": "error", "code": error.get("code"), "message": error.get("message"),
             "param": error.get("param"), "status": status, "error": dict(error),
             "headers": {}, "sequence_number": view.seq}
    view.seq += 1
    return event
