"""Client sessions: who a request belongs to, its stored view, its archive, single flight.

**The session** of a request is the header ``x-ctxstack-session`` when the client sends
one, else derived from the conversation's opening messages (system prompt and first user
message). Either way it is hashed together with the caller's identity and the client's
own key (``Authorization``, ``x-api-key``): two keys never share a session, a view or an
archive, whatever session id they send.

**The store** (:class:`SessionStore`) reads and writes the session's view and archive
(:mod:`ctxstack.store.proxy_sessions`); it does not swallow database errors — the caller
decides (the fitter forwards the original request: do no harm).

**Single flight** (:class:`SingleFlight`): recomputing a session's view may call the
summariser; two concurrent over-budget requests of one session must cause one call. In
one worker an :class:`asyncio.Lock` per session orders them; across workers the session
row's lease does. The second request waits for the first's new view (and extends it), or,
if the lease is not released within the wait, is fitted without a summariser.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from ctxstack.compaction import ArchiveHit, HistoryArchive, SummaryNode
from ctxstack.compaction._summaries import LATEST_SUMMARY_REF
from ctxstack.messages import ChatMessage
from ctxstack.proxy.checkpoints import PrefixHasher, root_length
from ctxstack.proxy.forwarding import SESSION_HEADER
from ctxstack.proxy.request import WireConversation
from ctxstack.store import SessionFactory
from ctxstack.store.proxy_sessions import (
    SessionViewRecord,
    acquire_session_lease,
    add_session_summary,
    archive_session_messages,
    load_session_archive,
    load_session_summary,
    load_session_view,
    prune_proxy_sessions,
    release_session_lease,
    save_session_view,
)

log = logging.getLogger("ctxstack.proxy")

_KEY_HEADERS = ("authorization", "x-api-key", "api-key")
REF_PREFIX = "r"
SUMMARY_PREFIX = "s"
_SUMMARY_REF = re.compile(r"s(\d{1,18})")


def owner_salt(headers: Mapping[str, str], caller: str) -> str:
    """Who a request belongs to: the proxy caller and the client's own key, hashed. Salts
    everything the proxy keeps per conversation (sessions, checkpoints), so two keys never
    share any of it."""
    owner = hashlib.blake2b(caller.encode("utf-8", "surrogatepass"), digest_size=32)
    for name in _KEY_HEADERS:
        owner.update(b"\x1f" + headers.get(name, "").encode("utf-8", "surrogatepass"))
    return owner.hexdigest()


def session_key(headers: Mapping[str, str], messages: Sequence[Mapping[str, Any]],
                prompt_end: int, salt: str) -> str:
    """The session of a request (see the module doc; ``salt``: :func:`owner_salt`)."""
    explicit = headers.get(SESSION_HEADER, "").strip()
    if explicit:
        return hashlib.blake2b(f"{salt}\x1e{explicit}".encode("utf-8", "surrogatepass"),
                               digest_size=32).hexdigest()
    return PrefixHasher(messages, f"{salt}\x1eopening").at(root_length(messages, prompt_end))


def prefix_hash(messages: Sequence[Mapping[str, Any]], key: str, covered: int) -> str:
    """The hash of a session's first ``covered`` messages (a view's validity check)."""
    return PrefixHasher(messages, key).at(covered)


def conversation_hash(conv: WireConversation, key: str, covered: int) -> str:
    """:func:`prefix_hash` of ``conv``'s messages, taken from (and kept in) its known
    hashes when it carries them (:attr:`~ctxstack.proxy.request.WireConversation.hashes`:
    units reused from an earlier request, whose hash over them was computed then)."""
    known = conv.hashes
    if known is None:
        return prefix_hash(conv.messages, key, covered)
    found = known.get((key, covered))
    if found is None:
        found = known[(key, covered)] = prefix_hash(conv.messages, key, covered)
    return found


class SessionStore:
    """The sessions' views and archives in the proxy's database."""

    def __init__(self, factory: SessionFactory, *, ttl_seconds: float) -> None:
        self.factory = factory
        self.ttl = timedelta(seconds=ttl_seconds)
        self._saves = 0

    async def load(self, key: str) -> SessionViewRecord | None:
        return await load_session_view(self.factory, key, ttl=self.ttl)

    async def save(self, record: SessionViewRecord) -> None:
        await save_session_view(self.factory, record)
        self._saves += 1
        if self._saves % 200 == 1:  # prune now and then: saves are once per recompute
            try:
                await prune_proxy_sessions(self.factory, ttl=self.ttl)
            except Exception as exc:
                log.warning("proxy: pruning sessions failed: %s", exc)

    def archive(self, key: str, count: int = 0) -> SessionArchive:
        return SessionArchive(self.factory, key, count)


class SessionArchive:
    """A session's archive as a :class:`ctxstack.compaction.Archive` (what the guard masks,
    summarises or drops goes here; ``ctxstack_recall`` searches it). References are
    ``r<id>``, stable per session: archiving the same message again returns its ref.

    Also a :class:`~ctxstack.compaction.SummaryStore`: the summaries made for the session's
    views are kept as ``s<id>`` with the refs of what they cover, so ``ctxstack_recall``
    expands one into its sources. The rows are read once per instance (an instance serves
    one request) and read again after an :meth:`add`."""

    def __init__(self, factory: SessionFactory, key: str, count: int = 0) -> None:
        self.factory = factory
        self.key = key
        self._count = count
        self._loaded: dict[str, ChatMessage] | None = None
        """The rows by ref, in archiving order (read once, again after an add)."""

    def __len__(self) -> int:
        return self._count

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        entries = []
        for m in messages:
            data = m.to_openai()
            text = json.dumps(data, ensure_ascii=False, sort_keys=True)
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                                     digest_size=32).hexdigest()
            entries.append((digest, json.dumps(data, ensure_ascii=False)))
        ids = await archive_session_messages(self.factory, self.key, entries)
        self._count = max(self._count, len(set(ids)))
        self._loaded = None
        return [f"{REF_PREFIX}{i}" for i in ids]

    async def _rows(self) -> dict[str, ChatMessage]:
        if self._loaded is not None:
            return self._loaded
        out: dict[str, ChatMessage] = {}
        for row_id, text in await load_session_archive(self.factory, self.key):
            try:
                out[f"{REF_PREFIX}{row_id}"] = ChatMessage.from_openai(json.loads(text))
            except Exception:  # an entry that no longer parses is skipped, not fatal
                continue
        self._count = max(self._count, len(out))
        self._loaded = out
        return out

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """The library's ranking (:class:`~ctxstack.compaction.HistoryArchive`) over the
        session's archive (loaded per search: recall is rare, an archive is one
        session's)."""
        rows = await self._rows()
        memory = HistoryArchive()
        ours = dict(zip(await memory.add(list(rows.values())), rows, strict=True))
        return [hit.model_copy(update={"ref": ours[hit.ref]})
                for hit in await memory.search(query, k)]

    async def get(self, ref: str) -> ChatMessage | None:
        return (await self._rows()).get(ref.strip())

    async def add_summary(self, node: SummaryNode) -> str:
        row_id = await add_session_summary(
            self.factory, self.key, node.model_copy(update={"ref": ""}).model_dump_json())
        return f"{SUMMARY_PREFIX}{row_id}"

    async def get_summary(self, ref: str) -> SummaryNode | None:
        """The session's summary ``s<id>`` (``summary``: its newest), or None."""
        ref = ref.strip()
        match = _SUMMARY_REF.fullmatch(ref)
        if match is None and ref != LATEST_SUMMARY_REF:
            return None
        row = await load_session_summary(self.factory, self.key,
                                         int(match.group(1)) if match else None)
        if row is None:
            return None
        try:
            node = SummaryNode.model_validate_json(row[1])
        except ValueError:  # a row that no longer parses is no summary, not a failure
            return None
        return node.model_copy(update={"ref": f"{SUMMARY_PREFIX}{row[0]}"})


class RedisLease:
    """The cross-worker lease in Redis (``SET key owner NX PX``; released only by its
    owner), for proxies configured with ``CTXSTACK_REDIS_URL``."""

    _RELEASE = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
                "return redis.call('del', KEYS[1]) else return 0 end")

    def __init__(self, url: str, *, prefix: str = "ctxstack:proxy:lease:",
                 timeout: float = 2.0) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, decode_responses=True,
                                              socket_timeout=timeout,
                                              socket_connect_timeout=timeout)
        self.prefix = prefix

    async def acquire(self, key: str, owner: str, *, seconds: float) -> bool:
        return bool(await self._redis.set(self.prefix + key, owner, nx=True,
                                          px=max(1, int(seconds * 1000))))

    async def release(self, key: str, owner: str) -> None:
        await self._redis.eval(self._RELEASE, 1, self.prefix + key, owner)

    async def aclose(self) -> None:
        await self._redis.aclose()


class SingleFlight:
    """One view recomputation per session at a time, in this worker and across workers
    (see the module doc). ``async with flight.hold(key) as waited:`` — ``waited`` is True
    when another holder had it first (re-read the view: it was probably just written);
    :class:`FlightTimeout` when it could not be had within ``wait`` seconds. The
    cross-worker lease is the session row's, or Redis's when ``redis`` is given."""

    def __init__(self, factory: SessionFactory | None, *, lease_seconds: float,
                 wait_seconds: float, poll_seconds: float = 0.05,
                 redis: RedisLease | None = None) -> None:
        self.redis = redis
        self.factory = factory
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.poll = poll_seconds
        self.owner = uuid.uuid4().hex
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[bool]:
        lock = self._locks.setdefault(key, asyncio.Lock())
        deadline = time.monotonic() + self.wait_seconds
        waited = lock.locked()
        try:
            async with asyncio.timeout(self.wait_seconds):
                await lock.acquire()
        except TimeoutError:
            raise FlightTimeout(key) from None
        try:
            shared = self.redis is not None or self.factory is not None
            if shared:
                waited = await self._lease(key, deadline) or waited
            try:
                yield waited
            finally:
                if shared:
                    try:
                        await self._release(key)
                    except Exception as exc:  # it expires on its own
                        log.warning("proxy: releasing a session lease failed: %s", exc)
        finally:
            lock.release()
            if not lock.locked() and not getattr(lock, "_waiters", None):
                self._locks.pop(key, None)

    async def _acquire(self, key: str) -> bool:
        if self.redis is not None:
            return await self.redis.acquire(key, self.owner, seconds=self.lease_seconds)
        assert self.factory is not None
        return await acquire_session_lease(self.factory, key, self.owner,
                                           seconds=self.lease_seconds)

    async def _release(self, key: str) -> None:
        if self.redis is not None:
            await self.redis.release(key, self.owner)
        elif self.factory is not None:
            await release_session_lease(self.factory, key, self.owner)

    async def _lease(self, key: str, deadline: float) -> bool:
        """Take the cross-worker lease; True if another worker held it first."""
        waited = False
        while not await self._acquire(key):
            waited = True
            if time.monotonic() >= deadline:
                raise FlightTimeout(key)
            await asyncio.sleep(self.poll)
        return waited

    async def aclose(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()


class FlightTimeout(Exception):
    """Another worker held the session's lease for longer than the wait."""
