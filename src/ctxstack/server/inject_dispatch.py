"""One inject poller per worker process, for every turn running in it.

An inject may be posted to any worker (:mod:`ctxstack.server.injects`), so the worker
running a turn has to look in the shared queue for it. It used to run one poll loop per
turn: under load, with tens of turns running in a worker, that was tens of queries every
interval — each a pooled connection checkout and a round trip, on SQLite a hop to the
driver's thread — almost always finding nothing. :class:`InjectDispatcher` makes it one
query per interval for all of the worker's turns (:meth:`InjectQueue.waiting`), and takes
(:meth:`InjectQueue.take`) only for the turns that have something queued.

Contract, the same as a per-turn :class:`~ctxstack.server.injects.InjectPoller`'s:

* between :meth:`~InjectDispatcher.watch` and :meth:`~InjectDispatcher.unwatch`, every
  inject queued for the turn is handed to its ``deliver`` within about one ``interval``;
* :meth:`~InjectDispatcher.unwatch` returns only once no take for the turn is in flight
  — a text taken from the queue has been delivered by then, so the turn's
  ``finish`` / ``settle`` that follows sees it as forwarded, and whatever is still queued
  stays in the queue for them (nothing is lost in between). A take still running after
  ``grace`` seconds is cancelled (its transaction rolls back: the texts stay queued);
* a storage hiccup is logged and retried at the next tick; it never ends a turn;
* a query is never cancelled mid-flight by a turn that ends (a cancelled query costs its
  pooled connection); the loop runs only while some turn is watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from dataclasses import dataclass, field

from ctxstack.server.injects import Deliver, InjectQueue

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.25
"""Seconds between two looks at the queue (the per-turn poller's interval)."""
DEFAULT_GRACE = 5.0
"""Seconds :meth:`InjectDispatcher.unwatch` waits for a take in flight before cancelling it."""


@dataclass(eq=False)
class WatchedTurn:
    """A turn the dispatcher forwards injects to (the handle :meth:`watch` returns)."""

    conversation_id: str
    turn_id: str
    deliver: Deliver
    taking: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.conversation_id, self.turn_id


class InjectDispatcher:
    """Forwards queued injects to the turns running in this worker (module docstring)."""

    def __init__(self, queue: InjectQueue, *, interval: float = DEFAULT_INTERVAL,
                 grace: float = DEFAULT_GRACE) -> None:
        self.queue = queue
        self.interval = interval
        self.grace = grace
        self._watched: dict[tuple[str, str], WatchedTurn] = {}
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    def watch(self, conversation_id: str, turn_id: str, deliver: Deliver) -> WatchedTurn:
        """Forward the injects queued for this turn to ``deliver`` until :meth:`unwatch`."""
        turn = WatchedTurn(conversation_id, turn_id, deliver)
        self._watched[turn.key] = turn
        if not self._closed and (self._task is None or self._task.done()):
            # A context of its own: the loop outlives the turn whose watch started it, and
            # must not carry that turn's context variables (the store's writer-lock flag).
            self._task = asyncio.create_task(self._run(), name="ctxstack-inject-dispatch",
                                             context=contextvars.Context())
        return turn

    async def unwatch(self, turn: WatchedTurn) -> None:
        """Stop forwarding to ``turn``; returns once no take for it is in flight."""
        if self._watched.get(turn.key) is turn:
            del self._watched[turn.key]
        taking = turn.taking
        if taking is None or taking.done():
            return
        done, _ = await asyncio.wait({taking}, timeout=self.grace)
        if not done:
            taking.cancel()
            # asyncio.wait, not await: only this task's own cancellation may raise here
            await asyncio.wait({taking})

    async def close(self) -> None:
        """Stop polling (the service's shutdown; its turns have ended by then)."""
        self._closed = True
        self._wake()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ the loop
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _pause(self) -> None:
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(self.interval, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def _run(self) -> None:
        """Every ``interval``: one look for all watched turns, a take per turn with
        something queued. Ends when no turn is watched (:meth:`watch` starts it again)."""
        while self._watched and not self._closed:
            await self._pause()
            if not self._watched or self._closed:
                return
            turns = list(self._watched)
            try:
                found = await self.queue.waiting(turns)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A storage hiccup must not end any turn; the next tick retries.
                log.warning("looking for injects of %d turns failed", len(turns),
                            exc_info=True)
                continue
            for key in found:
                turn = self._watched.get(key)  # it may have ended during the look
                if turn is not None and (turn.taking is None or turn.taking.done()):
                    turn.taking = asyncio.create_task(
                        self._take(turn), name=f"ctxstack-inject-take-{turn.turn_id}")

    async def _take(self, turn: WatchedTurn) -> None:
        try:
            for text in await self.queue.take(turn.conversation_id, turn.turn_id):
                await turn.deliver(text)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("taking injects failed for conversation %s", turn.conversation_id,
                        exc_info=True)
