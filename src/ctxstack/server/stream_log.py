"""Where every chat turn's SSE events are recorded, so any worker can replay them.

Each turn's stream is a numbered log: event ``n`` (1, 2, …) goes out on the wire as
``id: <turn id>.<n>``, so a client that lost the connection — a reload, a dropped
network, a second tab, a load balancer that sends the next request to another host —
asks ``GET /api/conversations/{id}/stream`` with ``Last-Event-ID`` and gets what it
missed, then the rest live (:mod:`ctxstack.server.streams`).

Two backends with one contract (:class:`StreamLog`):

* :class:`RedisStreamLog` when ``CTXSTACK_REDIS_URL`` is set: one Redis stream per turn
  (``XADD`` with the explicit id ``<n>-0``, read with ``XRANGE``), a small hash with the
  turn's conversation, whether it ended, when a reader last read it and whether a stop
  was asked, and a key naming each conversation's newest turn;
* :class:`DbStreamLog` otherwise: the ``turn_streams`` and ``turn_stream_events`` tables.

Retention is bounded (``CTXSTACK_STREAM_RETENTION`` seconds, default 3600): a stream is
deleted that long after its turn ended (Redis: key expiry; database: :meth:`prune`, run
at most once a minute when a turn starts). A turn still running keeps its stream;
one whose worker died mid-turn (never ended) is deleted ``retention`` seconds after
its last event plus a day.

Writes are best effort for the turn: a failing backend is logged and the turn goes on
(its own HTTP response does not depend on the log); only resuming elsewhere is lost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import delete, insert, or_, select, update

from ctxstack.server.failures import DependencyError
from ctxstack.server.redis_client import redis_client
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.models import TurnStream, TurnStreamEvent, table_of, utcnow

DEFAULT_RETENTION_SECONDS = 3600.0
ABANDONED_EXTRA_SECONDS = 86_400.0
"""A stream whose turn never ended (its worker died) is kept this much longer."""
PRUNE_INTERVAL = 60.0
READ_LIMIT = 500


@dataclass(frozen=True)
class Recorded:
    """One recorded event: its number in the turn, its name and its JSON payload."""

    seq: int
    event: str
    data: str


@dataclass(frozen=True)
class StreamInfo:
    """What is known of one turn's stream."""

    turn_id: str
    conversation_id: str
    ended: bool
    watched_at: float
    """Unix time a reader last read it (the turn's own response counts while open)."""
    stop_requested: bool


class StreamLog(Protocol):
    """The recorded streams (see the module docstring)."""

    async def open(self, turn_id: str, conversation_id: str) -> None: ...

    async def append(self, turn_id: str, events: Sequence[Recorded], *, end: bool) -> None: ...

    async def read(self, turn_id: str, after: int,
                   limit: int = READ_LIMIT) -> tuple[list[Recorded], bool]: ...

    async def info(self, turn_id: str) -> StreamInfo | None: ...

    async def latest(self, conversation_id: str) -> StreamInfo | None: ...

    async def touch(self, turn_id: str) -> None: ...

    async def request_stop(self, turn_id: str) -> None: ...

    async def prune(self) -> int: ...

    async def close(self) -> None: ...


def _ts(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


class DbStreamLog:
    """The streams in the database (``turn_streams``, ``turn_stream_events``)."""

    def __init__(self, factory: SessionFactory, *,
                 retention: float = DEFAULT_RETENTION_SECONDS) -> None:
        self.factory = factory
        self.retention = retention
        self._pruned = 0.0

    async def open(self, turn_id: str, conversation_id: str) -> None:
        if time.monotonic() - self._pruned > PRUNE_INTERVAL:
            self._pruned = time.monotonic()
            await self.prune()
        now = utcnow()
        async with transaction(self.factory, "recording a turn's stream") as session:
            await session.execute(insert(table_of(TurnStream)).values(
                turn_id=turn_id, conversation_id=conversation_id, started_at=now,
                watched_at=now, stop_requested=False))

    async def append(self, turn_id: str, events: Sequence[Recorded], *, end: bool) -> None:
        async with transaction(self.factory, "recording a turn's events") as session:
            if events:
                await session.execute(insert(table_of(TurnStreamEvent)), [
                    {"turn_id": turn_id, "seq": e.seq, "event": e.event, "data": e.data}
                    for e in events])
            if end:
                await session.execute(update(table_of(TurnStream)).where(
                    TurnStream.turn_id == turn_id).values(ended_at=utcnow()))

    async def read(self, turn_id: str, after: int,
                   limit: int = READ_LIMIT) -> tuple[list[Recorded], bool]:
        events = table_of(TurnStreamEvent)
        async with reading(self.factory, "reading a turn's stream") as session:
            # The end first: it is written with the last events in one transaction, so an
            # end seen here guarantees the rows read next are complete (reads are per
            # statement; the other order could see no rows, then the end, and lose them).
            ended = await session.scalar(select(TurnStream.ended_at).where(
                TurnStream.turn_id == turn_id))
            rows = (await session.execute(
                select(events.c.seq, events.c.event, events.c.data)
                .where(events.c.turn_id == turn_id, events.c.seq > after)
                .order_by(events.c.seq).limit(limit))).all()
        return [Recorded(int(r[0]), str(r[1]), str(r[2])) for r in rows], ended is not None

    @staticmethod
    def _info(row: TurnStream) -> StreamInfo:
        return StreamInfo(turn_id=row.turn_id, conversation_id=row.conversation_id,
                          ended=row.ended_at is not None, watched_at=_ts(row.watched_at),
                          stop_requested=bool(row.stop_requested))

    async def info(self, turn_id: str) -> StreamInfo | None:
        async with reading(self.factory, "reading a turn's stream") as session:
            row = await session.scalar(select(TurnStream).where(TurnStream.turn_id == turn_id))
            return self._info(row) if row is not None else None

    async def latest(self, conversation_id: str) -> StreamInfo | None:
        async with reading(self.factory, "reading a conversation's streams") as session:
            row = await session.scalar(
                select(TurnStream).where(TurnStream.conversation_id == conversation_id)
                .order_by(TurnStream.started_at.desc()).limit(1))
            return self._info(row) if row is not None else None

    async def touch(self, turn_id: str) -> None:
        async with transaction(self.factory, "marking a stream as read") as session:
            await session.execute(update(table_of(TurnStream)).where(
                TurnStream.turn_id == turn_id).values(watched_at=utcnow()))

    async def request_stop(self, turn_id: str) -> None:
        async with transaction(self.factory, "asking a turn to stop") as session:
            await session.execute(update(table_of(TurnStream)).where(
                TurnStream.turn_id == turn_id).values(stop_requested=True))

    async def prune(self) -> int:
        """Delete the streams past retention; how many."""
        now = datetime.now(UTC)
        ended_before = now - timedelta(seconds=self.retention)
        abandoned_before = ended_before - timedelta(seconds=ABANDONED_EXTRA_SECONDS)
        async with transaction(self.factory, "pruning recorded streams") as session:
            old = select(TurnStream.turn_id).where(or_(
                TurnStream.ended_at < ended_before,
                (TurnStream.ended_at.is_(None)) & (TurnStream.watched_at < abandoned_before)))
            ids = list(await session.scalars(old))
            if not ids:
                return 0
            await session.execute(delete(TurnStreamEvent).where(
                TurnStreamEvent.turn_id.in_(ids)))
            await session.execute(delete(TurnStream).where(TurnStream.turn_id.in_(ids)))
            return len(ids)

    async def close(self) -> None:
        return None


class RedisStreamLog:
    """The streams in Redis (see the module docstring). Every call is bounded by
    ``timeout``; a Redis failure leaves as a ``DependencyError("redis")``."""

    def __init__(self, url: str, *, retention: float = DEFAULT_RETENTION_SECONDS,
                 prefix: str = "ctxstack:", timeout: float = 2.0) -> None:
        self._redis = redis_client(url, timeout)
        self.retention = retention
        self.prefix = prefix

    def _events(self, turn_id: str) -> str:
        return f"{self.prefix}stream:{turn_id}"

    def _meta(self, turn_id: str) -> str:
        return f"{self.prefix}stream:{turn_id}:meta"

    def _latest(self, conversation_id: str) -> str:
        return f"{self.prefix}streams:{conversation_id}"

    def _running_ttl(self) -> int:
        return int(self.retention + ABANDONED_EXTRA_SECONDS)

    async def _run(self, work: Any) -> Any:
        from redis.exceptions import RedisError

        try:
            return await work
        except RedisError as exc:
            raise DependencyError("redis", f"{type(exc).__name__}: {exc}") from exc

    async def open(self, turn_id: str, conversation_id: str) -> None:
        ttl = self._running_ttl()
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._meta(turn_id), mapping={
                "conversation": conversation_id, "ended": "0", "watched": str(time.time()),
                "stop": "0"})
            pipe.expire(self._meta(turn_id), ttl)
            pipe.set(self._latest(conversation_id), turn_id, ex=ttl)
            await self._run(pipe.execute())

    async def append(self, turn_id: str, events: Sequence[Recorded], *, end: bool) -> None:
        ttl = int(self.retention) if end else self._running_ttl()
        async with self._redis.pipeline(transaction=True) as pipe:
            for e in events:
                pipe.xadd(self._events(turn_id), {"e": e.event, "d": e.data}, id=f"{e.seq}-0")
            if end:
                pipe.hset(self._meta(turn_id), "ended", "1")
            pipe.expire(self._meta(turn_id), ttl)
            if events or end:
                pipe.expire(self._events(turn_id), ttl)
            await self._run(pipe.execute())

    async def read(self, turn_id: str, after: int,
                   limit: int = READ_LIMIT) -> tuple[list[Recorded], bool]:
        async with self._redis.pipeline(transaction=True) as pipe:
            # One MULTI/EXEC: the end and the events as one snapshot (an append's own
            # MULTI/EXEC cannot fall between them).
            pipe.hget(self._meta(turn_id), "ended")
            pipe.xrange(self._events(turn_id), min=f"({after}-0", max="+", count=limit)
            ended, entries = await self._run(pipe.execute())
        out = [Recorded(int(str(entry_id).split("-", 1)[0]), str(fields.get("e", "")),
                        str(fields.get("d", "")))
               for entry_id, fields in entries or []]
        return out, ended == "1"

    async def info(self, turn_id: str) -> StreamInfo | None:
        meta = await self._run(self._redis.hgetall(self._meta(turn_id)))
        if not meta:
            return None
        return StreamInfo(turn_id=turn_id, conversation_id=str(meta.get("conversation", "")),
                          ended=meta.get("ended") == "1",
                          watched_at=float(meta.get("watched") or 0.0),
                          stop_requested=meta.get("stop") == "1")

    async def latest(self, conversation_id: str) -> StreamInfo | None:
        turn_id = await self._run(self._redis.get(self._latest(conversation_id)))
        return await self.info(str(turn_id)) if turn_id else None

    async def touch(self, turn_id: str) -> None:
        await self._run(self._redis.hset(self._meta(turn_id), "watched", str(time.time())))

    async def request_stop(self, turn_id: str) -> None:
        await self._run(self._redis.hset(self._meta(turn_id), "stop", "1"))

    async def prune(self) -> int:
        return 0  # keys expire by themselves

    async def close(self) -> None:
        await self._redis.aclose()


__all__ = ["DEFAULT_RETENTION_SECONDS", "DbStreamLog", "Recorded", "RedisStreamLog",
           "StreamInfo", "StreamLog"]
