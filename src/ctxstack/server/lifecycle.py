"""The lifecycle of a chat turn's claim on its conversation: one state machine, one lease.

A conversation runs at most one turn at a time. The turn holds a *claim* (a row in
``active_turns``, or a Redis key) from the moment its question is accepted until its
answer is **committed**; the claim is a lease that a heartbeat renews every
``lease / 3`` seconds, so a holder that died (kill -9, a lost machine, a database outage
longer than the lease) stops blocking the conversation after at most ``lease`` seconds
(``CTXSTACK_TURN_LEASE``, default 5). With the database queue, a server restarted on the
same host takes over the claims of its dead predecessor at once (the holder is
``host:pid``; a pid that no longer exists on this host cannot be running a turn); the
Redis queue relies on the lease alone (its claim key expires).

States and transitions (:class:`TurnLease`)::

    idle ──claim──▶ running ──finish──▶ saving ──release──▶ idle
                      │  ▲ heartbeat      │
                      └──┴─ (lease expires or holder dead) ─▶ stale ──claim──▶ running

``finish`` atomically moves the claim to ``saving`` and drains the injects nobody took
(they are stored after the answer, never lost); ``release`` deletes the claim only after
the turn's rows are committed, so the next question can never be stored between this
turn's question and its answer (issue 15, failure 1). With the database queue the three
steps ``finish`` → save → ``release`` are one transaction (:meth:`TurnLease.settle`): the
claim passes through ``saving`` inside it and is gone exactly when the answer is
committed; the Redis queue takes them one by one.

The answer the API gives in each state:

===========  =====================  =============================  ====================
state        ``POST /api/chat``     ``POST /api/chat/inject``      ``DELETE`` the conv.
===========  =====================  =============================  ====================
idle         200, a turn starts     409 no turn is running         204
running      409 turn running       202 queued for this turn       409 turn running
saving       409 turn running       409 the turn is finishing      409 turn running
stale        200, takes the claim;  409 no turn is running         204
             injects queued for
             the dead turn go to
             the new one
===========  =====================  =============================  ====================

Injects are never dropped: one queued while the turn runs is delivered to it, or, if it
arrived after the agent's last step, stored as a user message after the answer; one
queued for a holder that then died is handed to the next turn that claims the
conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, cast

from ctxstack.errors import CtxstackError
from ctxstack.store.db import SessionFactory, is_transient_error, reading, retry_transaction

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger(__name__)
T = TypeVar("T")
RetryPolicy = tuple[Callable[[BaseException], bool],
                    Callable[[BaseException], Awaitable[None]] | None]
"""``(retryable, before_retry)`` of a retried transaction (see
:func:`~ctxstack.store.db.retry_transaction`)."""

DEFAULT_LEASE_SECONDS = 5.0
LeaseState = Literal["claimed", "running", "saving", "released", "lost"]
ClaimState = Literal["running", "saving"]


class ClaimStore(Protocol):
    """The claim operations a lease drives (both inject queues implement them)."""

    async def begin(self, conversation_id: str, turn_id: str) -> None: ...

    async def heartbeat(self, conversation_id: str, turn_id: str) -> bool: ...

    async def finish(self, conversation_id: str, turn_id: str) -> list[str]: ...

    async def release(self, conversation_id: str, turn_id: str) -> None: ...


class SettlingClaimStore(ClaimStore, Protocol):
    """A claim store that can finish, save and release in one transaction (the database
    queue; the turn's rows live in the same database as the claim)."""

    async def settle(self, conversation_id: str, turn_id: str,
                     save: Callable[[AsyncSession, list[str]], Awaitable[T]]) -> T: ...


class LeaseLostError(CtxstackError):
    """This turn's claim expired and may have been taken by another turn."""


def holder_id() -> str:
    """Who holds a claim made by this process: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_is_dead(holder: str) -> bool:
    """True when ``holder`` names a process on this host that no longer exists.

    Only a claim of this very host can be judged (another host's pids mean nothing here);
    everything else is left to the lease.
    """
    host, sep, pid_text = holder.rpartition(":")
    if not sep or host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    return False


class TurnLease:
    """One turn's claim: :meth:`claim`, heartbeat while alive, :meth:`finish`, :meth:`release`.

    ``state`` follows the module's state machine; ``lost`` is set when a heartbeat found
    the claim gone (expired and taken over): the turn must then not write its answer,
    which could interleave with the new holder's turn.
    """

    def __init__(self, queue: ClaimStore, conversation_id: str, turn_id: str, *,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        self.queue = queue
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        self.lease_seconds = lease_seconds
        self.state: LeaseState = "claimed"
        self._beat: asyncio.Task[None] | None = None

    @classmethod
    async def claim(cls, queue: ClaimStore, conversation_id: str, turn_id: str, *,
                    lease_seconds: float = DEFAULT_LEASE_SECONDS,
                    write: Callable[[AsyncSession], Awaitable[object]] | None = None,
                    check: Callable[[AsyncSession], Awaitable[object]] | None = None,
                    factory: SessionFactory | None = None,
                    retry: RetryPolicy | None = None) -> TurnLease:
        """Claim the conversation and start the heartbeat.

        ``write(session)``: rows to store with the claim (the turn's question). With the
        database queue they are committed in the claim's own transaction; otherwise in a
        transaction of ``factory`` right after the claim, which is released again if that
        fails. ``retry``: the ``(retryable, before_retry)`` pair for that transaction.

        ``check(session)``: reads that must pass before anything is claimed (the route's
        "is this the caller's conversation?"); whatever it raises leaves unchanged, with
        nothing claimed or written — so a missing conversation answers 404 even while a
        turn holds it. With the database queue it runs first in the claim's transaction
        (one transaction per turn start, issue 15); otherwise in a read of ``factory``
        before the claim.

        Raises:
            TurnBusyError: another turn holds a live claim (the API answers 409).
        """
        lease = cls(queue, conversation_id, turn_id, lease_seconds=lease_seconds)
        begin_with = getattr(queue, "begin_with", None)
        if write is not None and callable(begin_with):
            await begin_with(conversation_id, turn_id, write, check=check, retry=retry)
        else:
            if check is not None:
                if factory is None:
                    raise TypeError("TurnLease.claim: check needs a factory with this queue")
                async with reading(factory, "checking the conversation of a turn") as session:
                    await check(session)
            await queue.begin(conversation_id, turn_id)
            if write is not None:
                if factory is None:
                    raise TypeError("TurnLease.claim: write needs a factory with this queue")
                retryable, before_retry = retry or (is_transient_error, None)
                try:
                    await retry_transaction(factory, "storing the turn's question", write,
                                            retryable=retryable, before_retry=before_retry)
                except BaseException:
                    await lease.release()
                    raise
        lease.state = "running"
        lease._beat = asyncio.create_task(lease._heartbeat(),
                                          name=f"ctxstack-lease-{turn_id}")
        return lease

    @property
    def lost(self) -> bool:
        return self.state == "lost"

    async def _heartbeat(self) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        while self.state in ("running", "saving"):
            await asyncio.sleep(interval)
            try:
                held = await self.queue.heartbeat(self.conversation_id, self.turn_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # the store is down: the next beat retries
                log.warning("turn %s: heartbeat failed", self.turn_id, exc_info=True)
                continue
            if held is False and self.state in ("running", "saving"):
                log.error("turn %s: lost its claim on conversation %s", self.turn_id,
                          self.conversation_id)
                self.state = "lost"

    async def finish(self) -> list[str]:
        """running → saving: stop accepting injects; return those nobody took.

        Raises:
            LeaseLostError: the claim is gone; do not save.
        """
        if self.state == "lost":
            raise LeaseLostError("the turn lost its claim on the conversation")
        leftovers = await self.queue.finish(self.conversation_id, self.turn_id)
        self.state = "saving"
        return leftovers

    @property
    def can_settle(self) -> bool:
        """Whether :meth:`settle` is available (the claim store is the database)."""
        return callable(getattr(self.queue, "settle", None))

    async def settle(self, save: Callable[[AsyncSession, list[str]], Awaitable[T]]) -> T:
        """running → released in one transaction with the turn's rows: ``save(session,
        leftovers)`` writes them (``leftovers``: the injects nobody took), the claim is
        deleted in the same commit. On failure nothing was written and the claim is
        still held (call :meth:`release`).

        Raises:
            LeaseLostError: the claim is gone; nothing was saved.
        """
        if self.state == "lost":
            raise LeaseLostError("the turn lost its claim on the conversation")
        store = cast(SettlingClaimStore, self.queue)
        self.state = "saving"
        try:
            result = await store.settle(self.conversation_id, self.turn_id, save)
        except LeaseLostError:
            self.state = "lost"
            raise
        await self._stop_heartbeat()
        self.state = "released"
        return result

    async def ack(self) -> None:
        """The turn's rows are committed: the injects it was handed leave the queue
        (a queue that removes them in :meth:`settle`'s transaction has nothing to do
        here). Never raises: texts not acknowledged go to the next turn (once more)."""
        ack = getattr(self.queue, "ack", None)
        if not callable(ack):
            return
        try:
            await ack(self.conversation_id, self.turn_id)
        except Exception:
            log.warning("turn %s: acknowledging its injects failed; the next turn gets "
                        "them again", self.turn_id, exc_info=True)

    async def _stop_heartbeat(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._beat

    async def release(self) -> None:
        """Drop the claim (call after the answer is committed). Never raises: a claim
        that cannot be deleted expires with its lease. Idempotent (nothing to do after
        :meth:`settle`)."""
        previous = self.state
        self.state = "released"
        await self._stop_heartbeat()
        if previous in ("lost", "released"):
            return
        try:
            await self.queue.release(self.conversation_id, self.turn_id)
        except Exception:
            log.warning("turn %s: releasing the claim failed; it expires in %.0f s",
                        self.turn_id, self.lease_seconds, exc_info=True)
