"""The checks every request passes before a route sees it, shared by the service and
the proxy (one plain ASGI middleware, so every route — present or added later — is covered
and a streamed body or answer is never buffered):

1. **Failed-auth throttle.** A client address that drew ``limit`` 401 answers within
   ``window`` seconds gets 429 with ``Retry-After`` on every request until the window ends
   (per address; in Redis when one is configured, so every worker counts together, else
   in this process).
2. **Host and origin, in no-auth mode.** Without tokens the server trusts that only this
   machine can reach it; a web page can break that by rebinding its own name to
   127.0.0.1 (DNS rebinding) or by posting cross-site. So the ``Host`` must name a
   loopback address or ``localhost`` (or a configured extra host), else 403; and a
   state-changing request (not GET/HEAD/OPTIONS) is refused (403) when the browser says
   ``Sec-Fetch-Site: cross-site`` or sends an ``Origin`` whose host is not such a host.
   Clients that are not browsers send neither header and are not affected.
3. **Bounded bodies.** A body longer than the route's limit is answered 413 — at once when
   ``Content-Length`` says so, else as soon as the bytes read pass the limit (the route
   then sees the client as gone, so a body being forwarded upstream is cut off there).

Every refusal is written by the app's ``error`` function, in the shape its wire uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxstack._net import host_name, is_local_host, origin_host

log = logging.getLogger("ctxstack.http_guard")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_FAILURE_LIMIT = 20
DEFAULT_FAILURE_WINDOW = 60.0
MAX_TRACKED = 10_000

class ErrorResponder(Protocol):
    """Builds the refusal as an ASGI callable in the wire's error shape."""

    def __call__(self, scope: Scope, status: int, message: str, code: str,
                 headers: dict[str, str]) -> ASGIApp: ...


class FailureCounter(Protocol):
    """Counts failed authentications per client address."""

    async def blocked_for(self, client: str) -> float:
        """Seconds until ``client`` may try again (0: not blocked)."""
        ...

    async def record(self, client: str) -> None: ...

    async def close(self) -> None: ...


class LocalFailures:
    """:class:`FailureCounter` in this process: a fixed window per address, at most
    :data:`MAX_TRACKED` addresses (expired ones are dropped first, then the oldest)."""

    def __init__(self, limit: int = DEFAULT_FAILURE_LIMIT,
                 window: float = DEFAULT_FAILURE_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._counts: dict[str, tuple[float, int]] = {}

    async def blocked_for(self, client: str) -> float:
        entry = self._counts.get(client)
        if entry is None:
            return 0.0
        left = entry[0] - self._clock()
        if left <= 0:
            del self._counts[client]
            return 0.0
        return left if entry[1] >= self.limit else 0.0

    async def record(self, client: str) -> None:
        now = self._clock()
        ends, count = self._counts.get(client, (0.0, 0))
        if ends <= now:
            ends, count = now + self.window, 0
        if client not in self._counts and len(self._counts) >= MAX_TRACKED:
            self._evict(now)
        self._counts[client] = (ends, count + 1)

    def _evict(self, now: float) -> None:
        live = {k: v for k, v in self._counts.items() if v[0] > now}
        if len(live) >= MAX_TRACKED:
            oldest = sorted(live, key=lambda k: live[k][0])[: MAX_TRACKED // 2]
            for key in oldest:
                del live[key]
        self._counts = live

    async def close(self) -> None:
        return None


class RedisFailures:
    """:class:`FailureCounter` in Redis (every worker and machine counts together): one
    key per address, ``INCR`` + ``PEXPIRE`` on the first failure of a window. A Redis
    failure falls back to counting in this process (logged), never to refusing.

    Only an address this process saw fail in the current window is looked up in Redis, so
    a request from a well-behaved client costs no round trip."""

    _RECORD = """
    local n = redis.call('INCR', KEYS[1])
    if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
    return n
    """

    def __init__(self, url: str, *, limit: int = DEFAULT_FAILURE_LIMIT,
                 window: float = DEFAULT_FAILURE_WINDOW, prefix: str = "ctxstack:authfail:",
                 timeout: float = 2.0) -> None:
        import redis.asyncio as aioredis

        self.limit = limit
        self.window = window
        self.prefix = prefix
        self._redis = aioredis.Redis.from_url(
            url, decode_responses=True, socket_timeout=timeout,
            socket_connect_timeout=timeout, retry_on_timeout=False)
        self._fallback = LocalFailures(limit, window)

    async def blocked_for(self, client: str) -> float:
        from redis.exceptions import RedisError

        if client not in self._fallback._counts:
            return 0.0
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.get(self.prefix + client)
                pipe.pttl(self.prefix + client)
                count, ttl = await pipe.execute()
        except RedisError as exc:
            log.warning("auth throttle: Redis unavailable (%s); counting in process",
                        type(exc).__name__)
            return await self._fallback.blocked_for(client)
        if count is None or int(count) < self.limit or ttl is None or int(ttl) <= 0:
            return 0.0
        return int(ttl) / 1000

    async def record(self, client: str) -> None:
        from redis.exceptions import RedisError

        await self._fallback.record(client)  # also marks the address as one to look up
        try:
            await self._redis.eval(self._RECORD, 1, self.prefix + client,
                                   max(1, int(self.window * 1000)))
        except RedisError as exc:
            log.warning("auth throttle: Redis unavailable (%s); counting in process",
                        type(exc).__name__)

    async def close(self) -> None:
        await self._redis.aclose()


def failure_counter(redis_url: str | None, *, limit: int, window: float,
                    prefix: str = "ctxstack:authfail:") -> FailureCounter:
    """Redis when ``redis_url`` is set, else this process."""
    if redis_url:
        return RedisFailures(redis_url, limit=limit, window=window, prefix=prefix)
    return LocalFailures(limit, window)


@dataclass
class GuardPolicy:
    """What :class:`RequestGuard` enforces (see the module docstring)."""

    local_only: bool
    """No-auth mode: only loopback (or ``extra_hosts``) hosts and origins."""
    body_limit: Callable[[str], int]
    """The largest body accepted on a path, in bytes."""
    failures: FailureCounter | None = None
    extra_hosts: frozenset[str] = field(default_factory=frozenset)


class RequestGuard:
    """The ASGI middleware enforcing a :class:`GuardPolicy` (module docstring)."""

    def __init__(self, app: ASGIApp, *, policy: GuardPolicy, error: ErrorResponder) -> None:
        self.app = app
        self.policy = policy
        self.error = error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = self.policy
        client = (scope.get("client") or ("", 0))[0] or "unknown"
        if policy.failures is not None:
            wait = await policy.failures.blocked_for(client)
            if wait > 0:
                retry = str(max(1, int(wait + 0.999)))
                await self._refuse(scope, receive, send, 429, (
                    "too many failed authentication attempts from this address; try again "
                    f"in {retry} s"), "rate_limit_exceeded", {"Retry-After": retry})
                return
        headers = _headers(scope)
        if policy.local_only:
            refusal = self._local_refusal(scope, headers)
            if refusal is not None:
                await self._refuse(scope, receive, send, 403, refusal, "forbidden", {})
                return
        limit = policy.body_limit(scope.get("path", ""))
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, 413, _too_large(limit),
                               "request_too_large", {})
            return
        await self._run(scope, receive, send, client, limit)

    def _local_refusal(self, scope: Scope, headers: dict[str, str]) -> str | None:
        extra = self.policy.extra_hosts
        if not is_local_host(host_name(headers.get("host", "")), extra):
            return ("this server takes no API tokens, so it answers only requests addressed "
                    "to a loopback host (localhost, 127.0.0.1, [::1]); add other names to "
                    "the allowed hosts to reach it by them")
        if scope.get("method", "GET") in SAFE_METHODS:
            return None
        if headers.get("sec-fetch-site", "").lower() == "cross-site":
            return "cross-site requests may not change anything on this server"
        origin = headers.get("origin")
        if origin is not None and not is_local_host(origin_host(origin) or "", extra):
            return "requests from another origin may not change anything on this server"
        return None

    async def _run(self, scope: Scope, receive: Receive, send: Send, client: str,
                   limit: int) -> None:
        received = 0
        refused = False
        started = False
        failures = self.policy.failures

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:  # the 413 went out: whatever the route answers is dropped
                return
            if message["type"] == "http.response.start":
                started = True
                if message["status"] == 401 and failures is not None:
                    await failures.record(client)
            await send(message)

        async def guarded_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if not started:
                        refused = True
                        await self.error(scope, 413, _too_large(limit), "request_too_large",
                                         {})(scope, _drained, send)
                    return {"type": "http.disconnect"}
            return message

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if not refused:
                raise
            log.info("request body over %d bytes refused mid-read (%s)", limit,
                     scope.get("path", ""))

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int,
                      message: str, code: str, headers: dict[str, str]) -> None:
        await self.error(scope, status, message, code, headers)(scope, receive, send)


def _too_large(limit: int) -> str:
    return f"the request body is larger than this server accepts ({limit} bytes)"


async def _drained() -> Message:
    return {"type": "http.disconnect"}


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    raw: Any = scope.get("headers") or []
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key not in out:
            out[key] = value.decode("latin-1")
    return out


__all__ = ["DEFAULT_FAILURE_LIMIT", "DEFAULT_FAILURE_WINDOW", "ErrorResponder",
           "FailureCounter", "GuardPolicy", "LocalFailures", "RedisFailures", "RequestGuard",
           "failure_counter"]
