"""Mid-turn messages ("injects") that reach the agent from any worker process.

A turn runs in one worker, but the ``POST /api/chat/inject`` that follows it may land on
another (several uvicorn workers, several machines behind a balancer). So neither the
"is a turn running for this conversation?" registry nor the queue of pending injects may
live in one process's memory: they live in the database (default) or in Redis (when
``CTXSTACK_REDIS_URL`` is set). The worker running the turn polls :meth:`InjectQueue.take`
and hands what it finds to the agent.

Contract of both implementations:

* :meth:`~InjectQueue.begin` claims the conversation for one turn; a second claim while the
  first is alive fails (one turn per conversation at a time). A claim whose worker died
  (no heartbeat for ``stale_after`` seconds) may be taken over.
* :meth:`~InjectQueue.push` queues a text for the running turn, or raises
  :class:`NoRunningTurnError` (the API answers 409).
* :meth:`~InjectQueue.end` releases the claim and returns the texts that were pushed but
  never taken, so the service can store them instead of losing them. A push racing with
  ``end`` either lands before it (and is returned) or sees no running turn (409).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import NoRunningTurnError, TurnBusyError
from ctxstack.store.db import SessionFactory, transaction
from ctxstack.store.models import ActiveTurn, PendingInject, utcnow

log = logging.getLogger(__name__)

DEFAULT_STALE_AFTER = 30.0
MAX_INJECT_CHARS = 20_000


class InjectQueue(Protocol):
    """See the module docstring for the contract."""

    async def begin(self, conversation_id: str, turn_id: str) -> None: ...

    async def heartbeat(self, conversation_id: str, turn_id: str) -> None: ...

    async def is_running(self, conversation_id: str) -> bool: ...

    async def push(self, conversation_id: str, text: str) -> None: ...

    async def take(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def end(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def close(self) -> None: ...


class DbInjectQueue:
    """The inject queue in the service's own database (SQLite or PostgreSQL)."""

    def __init__(self, factory: SessionFactory, *, stale_after: float = DEFAULT_STALE_AFTER):
        self._factory = factory
        self.stale_after = stale_after

    def _stale_before(self) -> datetime:
        return utcnow() - timedelta(seconds=self.stale_after)

    async def begin(self, conversation_id: str, turn_id: str) -> None:
        now = utcnow()
        try:
            async with transaction(self._factory, "claiming the conversation for a turn") as s:
                s.add(ActiveTurn(conversation_id=conversation_id, turn_id=turn_id,
                                 started_at=now, heartbeat_at=now))
                await s.flush()
            return
        except Exception as exc:  # IntegrityError arrives wrapped in StorageError
            if not _is_integrity(exc):
                raise
        # Someone holds the claim: take it over only if its worker stopped beating.
        async with transaction(self._factory, "taking over a stale turn") as s:
            taken = await s.execute(
                update(ActiveTurn)
                .where(ActiveTurn.conversation_id == conversation_id,
                       ActiveTurn.heartbeat_at < self._stale_before())
                .values(turn_id=turn_id, started_at=now, heartbeat_at=now)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                raise TurnBusyError(
                    "a turn is already running in this conversation; wait for it to finish "
                    "or send the message as an inject"
                )
            await s.execute(delete(PendingInject).where(
                PendingInject.conversation_id == conversation_id))

    async def heartbeat(self, conversation_id: str, turn_id: str) -> None:
        async with transaction(self._factory, "refreshing a turn's heartbeat") as s:
            await s.execute(
                update(ActiveTurn)
                .where(ActiveTurn.conversation_id == conversation_id,
                       ActiveTurn.turn_id == turn_id)
                .values(heartbeat_at=utcnow())
            )

    async def is_running(self, conversation_id: str) -> bool:
        async with transaction(self._factory, "checking for a running turn") as s:
            found = await s.scalar(
                select(ActiveTurn.turn_id).where(
                    ActiveTurn.conversation_id == conversation_id,
                    ActiveTurn.heartbeat_at >= self._stale_before())
            )
            return found is not None

    async def push(self, conversation_id: str, text: str) -> None:
        async with transaction(self._factory, "queueing an inject") as s:
            # FOR SHARE (PostgreSQL; ignored by SQLite, whose writers serialise anyway)
            # makes a concurrent end() wait until this insert is committed, so the text
            # is either taken, returned by end(), or refused — never orphaned.
            turn_id = await s.scalar(
                select(ActiveTurn.turn_id)
                .where(ActiveTurn.conversation_id == conversation_id,
                       ActiveTurn.heartbeat_at >= self._stale_before())
                .with_for_update(read=True)
            )
            if turn_id is None:
                raise NoRunningTurnError("no turn is running in this conversation")
            s.add(PendingInject(conversation_id=conversation_id, turn_id=turn_id, text=text))

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        async with transaction(self._factory, "taking pending injects") as s:
            return await self._drain(s, conversation_id, turn_id)

    async def end(self, conversation_id: str, turn_id: str) -> list[str]:
        async with transaction(self._factory, "ending a turn") as s:
            await s.execute(delete(ActiveTurn).where(
                ActiveTurn.conversation_id == conversation_id, ActiveTurn.turn_id == turn_id))
            return await self._drain(s, conversation_id, turn_id)

    @staticmethod
    async def _drain(s: AsyncSession, conversation_id: str, turn_id: str) -> list[str]:
        rows = (await s.execute(
            delete(PendingInject)
            .where(PendingInject.conversation_id == conversation_id,
                   PendingInject.turn_id == turn_id)
            .returning(PendingInject.id, PendingInject.text)
        )).all()
        return [text for _, text in sorted(rows)]

    async def close(self) -> None:
        return None


def _is_integrity(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, IntegrityError):
            return True
        seen = seen.__cause__
    return False


class RedisInjectQueue:
    """The inject queue in Redis: a claim key with a TTL and a list per turn.

    Keys: ``ctxstack:turn:<conversation>`` holds the running turn id (expires after
    ``stale_after`` seconds unless the heartbeat renews it); ``ctxstack:injects:<turn>`` is
    the list of pending texts. Check-and-act steps are Lua scripts, so they are atomic.
    """

    _PUSH = """
    local turn = redis.call('GET', KEYS[1])
    if not turn then return nil end
    redis.call('RPUSH', ARGV[2] .. turn, ARGV[1])
    redis.call('EXPIRE', ARGV[2] .. turn, ARGV[3])
    return turn
    """
    _END = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
    local items = redis.call('LRANGE', KEYS[2], 0, -1)
    redis.call('DEL', KEYS[2])
    return items
    """
    _TAKE = """
    local items = redis.call('LRANGE', KEYS[1], 0, -1)
    redis.call('DEL', KEYS[1])
    return items
    """
    _BEAT = """
    if redis.call('GET', KEYS[1]) == ARGV[1] then
      return redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 0
    """

    def __init__(self, url: str, *, stale_after: float = DEFAULT_STALE_AFTER,
                 prefix: str = "ctxstack:") -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self.stale_after = stale_after
        self.prefix = prefix

    def _turn_key(self, conversation_id: str) -> str:
        return f"{self.prefix}turn:{conversation_id}"

    def _list_prefix(self) -> str:
        return f"{self.prefix}injects:"

    async def begin(self, conversation_id: str, turn_id: str) -> None:
        ok = await self._redis.set(self._turn_key(conversation_id), turn_id, nx=True,
                                   px=int(self.stale_after * 1000))
        if not ok:
            raise TurnBusyError(
                "a turn is already running in this conversation; wait for it to finish "
                "or send the message as an inject"
            )

    async def heartbeat(self, conversation_id: str, turn_id: str) -> None:
        await self._redis.eval(self._BEAT, 1, self._turn_key(conversation_id), turn_id,
                               int(self.stale_after * 1000))

    async def is_running(self, conversation_id: str) -> bool:
        return bool(await self._redis.exists(self._turn_key(conversation_id)))

    async def push(self, conversation_id: str, text: str) -> None:
        turn = await self._redis.eval(
            self._PUSH, 1, self._turn_key(conversation_id), text, self._list_prefix(),
            int(self.stale_after * 4),
        )
        if turn is None:
            raise NoRunningTurnError("no turn is running in this conversation")

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        items = await self._redis.eval(
            self._TAKE, 1, self._list_prefix() + turn_id)
        return [str(i) for i in items or []]

    async def end(self, conversation_id: str, turn_id: str) -> list[str]:
        items = await self._redis.eval(
            self._END, 2, self._turn_key(conversation_id), self._list_prefix() + turn_id,
            turn_id)
        return [str(i) for i in items or []]

    async def close(self) -> None:
        await self._redis.aclose()


class InjectPoller:
    """Runs beside a turn: forwards queued injects to ``deliver`` and keeps the claim alive.

    Polling (every ``interval`` seconds) instead of a push channel keeps both backends the
    same and costs one indexed query per running turn per interval.
    """

    def __init__(self, queue: InjectQueue, conversation_id: str, turn_id: str, *,
                 interval: float = 0.25, heartbeat_every: float = 5.0) -> None:
        self.queue = queue
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.interval = interval
        self.heartbeat_every = heartbeat_every

    async def run(self, deliver: _Deliver) -> None:
        """Poll until cancelled. Storage hiccups are retried at the next tick."""
        last_beat = time.monotonic()
        while True:
            await asyncio.sleep(self.interval)
            try:
                for text in await self.queue.take(self.conversation_id, self.turn_id):
                    await deliver(text)
                if time.monotonic() - last_beat >= self.heartbeat_every:
                    await self.queue.heartbeat(self.conversation_id, self.turn_id)
                    last_beat = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A storage hiccup must not end the turn; the next tick retries.
                log.warning("inject poll failed for conversation %s", self.conversation_id,
                            exc_info=True)


class _Deliver(Protocol):
    async def __call__(self, text: str) -> None: ...
