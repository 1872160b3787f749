"""Mid-turn messages ("injects") that reach the agent from any worker process.

A turn runs in one worker, but the ``POST /api/chat/inject`` that follows it may land on
another (several uvicorn workers, several machines behind a balancer). So neither the
"is a turn running for this conversation?" registry nor the queue of pending injects may
live in one process's memory: they live in the database (default) or in Redis (when
``CTXSTACK_REDIS_URL`` is set). The worker running the turn polls the queue (one poller
per worker, :mod:`ctxstack.server.inject_dispatch`) and hands what it finds to the agent.

Contract of both implementations:

* :meth:`~InjectQueue.begin` claims the conversation for one turn; a second claim while the
  first is alive fails (one turn per conversation at a time). A claim whose worker died
  (no heartbeat for ``stale_after`` seconds — the lease — or, on the database queue, a
  holder process that no longer exists on this host) is taken over, with the injects
  queued for it.
* :meth:`~InjectQueue.push` queues a text for the running turn, or raises
  :class:`NoRunningTurnError` (the API answers 409).
* :meth:`~InjectQueue.take` hands a turn the texts queued for it that it has not been
  handed yet, but does not remove them: an inject leaves the queue only in the
  transaction that stores the turn that used it (:meth:`DbInjectQueue.settle`; with
  Redis, :meth:`RedisInjectQueue.ack` after the save). A turn that fails to store its
  answer, or whose worker dies, leaves them queued, and the next turn of the conversation
  adopts them (issue 30: 37 of 1,886 accepted injects were lost to a killed worker and a
  database cut, each taken by a turn that then could not be stored).
* :meth:`~InjectQueue.finish` moves the claim to "saving" (pushes are refused from then
  on) and returns the texts that were pushed but never taken, so the service stores them
  instead of losing them; :meth:`~InjectQueue.release` deletes the claim once the answer
  is committed. A push racing with ``finish`` either lands before it (and is returned) or
  is refused (409). :meth:`~InjectQueue.end` is both at once.
* :meth:`~InjectQueue.heartbeat` renews the lease and says whether the claim is still
  this turn's.
* :meth:`~InjectQueue.waiting` says, in one query for many turns, which of them have
  something queued (a look, nothing is taken): a worker's one poller asks it for all
  its running turns (:mod:`ctxstack.server.inject_dispatch`) and takes only for those.

The state machine these steps form, and the API's answer in each state, is documented in
:mod:`ctxstack.server.lifecycle`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from sqlalchemy import ColumnElement, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.server.errors import NoRunningTurnError, TurnBusyError
from ctxstack.server.failures import DependencyError
from ctxstack.server.lifecycle import (
    DEFAULT_LEASE_SECONDS,
    LeaseLostError,
    RetryPolicy,
    holder_id,
    holder_is_dead,
)
from ctxstack.server.redis_client import redis_client
from ctxstack.store.db import (
    SessionFactory,
    is_transient_error,
    reading,
    retry_transaction,
    transaction,
)
from ctxstack.store.models import ActiveTurn, PendingInject, table_of, utcnow

log = logging.getLogger(__name__)
T = TypeVar("T")

# Every turn's claim, polls and settle are Core statements (see table_of); the rarer
# take-over and push keep the ORM.
_TURNS = table_of(ActiveTurn)
_INJECTS = table_of(PendingInject)
# Every turn's claim, release and drain, built once with bound parameters (building a
# Core statement and its cache key cost ~0.1 ms each time, issue 15).
_CLAIM = insert(_TURNS)
_RELEASE = delete(_TURNS).where(_TURNS.c.conversation_id == bindparam("b_conversation"),
                                _TURNS.c.turn_id == bindparam("b_turn"))
_DRAIN = (delete(_INJECTS)
          .where(_INJECTS.c.conversation_id == bindparam("b_conversation"),
                 _INJECTS.c.turn_id == bindparam("b_turn"))
          .returning(_INJECTS.c.id, _INJECTS.c.text))
# A new claim adopts whatever an earlier turn of the conversation left queued (taken but
# never stored: its save failed, or its worker died).
_ADOPT = (update(_INJECTS)
          .where(_INJECTS.c.conversation_id == bindparam("b_conversation"),
                 _INJECTS.c.turn_id != bindparam("b_turn"))
          .values(turn_id=bindparam("b_turn")))

DEFAULT_STALE_AFTER = DEFAULT_LEASE_SECONDS
DEFAULT_REDIS_TIMEOUT = 2.0
MAX_INJECT_CHARS = 20_000
_LOOKUP_CHUNK = 500  # conversation ids per query of DbInjectQueue.waiting
BUSY_MESSAGE = ("a turn is already running in this conversation; wait for it to finish "
                "or send the message as an inject")
FINISHING_MESSAGE = ("the turn is finishing its answer and takes no more injects; send the "
                     "message as a new question")


class InjectQueue(Protocol):
    """See the module docstring for the contract."""

    async def begin(self, conversation_id: str, turn_id: str) -> None: ...

    async def heartbeat(self, conversation_id: str, turn_id: str) -> bool: ...

    async def is_running(self, conversation_id: str) -> bool: ...

    async def push(self, conversation_id: str, text: str) -> None: ...

    async def take(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]: ...

    async def finish(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def release(self, conversation_id: str, turn_id: str) -> None: ...

    async def end(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def close(self) -> None: ...


class DbInjectQueue:
    """The inject queue in the service's own database (SQLite or PostgreSQL)."""

    def __init__(self, factory: SessionFactory, *, stale_after: float = DEFAULT_STALE_AFTER,
                 holder: str | None = None):
        self._factory = factory
        self.stale_after = stale_after
        self.holder = holder or holder_id()
        # the ids each running turn of this worker was handed (they stay queued until
        # its settle): take hands out only the others
        self._handed: dict[tuple[str, str], set[int]] = {}

    def _stale_before(self) -> datetime:
        return utcnow() - timedelta(seconds=self.stale_after)

    def _live(self, row: ActiveTurn) -> bool:
        return row.heartbeat_at >= self._stale_before() and not holder_is_dead(row.holder)

    async def begin(self, conversation_id: str, turn_id: str) -> None:
        await self.begin_with(conversation_id, turn_id, _nothing)

    async def begin_with(
        self, conversation_id: str, turn_id: str, write: Callable[[AsyncSession], Awaitable[T]],
        *, check: Callable[[AsyncSession], Awaitable[object]] | None = None,
        retry: RetryPolicy | None = None,
    ) -> T:
        """:meth:`begin` and ``write(session)`` in one transaction: the claim and the rows
        ``write`` adds (the turn's question) are committed together or not at all — one
        write transaction instead of two (SQLite has one writer, and under load the turns
        queue for it). ``check(session)``, when given, runs first in that transaction,
        before the claim is looked at: what it raises (the route's 404 for a conversation
        that is not the caller's) wins over a busy claim, and nothing is written.
        ``retry``: ``(retryable, before_retry)`` for the transaction (see
        :func:`~ctxstack.store.db.retry_transaction`; default: transient lock errors).

        Raises:
            TurnBusyError: another turn holds a live claim (nothing was written).
        """
        retryable, before_retry = retry or (is_transient_error, None)
        now = utcnow()

        async def claim(s: AsyncSession) -> T:
            if check is not None:
                await check(s)
            connection = await s.connection()
            try:
                await connection.execute(_CLAIM, {
                    "conversation_id": conversation_id, "turn_id": turn_id,
                    "started_at": now, "heartbeat_at": now, "state": "running",
                    "holder": self.holder})
            except IntegrityError:  # held (or was): see whether it can be taken over
                raise _Held() from None
            await connection.execute(_ADOPT, _bound(conversation_id, turn_id))
            return await write(s)

        async def take_over(s: AsyncSession) -> T:
            if check is not None:
                await check(s)
            await self._take_over(s, conversation_id, turn_id, now)
            return await write(s)

        action = "claiming the conversation for a turn"
        try:
            return await retry_transaction(self._factory, action, claim, retryable=retryable,
                                           before_retry=before_retry)
        except _Held:
            pass
        try:
            return await retry_transaction(self._factory, "taking over a stale turn",
                                           take_over, retryable=retryable,
                                           before_retry=before_retry)
        except _Held:  # another claimant won the race for a freed claim
            raise TurnBusyError(BUSY_MESSAGE) from None

    async def _take_over(self, s: AsyncSession, conversation_id: str, turn_id: str,
                         now: datetime) -> None:
        """Someone holds the claim: take it over only if its lease expired or its holder
        process is gone; the injects queued for it go to this turn (never dropped)."""
        row = await s.scalar(select(ActiveTurn).where(
            ActiveTurn.conversation_id == conversation_id))
        if row is not None and self._live(row):
            raise TurnBusyError(BUSY_MESSAGE)
        if row is None:  # released meanwhile
            s.add(ActiveTurn(conversation_id=conversation_id, turn_id=turn_id,
                             started_at=now, heartbeat_at=now, state="running",
                             holder=self.holder))
            try:
                await s.flush()
            except IntegrityError:
                raise _Held() from None
            return
        old_turn = row.turn_id
        taken = await s.execute(
            update(ActiveTurn)
            .where(ActiveTurn.conversation_id == conversation_id,
                   ActiveTurn.turn_id == old_turn)
            .values(turn_id=turn_id, started_at=now, heartbeat_at=now, state="running",
                    holder=self.holder)
        )
        if taken.rowcount != 1:  # type: ignore[attr-defined]
            raise TurnBusyError(BUSY_MESSAGE)
        await s.execute(update(PendingInject).where(
            PendingInject.conversation_id == conversation_id).values(turn_id=turn_id))

    async def heartbeat(self, conversation_id: str, turn_id: str) -> bool:
        async with transaction(self._factory, "refreshing a turn's heartbeat") as s:
            done = await (await s.connection()).execute(
                update(_TURNS).where(*_this_turn(conversation_id, turn_id))
                .values(heartbeat_at=utcnow()))
            return done.rowcount == 1

    async def is_running(self, conversation_id: str) -> bool:
        async with transaction(self._factory, "checking for a running turn") as s:
            row = await s.scalar(select(ActiveTurn).where(
                ActiveTurn.conversation_id == conversation_id))
            return row is not None and self._live(row)

    async def push(self, conversation_id: str, text: str) -> None:
        async with transaction(self._factory, "queueing an inject") as s:
            # FOR SHARE (PostgreSQL; ignored by SQLite, whose writers serialise anyway)
            # makes a concurrent finish() wait until this insert is committed, so the
            # text is either taken, returned by finish(), or refused — never orphaned.
            row = await s.scalar(
                select(ActiveTurn)
                .where(ActiveTurn.conversation_id == conversation_id)
                .with_for_update(read=True)
            )
            if row is None or not self._live(row):
                raise NoRunningTurnError("no turn is running in this conversation")
            if row.state != "running":
                raise NoRunningTurnError(FINISHING_MESSAGE)
            s.add(PendingInject(conversation_id=conversation_id, turn_id=row.turn_id,
                                text=text))

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        # A read (never waits for SQLite's writer lock): the texts stay queued until the
        # turn is stored (settle), so a failed or killed turn leaves them to the next.
        async with reading(self._factory, "looking for pending injects") as s:
            rows = (await (await s.connection()).execute(
                select(_INJECTS.c.id, _INJECTS.c.text)
                .where(*_queued_for(conversation_id, turn_id))
                .order_by(_INJECTS.c.id))).all()
        handed = self._handed.setdefault((conversation_id, turn_id), set())
        fresh = [(i, text) for i, text in rows if i not in handed]
        handed.update(i for i, _ in fresh)
        return [text for _, text in fresh]

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        # One read for all of a worker's running turns (by the indexed conversation id;
        # the turn id is matched here), chunked below SQLite's bound-parameter limit.
        wanted = set(turns)
        conversations = sorted({c for c, _ in wanted})
        found: set[tuple[str, str]] = set()
        if not conversations:
            return found
        async with reading(self._factory, "looking for pending injects") as s:
            connection = await s.connection()
            for i in range(0, len(conversations), _LOOKUP_CHUNK):
                rows = await connection.execute(
                    select(_INJECTS.c.conversation_id, _INJECTS.c.turn_id, _INJECTS.c.id)
                    .where(_INJECTS.c.conversation_id.in_(
                        conversations[i:i + _LOOKUP_CHUNK])))
                # rows already handed to their turn stay until it is stored: not news
                found.update((c, t) for c, t, row_id in rows if (c, t) in wanted
                             and row_id not in self._handed.get((c, t), ()))
        return found

    async def finish(self, conversation_id: str, turn_id: str) -> list[str]:
        async with transaction(self._factory, "finishing a turn") as s:
            await _to_saving(s, conversation_id, turn_id)
            return await self._drain(s, conversation_id, turn_id)

    async def settle(self, conversation_id: str, turn_id: str,
                     save: Callable[[AsyncSession, list[str]], Awaitable[T]]) -> T:
        """:meth:`finish`, ``save(session, leftovers)`` and :meth:`release` in one
        transaction: the claim goes from running to released exactly when the turn's
        rows are committed (one write instead of three — SQLite has one writer, and
        under load the turns queue for it). A push racing with it lands before (and is
        among the leftovers) or finds no running turn (409), as with :meth:`finish`.

        Raises:
            LeaseLostError: the claim is no longer this turn's (nothing is written).
        """
        async def work(s: AsyncSession) -> T:
            # Deleting the claim first is the lease check (and takes the row lock a
            # concurrent push waits on); inside this one transaction "saving" would never
            # be visible to anyone, so the claim goes straight from running to released.
            gone = await (await s.connection()).execute(
                _RELEASE, _bound(conversation_id, turn_id))
            if gone.rowcount != 1:
                raise LeaseLostError("the turn lost its claim on the conversation")
            return await save(s, await self._drain(s, conversation_id, turn_id))

        result = await retry_transaction(self._factory, "saving and releasing a turn", work)
        self._handed.pop((conversation_id, turn_id), None)  # stored: gone from the queue
        return result

    async def release(self, conversation_id: str, turn_id: str) -> None:
        """Delete the claim. Injects still queued for the turn (handed to it but not
        stored with it) stay, for the conversation's next turn to adopt."""
        self._handed.pop((conversation_id, turn_id), None)
        async with transaction(self._factory, "releasing a turn") as s:
            await (await s.connection()).execute(_RELEASE, _bound(conversation_id, turn_id))

    async def end(self, conversation_id: str, turn_id: str) -> list[str]:
        """finish + release in one go (for callers with nothing to save in between)."""
        async with transaction(self._factory, "ending a turn") as s:
            await (await s.connection()).execute(_RELEASE, _bound(conversation_id, turn_id))
            left = await self._drain(s, conversation_id, turn_id)
        self._handed.pop((conversation_id, turn_id), None)
        return left

    async def _drain(self, s: AsyncSession, conversation_id: str, turn_id: str) -> list[str]:
        """Delete the turn's queued rows; the texts it was never handed (the ones it was
        are the turn's to store: consumed, or left over by the engine)."""
        rows = (await (await s.connection()).execute(
            _DRAIN, _bound(conversation_id, turn_id))).all()
        handed = self._handed.get((conversation_id, turn_id), set())
        return [text for row_id, text in sorted(rows) if row_id not in handed]

    async def close(self) -> None:
        return None


class _Held(Exception):
    """Inside :meth:`DbInjectQueue.begin_with`: the claim row exists (the transaction is
    rolled back and the take-over is tried)."""


async def _nothing(_: AsyncSession) -> None:
    return None


class RedisInjectQueue:
    """The inject queue in Redis: a claim key with a TTL and a list per conversation.

    Keys: ``ctxstack:turn:<conversation>`` holds ``<state>:<turn id>`` (expires after
    ``stale_after`` seconds unless the heartbeat renews it); ``ctxstack:injects:<conv>``
    is the list of pending texts — per conversation, so what was queued for a turn whose
    holder died is taken by the next turn; ``ctxstack:taken:<conv>`` holds the texts
    handed to the running turn until :meth:`ack` (its answer is stored) deletes them —
    a release without ack, or a new claim after a dead one, puts them back in front of
    the pending list for the next turn. Check-and-act steps are Lua scripts, so they
    are atomic. Every call is bounded by ``timeout`` seconds; a Redis failure leaves as
    :class:`~ctxstack.server.failures.DependencyError` (``dependency="redis"``).
    """

    _BEGIN = """
    if redis.call('SET', KEYS[1], 'running:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then
      local taken = redis.call('LRANGE', KEYS[3], 0, -1)
      for i = #taken, 1, -1 do redis.call('LPUSH', KEYS[2], taken[i]) end
      redis.call('DEL', KEYS[3])
      return 1 end
    return 0
    """
    _PUSH = """
    local claim = redis.call('GET', KEYS[1])
    if not claim then return 0 end
    if string.sub(claim, 1, 8) ~= 'running:' then return -1 end
    redis.call('RPUSH', KEYS[2], ARGV[1])
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    return 1
    """
    # The tail of _TAKE and _FINISH: the pending texts (KEYS[2]) move behind the taken
    # ones (KEYS[3], kept ARGV[2] seconds) and are returned.
    _HAND_OVER = """
    local items = redis.call('LRANGE', KEYS[2], 0, -1)
    redis.call('DEL', KEYS[2])
    for i = 1, #items do redis.call('RPUSH', KEYS[3], items[i]) end
    if #items > 0 then redis.call('EXPIRE', KEYS[3], ARGV[2]) end
    return items
    """
    _TAKE = """
    if redis.call('GET', KEYS[1]) ~= 'running:' .. ARGV[1] then return {} end
    """ + _HAND_OVER
    _FINISH = """
    if redis.call('GET', KEYS[1]) ~= 'running:' .. ARGV[1] then return nil end
    redis.call('SET', KEYS[1], 'saving:' .. ARGV[1], 'PX', ARGV[3])
    """ + _HAND_OVER
    _RELEASE = """
    local claim = redis.call('GET', KEYS[1])
    if claim == 'running:' .. ARGV[1] or claim == 'saving:' .. ARGV[1] then
      local taken = redis.call('LRANGE', KEYS[3], 0, -1)
      for i = #taken, 1, -1 do redis.call('LPUSH', KEYS[2], taken[i]) end
      if #taken > 0 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
      redis.call('DEL', KEYS[3])
      redis.call('DEL', KEYS[1]) end
    return 1
    """
    _ACK = """
    local claim = redis.call('GET', KEYS[1])
    if claim == 'running:' .. ARGV[1] or claim == 'saving:' .. ARGV[1] then
      redis.call('DEL', KEYS[2]) end
    return 1
    """
    _BEAT = """
    local claim = redis.call('GET', KEYS[1])
    if claim == 'running:' .. ARGV[1] or claim == 'saving:' .. ARGV[1] then
      return redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 0
    """

    def __init__(self, url: str, *, stale_after: float = DEFAULT_STALE_AFTER,
                 prefix: str = "ctxstack:", timeout: float = DEFAULT_REDIS_TIMEOUT) -> None:
        self._redis = redis_client(url, timeout)
        self.stale_after = stale_after
        self.prefix = prefix

    def _key(self, kind: Literal["turn", "injects", "taken"], conversation_id: str) -> str:
        """A conversation's key: ``turn`` its claim, ``injects`` its queue, ``taken`` the
        injects a turn drained and has not settled yet."""
        return f"{self.prefix}{kind}:{conversation_id}"

    def _keys(self, conversation_id: str) -> list[str]:
        return [self._key(kind, conversation_id) for kind in ("turn", "injects", "taken")]

    def _keep_seconds(self) -> int:
        """How long texts stay queued for a conversation nobody claims again."""
        return max(86_400, int(self.stale_after * 20))

    def _ttl_ms(self) -> int:
        return max(1, int(self.stale_after * 1000))

    async def _eval(self, script: str, keys: list[str], *args: str | int) -> Any:
        from redis.exceptions import RedisError

        try:
            return await self._redis.eval(script, len(keys), *keys, *args)
        except RedisError as exc:
            raise DependencyError("redis", f"{type(exc).__name__}: {exc}") from exc

    async def begin(self, conversation_id: str, turn_id: str) -> None:
        ok = await self._eval(self._BEGIN, self._keys(conversation_id), turn_id,
                              self._ttl_ms())
        if not ok:
            raise TurnBusyError(BUSY_MESSAGE)

    async def heartbeat(self, conversation_id: str, turn_id: str) -> bool:
        return bool(await self._eval(self._BEAT, [self._key("turn", conversation_id)], turn_id,
                                     self._ttl_ms()))

    async def is_running(self, conversation_id: str) -> bool:
        from redis.exceptions import RedisError

        try:
            return bool(await self._redis.exists(self._key("turn", conversation_id)))
        except RedisError as exc:
            raise DependencyError("redis", f"{type(exc).__name__}: {exc}") from exc

    async def push(self, conversation_id: str, text: str) -> None:
        pushed = await self._eval(
            self._PUSH, [self._key("turn", conversation_id), self._key("injects", conversation_id)],
            text, self._keep_seconds())
        if pushed == -1:
            raise NoRunningTurnError(FINISHING_MESSAGE)
        if not pushed:
            raise NoRunningTurnError("no turn is running in this conversation")

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        items = await self._eval(self._TAKE, self._keys(conversation_id), turn_id,
                                 self._keep_seconds())
        return [str(i) for i in items or []]

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        # One round trip for all of a worker's running turns; :meth:`take` checks the
        # claim for the few that have a list.
        from redis.exceptions import RedisError

        if not turns:
            return set()
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for conversation_id, _ in turns:
                    pipe.exists(self._key("injects", conversation_id))
                counts = await pipe.execute()
        except RedisError as exc:
            raise DependencyError("redis", f"{type(exc).__name__}: {exc}") from exc
        return {key for key, count in zip(turns, counts, strict=True) if count}

    async def finish(self, conversation_id: str, turn_id: str) -> list[str]:
        items = await self._eval(self._FINISH, self._keys(conversation_id), turn_id,
                                 self._keep_seconds(), self._ttl_ms())
        if items is None:
            raise LeaseLostError("the turn lost its claim on the conversation")
        return [str(i) for i in items]

    async def ack(self, conversation_id: str, turn_id: str) -> None:
        """The turn's answer is stored: the texts handed to it (taken, or returned by
        :meth:`finish`) leave the queue. Without this, :meth:`release` re-queues them."""
        await self._eval(self._ACK, [self._key("turn", conversation_id),
                                     self._key("taken", conversation_id)], turn_id)

    async def release(self, conversation_id: str, turn_id: str) -> None:
        await self._eval(self._RELEASE, self._keys(conversation_id), turn_id,
                         self._keep_seconds())

    async def end(self, conversation_id: str, turn_id: str) -> list[str]:
        """finish + release in one go (for callers with nothing to save in between)."""
        try:
            items = await self.finish(conversation_id, turn_id)
        except LeaseLostError:
            items = []
        await self.ack(conversation_id, turn_id)
        await self.release(conversation_id, turn_id)
        return items

    async def close(self) -> None:
        await self._redis.aclose()


class InjectPoller:
    """Runs beside one turn: forwards queued injects to ``deliver`` (and, with
    ``heartbeat_every``, renews the claim; the service's turns have
    :class:`~ctxstack.server.lifecycle.TurnLease` do that from the claim on). The service
    itself runs one poller per worker for all its turns instead
    (:class:`~ctxstack.server.inject_dispatch.InjectDispatcher`).

    Polling (every ``interval`` seconds) instead of a push channel keeps both backends the
    same and costs one indexed query per running turn per interval.
    """

    def __init__(self, queue: InjectQueue, conversation_id: str, turn_id: str, *,
                 interval: float = 0.25, heartbeat_every: float | None = None) -> None:
        self.queue = queue
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.interval = interval
        self.heartbeat_every = heartbeat_every
        self._stopped = False
        self._waiter: asyncio.Future[None] | None = None

    def stop(self) -> None:
        """End :meth:`run` at its next pause, never inside a query: a query cancelled
        mid-flight leaves its database connection in an unknown state, and the pool
        discards it (on PostgreSQL a new server process for the next checkout)."""
        self._stopped = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _pause(self) -> bool:
        """Wait one interval (cut short by :meth:`stop`); True once stopped."""
        if self._stopped:
            return True
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        wake = loop.call_later(self.interval, _wake, waiter)
        try:
            await waiter
        finally:
            wake.cancel()
            self._waiter = None
        return self._stopped

    async def run(self, deliver: Deliver) -> None:
        """Poll until stopped (:meth:`stop`) or cancelled. Storage hiccups are retried at
        the next tick."""
        last_beat = time.monotonic()
        while not await self._pause():
            try:
                for text in await self.queue.take(self.conversation_id, self.turn_id):
                    await deliver(text)
                if (self.heartbeat_every is not None
                        and time.monotonic() - last_beat >= self.heartbeat_every):
                    await self.queue.heartbeat(self.conversation_id, self.turn_id)
                    last_beat = time.monotonic()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A storage hiccup must not end the turn; the next tick retries.
                log.warning("inject poll failed for conversation %s", self.conversation_id,
                            exc_info=True)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Deliver(Protocol):
    """Hands one inject to the running turn."""

    async def __call__(self, text: str) -> None: ...


async def _to_saving(s: AsyncSession, conversation_id: str, turn_id: str) -> None:
    """Move this turn's claim from running to saving, or raise :class:`LeaseLostError`
    when the claim is no longer this turn's."""
    moved = await (await s.connection()).execute(
        update(_TURNS).where(*_this_turn(conversation_id, turn_id))
        .values(state="saving", heartbeat_at=utcnow()))
    if moved.rowcount != 1:
        raise LeaseLostError("the turn lost its claim on the conversation")


def _bound(conversation_id: str, turn_id: str) -> dict[str, str]:
    """The parameters of :data:`_RELEASE` and :data:`_DRAIN`."""
    return {"b_conversation": conversation_id, "b_turn": turn_id}


def _this_turn(conversation_id: str, turn_id: str) -> tuple[ColumnElement[bool], ...]:
    return (_TURNS.c.conversation_id == conversation_id, _TURNS.c.turn_id == turn_id)


def _queued_for(conversation_id: str, turn_id: str) -> tuple[ColumnElement[bool], ...]:
    return (_INJECTS.c.conversation_id == conversation_id, _INJECTS.c.turn_id == turn_id)
