"""Relaying an Anthropic answer: the upstream's bytes, its status and headers, and the
prompt-cache usage it reports read on the way.

* A JSON answer is read whole (one message object) and sent as received; one that is not
  JSON becomes a 502 in Anthropic's error shape (an HTML page from a gateway must not
  reach an SDK as a 200).
* A stream (``text/event-stream``) goes to the client chunk by chunk as it arrives. Its
  ``message_start`` and ``message_delta`` events carry ``usage``; ``message_delta``
  repeats the *cumulative* figures, so the last value seen of each field is the answer's
  (counted once, when the stream ends). If the upstream stalls or breaks mid-stream, the
  stream ends with Anthropic's ``error`` event, which the SDKs raise.
* An error status passes through with its status, headers (``retry-after`` included) and
  JSON body; a body that is not JSON is wrapped in Anthropic's error shape.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping

import httpx
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from ctxstack.proxy.anthropic.errors import anthropic_error, error_body
from ctxstack.proxy.forwarding import error_text, read_error, response_headers

log = logging.getLogger("ctxstack.proxy")

UsageSink = Callable[[Mapping[str, object]], None]
"""Called once per answer with its final ``usage`` object."""


async def relay_message(upstream: httpx.Response, extra: Mapping[str, str],
                        on_usage: UsageSink) -> Response:
    """A successful answer, streamed or whole (see the module doc).

    Raises:
        ProxyError: a whole body could not be read (502/504).
    """
    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        scan = not upstream.headers.get("content-encoding")
        return StreamingResponse(_relay(upstream, on_usage if scan else None),
                                 status_code=upstream.status_code,
                                 headers=response_headers(upstream, extra),
                                 background=BackgroundTask(upstream.aclose))
    raw, data = await read_error(upstream)
    if data is None:
        log.warning("proxy: the Anthropic upstream answered %d with a body that is not "
                    "JSON (%d bytes)", upstream.status_code, len(raw))
        return anthropic_error(502, "the upstream model server sent an answer that is not "
                               "valid JSON", dict(extra))
    if isinstance(data, dict) and isinstance(data.get("usage"), dict):
        on_usage(data["usage"])
    return Response(raw, status_code=upstream.status_code,
                    headers=response_headers(upstream, extra, keep_length=False))


class UsageScanner:
    """Reads ``usage`` out of an SSE byte stream fed in arbitrary chunks; the last value
    of each field wins (``message_delta`` repeats cumulative figures)."""

    def __init__(self) -> None:
        self._buffer = b""
        self.usage: dict[str, object] = {}
        self.seen = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line, self._buffer = self._buffer[:end].rstrip(b"\r"), self._buffer[end + 1:]
            if line.startswith(b"data:") and b"usage" in line:
                self._event(line[5:])

    def _event(self, payload: bytes) -> None:
        try:
            data = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return
        if not isinstance(data, dict):
            return
        usage = data.get("usage")
        if usage is None and isinstance(data.get("message"), dict):
            usage = data["message"].get("usage")
        if isinstance(usage, dict):
            self.seen = True
            self.usage.update({k: v for k, v in usage.items() if v is not None})


async def _relay(upstream: httpx.Response, on_usage: UsageSink | None) -> AsyncIterator[bytes]:
    scanner = UsageScanner()
    try:
        async for chunk in upstream.aiter_raw():
            if on_usage is not None:
                scanner.feed(chunk)
            yield chunk
    except httpx.HTTPError as exc:
        timed_out = isinstance(exc, httpx.TimeoutException)
        log.warning("proxy: Anthropic upstream stream %s mid-answer (%s)",
                    "stalled" if timed_out else "broke", type(exc).__name__)
        status = 504 if timed_out else 502
        message = ("the upstream model server stopped sending" if timed_out
                   else "the connection to the upstream model server broke")
        yield (f"\n\nevent: error\ndata: {json.dumps(error_body(status, message))}\n\n"
               ).encode()
    finally:
        await upstream.aclose()
        if on_usage is not None and scanner.seen:
            on_usage(scanner.usage)


def error_passthrough(upstream: httpx.Response, raw: bytes, data: object,
                      extra: Mapping[str, str]) -> Response:
    """The upstream's error with its status and headers; a body that is not JSON becomes
    Anthropic's error shape carrying its text (markup removed)."""
    headers = response_headers(upstream, extra, keep_length=False)
    if data is None:
        text = error_text(raw)
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        detail = f": {text}" if text else ""
        return anthropic_error(upstream.status_code, "the upstream model server answered "
                               f"HTTP {upstream.status_code}{detail}", headers)
    return Response(raw, status_code=upstream.status_code, headers=headers)

