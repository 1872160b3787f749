"""Talking to the upstream: one pooled httpx client, headers rewritten, bodies streamed.

* **Requests** keep the client's method, path under ``/v1/``, query string, headers and
  body, except: hop-by-hop headers and ``Host`` are dropped, the proxy's own
  ``x-ctxstack-api-key`` and the session id ``x-ctxstack-session`` never leave, and
  ``Authorization`` is *replaced* by the upstream key from ``LLM_API_KEY`` (removed when
  there is none) — unless ``forward_auth``, when the client's own header goes through.
* **Responses** keep the upstream's bytes and content encoding (``aiter_raw``). Server-Sent
  Events and bodies of unknown or large length stream back chunk by chunk as they arrive;
  a small body of known length is read whole and sent in one piece (cheaper). If the
  upstream stops sending mid-stream for longer than the timeout, an SSE body ends with an
  OpenAI-shaped ``error`` event (the SDKs raise it); any other body is cut short, which
  its ``content-length`` makes visible.
* **Failures before a response**: connection refused or unresolvable → 502, no bytes
  within the timeout → 504, both in OpenAI's error shape and without the upstream's
  address (:mod:`ctxstack.proxy.errors`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from urllib.parse import quote, unquote

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ctxstack.proxy.errors import (
    ProxyError,
    bad_request,
    error_body,
    upstream_bad_answer,
    upstream_error_status,
    upstream_failed,
    upstream_timeout,
    upstream_unreachable,
)

log = logging.getLogger("ctxstack.proxy")

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
})
PROXY_KEY_HEADER = "x-ctxstack-api-key"
SESSION_HEADER = "x-ctxstack-session"
"""The client's session id (:mod:`ctxstack.proxy.sessions`): the proxy's, never forwarded."""
_PROXY_ONLY = frozenset({PROXY_KEY_HEADER, SESSION_HEADER})
_RESPONSE_DROP = HOP_BY_HOP - {"content-length"} | {"server", "date"}


class Upstream:
    """The upstream endpoint (base URL with ``/v1``) and the pooled client to reach it."""

    def __init__(self, base_url: str, *, api_key: str | None, forward_auth: bool,
                 timeout: float, connect_timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._api_key = api_key
        self.forward_auth = forward_auth
        # TCP_NODELAY: httpcore writes a request's headers and body separately, and with
        # Nagle's algorithm the body then waits for the peer's delayed ACK of the headers.
        transport = transport or httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=200),
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(connect_timeout, timeout)),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    def url(self, path: str) -> str:
        """The upstream URL of ``path`` (the part after ``/v1/``, as the ASGI server
        decoded it), always under the configured base URL: dot segments are resolved here
        and the result re-encoded, and a path that would leave the base — after
        percent-decoding it again and again, with ``\\`` read as ``/`` as some servers
        do — is refused. Every wire forwards through this method (issue 30: ``/v1/..%2F
        admin`` reached the upstream's ``/admin`` with the operator's key attached).

        Raises:
            ProxyError: 400, the path leaves the upstream's base path.
        """
        resolved = resolve_under_base(path)
        if resolved is None:
            raise bad_request("the path leaves the API's base path (dot segments are not "
                              "allowed to climb out of /v1/)")
        return f"{self.base_url}/{quote(resolved, safe=_PATH_SAFE)}"

    def request_headers(self, incoming: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The client's headers as sent upstream (see the module doc)."""
        out: list[tuple[str, str]] = []
        for name, value in incoming:
            key = name.lower()
            if key in HOP_BY_HOP or key in _PROXY_ONLY:
                continue
            if key == "authorization" and not self.forward_auth:
                continue
            out.append((name, value))
        if not self.forward_auth and self._api_key:
            out.append(("authorization", f"Bearer {self._api_key}"))
        return out

    async def open(self, method: str, path: str, *, query: str,
                   headers: list[tuple[str, str]], content: bytes | AsyncIterator[bytes],
                   ) -> httpx.Response:
        """Send the request and return the response with its body not yet read.

        Raises:
            ProxyError: 502 unreachable / broken connection, 504 timeout.
        """
        url = self.url(path) + (f"?{query}" if query else "")
        request = self.client.build_request(method, url, headers=headers, content=content)
        try:
            return await self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
            log.warning("proxy: upstream unreachable (%s)", type(exc).__name__)
            raise upstream_unreachable() from None
        except httpx.TimeoutException as exc:
            log.warning("proxy: upstream timed out (%s)", type(exc).__name__)
            raise upstream_timeout(self.timeout) from None
        except httpx.HTTPError as exc:
            log.warning("proxy: upstream request failed (%s)", type(exc).__name__)
            raise upstream_failed() from None


_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_MAX_DECODES = 8


def resolve_under_base(path: str) -> str | None:
    """``path`` (relative to the base) with its dot segments removed, or None when it
    climbs above the base — in its given form or in any further percent-decoding of it
    (an upstream or gateway that decodes once more must not see ``../`` either)."""
    resolved = _remove_dot_segments(path)
    if resolved is None:
        return None
    seen = path
    for _ in range(_MAX_DECODES):
        decoded = unquote(seen)
        if _remove_dot_segments(decoded.replace("\\", "/")) is None:
            return None
        if decoded == seen:
            return resolved
        seen = decoded
    return None  # still decoding after that many rounds: nobody sends that in good faith


def _remove_dot_segments(path: str) -> str | None:
    """RFC 3986 dot-segment removal on a relative path; None if it goes above its root."""
    out: list[str] = []
    segments = path.lstrip("/").split("/")
    for i, segment in enumerate(segments):
        if segment == "..":
            if not out:
                return None
            out.pop()
            if i == len(segments) - 1:
                out.append("")
        elif segment == ".":
            if i == len(segments) - 1:
                out.append("")
        else:
            out.append(segment)
    return "/".join(out)


def forwarded_body(request: Request, headers: list[tuple[str, str]],
                    ) -> bytes | AsyncIterator[bytes]:
    """The client's body as it arrives, never buffered (the guard bounds its size): with
    its ``Content-Length`` when it declared one, chunked when it was chunked, and no body
    at all when it had none (a GET stays a plain GET upstream)."""
    length = request.headers.get("content-length", "")
    if length.isdigit():
        if length == "0":
            return b""
        headers.append(("content-length", length))
        return _body_stream(request)
    if "chunked" in request.headers.get("transfer-encoding", "").lower():
        return _body_stream(request)
    return b""


async def _body_stream(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


def response_headers(upstream: httpx.Response, extra: Mapping[str, str] | None = None,
                     *, keep_length: bool = True) -> dict[str, str]:
    """The upstream's response headers minus hop-by-hop ones, plus ``extra``."""
    out: dict[str, str] = {}
    for name, value in upstream.headers.multi_items():
        key = name.lower()
        if key in _RESPONSE_DROP or (not keep_length and key in (
                "content-length", "content-encoding")):
            continue
        out[key] = value
    out.update(extra or {})
    return out


BUFFER_LIMIT = 4 * 1024 * 1024
"""Bodies with a known length up to this size are read whole, then sent in one piece."""


async def relay(upstream: httpx.Response, extra: Mapping[str, str] | None = None,
                ) -> Response:
    """Relay an open upstream response: streamed as it arrives (SSE, unknown or large
    length), or read whole and sent at once when it is a small body of known length —
    cheaper, and the bytes (and their encoding) are the upstream's either way.

    Raises:
        ProxyError: a small body could not be read (502/504).
    """
    is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
    length = upstream.headers.get("content-length", "")
    if is_sse or not length.isdigit() or int(length) > BUFFER_LIMIT:
        return stream_response(upstream, extra)
    async with reading(upstream):
        raw = b"".join([chunk async for chunk in upstream.aiter_raw()])
    return Response(raw, status_code=upstream.status_code,
                    headers=response_headers(upstream, extra))


OnAnswer = Callable[[object], None]
"""Called with a relayed answer's JSON (a stream: its last event carrying ``usage``)."""
USAGE_TAIL = 16 * 1024


def stream_response(upstream: httpx.Response, extra: Mapping[str, str] | None = None,
                    on_answer: OnAnswer | None = None) -> StreamingResponse:
    """Relay an open upstream response to the client as it arrives."""
    is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
    if on_answer is not None and (not is_sse or upstream.headers.get("content-encoding")):
        on_answer = None  # usage is read from plain event streams only
    return StreamingResponse(
        _relay(upstream, is_sse, on_answer),
        status_code=upstream.status_code,
        headers=response_headers(upstream, extra),
        background=BackgroundTask(upstream.aclose),
    )


async def _relay(upstream: httpx.Response, is_sse: bool, on_answer: OnAnswer | None = None,
                 ) -> AsyncIterator[bytes]:
    tail = b""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
            if on_answer is not None:
                tail = (tail + chunk)[-USAGE_TAIL:]
        if on_answer is not None:
            found = last_usage_event(tail)
            if found is not None:
                on_answer(found)
    except httpx.HTTPError as exc:
        timed_out = isinstance(exc, httpx.TimeoutException)
        log.warning("proxy: upstream body %s mid-stream (%s)",
                    "stalled" if timed_out else "broke", type(exc).__name__)
        if is_sse:
            err = upstream_error(upstream, exc)
            body = error_body(err.message, type=err.type, code=err.code)
            yield f"\n\ndata: {json.dumps(body)}\n\n".encode()
    finally:
        await upstream.aclose()


def upstream_error(upstream: httpx.Response, exc: httpx.HTTPError) -> ProxyError:
    """The proxy's error for a transport failure while reading ``upstream``'s body: 504
    when it timed out (naming the read timeout), else 502."""
    if isinstance(exc, httpx.TimeoutException):
        return upstream_timeout(upstream_timeout_seconds(upstream))
    return upstream_failed()


@contextlib.asynccontextmanager
async def reading(upstream: httpx.Response) -> AsyncIterator[None]:
    """Read ``upstream``'s body inside: a transport failure is raised as the proxy's
    502/504 (:func:`upstream_error`), and the response is closed afterwards either way."""
    try:
        yield
    except httpx.HTTPError as exc:
        raise upstream_error(upstream, exc) from None
    finally:
        await upstream.aclose()


def upstream_timeout_seconds(upstream: httpx.Response) -> float:
    timeout = upstream.request.extensions.get("timeout", {})
    read = timeout.get("read") if isinstance(timeout, dict) else None
    return float(read) if isinstance(read, int | float) else 0.0


ERROR_BODY_LIMIT = 4 * 1024 * 1024
"""An upstream error body is read up to this many bytes (the rest is not waited for)."""


async def read_error(upstream: httpx.Response, *, limit: int | None = None,
                     ) -> tuple[bytes, object]:
    """Read a response whole (or its first ``limit`` bytes): its (decoded) bytes and its
    JSON (None if not JSON, or cut at ``limit``).

    Raises:
        ProxyError: the body could not be read (502/504).
    """
    async with reading(upstream):
        raw = await (upstream.aread() if limit is None else _read_at_most(upstream, limit))
    try:
        return raw, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return raw, None


def last_usage_event(tail: bytes) -> object:
    """The JSON of the last ``data:`` event in ``tail`` that carries a ``usage`` object."""
    for line in reversed(tail.split(b"\n")):
        line = line.strip()
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                data = json.loads(line[5:])
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and isinstance(data.get("usage"), dict):
                return data
    return None


async def _read_at_most(upstream: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in upstream.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)[:limit]


async def relay_answer(upstream: httpx.Response, extra: Mapping[str, str] | None = None,
                       on_answer: OnAnswer | None = None) -> Response:
    """Relay a successful chat-completions answer, refusing one that is not an answer.

    An event stream is relayed as it arrives (:func:`stream_response`). Any other body is
    read whole (a chat completion is one JSON object) and must be JSON: an HTML error page
    from a gateway, or an answer cut off mid-body, would otherwise reach the client as a
    200 its SDK fails to parse (or, for a stream request, as an empty stream) — it becomes
    a 502 in OpenAI's error shape instead.

    Raises:
        ProxyError: the body could not be read (502/504) or is not JSON (502).
    """
    if upstream.headers.get("content-type", "").startswith("text/event-stream"):
        return stream_response(upstream, extra, on_answer)
    raw, data = await read_error(upstream)
    if data is None and not _is_json(raw):
        log.warning("proxy: upstream answered %d with a body that is not JSON (%d bytes)",
                    upstream.status_code, len(raw))
        raise upstream_bad_answer() from None
    if on_answer is not None and data is not None:
        on_answer(data)
    return Response(raw, status_code=upstream.status_code,
                    headers=response_headers(upstream, extra, keep_length=False))


def error_passthrough(upstream: httpx.Response, raw: bytes,
                      extra: Mapping[str, str] | None = None,
                      data: object = None) -> Response:
    """The upstream's error answered with its status and headers (``Retry-After`` and
    rate-limit headers included). A JSON body goes as is; a body that is not JSON (a
    gateway's HTML page, plain text) is wrapped in OpenAI's error shape, its text as the
    message, so the client's SDK reads a message and not markup.
    """
    headers = response_headers(upstream, extra, keep_length=False)
    if data is None and not _is_json(raw):
        text = error_text(raw)
        err = upstream_error_status(upstream.status_code, text)
        headers = {k: v for k, v in headers.items() if k != "content-type"}
        return err.response(headers)
    return Response(raw, status_code=upstream.status_code, headers=headers)


# No ``<`` inside a tag: ``<[^>]*>`` re-scanned the rest of a body from every ``<`` in it
# (quadratic: 100K ``<`` stalled the event loop for seconds, issue 30).
_TAGS = re.compile(r"<[^<>]*>")
ERROR_TEXT_SCAN = 64 * 1024
"""Only this many leading bytes of a non-JSON error body are read for its message."""


def error_text(raw: bytes) -> str:
    """The readable text of a non-JSON error body (a gateway's HTML page): markup and runs
    of whitespace removed, at most 300 characters, from its first
    :data:`ERROR_TEXT_SCAN` bytes only — linear and bounded work on the event loop."""
    head = raw[:ERROR_TEXT_SCAN].decode("utf-8", "replace")
    return " ".join(_TAGS.sub(" ", head).split())[:300]


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return True


__all__ = ["PROXY_KEY_HEADER", "ProxyError", "Upstream", "error_passthrough", "error_text",
           "forwarded_body",
           "read_error",
           "relay", "relay_answer", "response_headers", "stream_response"]
