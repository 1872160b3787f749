"""Resumable turn streams: record a turn's events, serve them live or from any worker.

A turn feeds its events to a queue (:class:`~ctxstack.server.turn.Turn`); a
:class:`TurnRecorder` drains it, numbers each event, keeps it in memory for the readers
on this worker and writes it to the :class:`~ctxstack.server.stream_log.StreamLog`
(batched: what arrived while the previous write ran goes in the next). Every frame
carries ``id: <turn id>.<n>``.

Readers:

* the response to the request that started the turn, and any ``GET`` of its stream on
  the same worker, read the recorder's memory (:meth:`TurnRecorder.frames`);
* a ``GET`` on another worker or host follows the log (:func:`follow_log`), polling it,
  and marks the stream as read (``touch``) while it does; the stream of a turn whose
  worker died ends with an "interrupted" error, recorded for every later reader.

A turn now outlives its reader: a reload must find it still running. It stops

* when asked: ``POST /api/conversations/{id}/stop`` (the page's Stop button), on any
  worker — the turn's own worker cancels it at once, another sets the stream's stop flag,
  which the turn's watchdog reads within a second;
* when nobody has read it for ``CTXSTACK_STREAM_RESUME_GRACE`` seconds (default 15):
  the turn then saves what it produced as "stopped", as it always did when its client
  went away. ``0`` stops it as soon as its last reader disconnects (the behaviour before
  streams were resumable).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from sse_starlette import ServerSentEvent

from ctxstack.server.persist import INTERRUPTED_ANSWER
from ctxstack.server.settings import Settings
from ctxstack.server.sse import ErrorData, SseErrorEvent, SSEEvent
from ctxstack.server.stream_log import DbStreamLog, Recorded, RedisStreamLog, StreamLog
from ctxstack.store.db import SessionFactory

log = logging.getLogger(__name__)

WATCH_INTERVAL = 1.0
"""Seconds between two checks of a running turn's readers and stop flag."""
FOLLOW_POLL = 0.1
"""Seconds between two reads of the log by a reader on another worker."""
TOUCH_INTERVAL = 1.0
ENDING_GRACE = 1.0
"""Seconds a reader waits for a turn found not running to end its stream itself."""
FLUSH_INTERVAL = 0.05
"""Seconds between two writes of a turn's new events to the log."""


def event_id(turn_id: str, seq: int) -> str:
    """The SSE ``id`` of event ``seq`` of a turn."""
    return f"{turn_id}.{seq}"


def parse_event_id(value: str | None) -> tuple[str, int] | None:
    """``(turn id, seq)`` of a ``Last-Event-ID``, or ``None`` when it is not one of ours."""
    if not value:
        return None
    turn_id, sep, seq = value.strip().rpartition(".")
    if not sep or not seq.isdigit() or not turn_id or len(turn_id) > 32 \
            or not turn_id.isalnum():
        return None
    return turn_id, int(seq)


def frame(turn_id: str, item: Recorded) -> bytes:
    """One SSE frame with its id (the payload is one line of JSON)."""
    return ServerSentEvent(item.data, event=item.event, id=event_id(turn_id, item.seq),
                           sep="\n").encode()


def recorded(seq: int, event: SSEEvent) -> Recorded:
    payload = json.dumps(event.data.model_dump(mode="json"), ensure_ascii=False,
                         separators=(",", ":"))
    return Recorded(seq=seq, event=event.event, data=payload)


class TurnRecorder:
    """Numbers, keeps and records one turn's events (see the module docstring)."""

    def __init__(self, hub: StreamHub, turn_id: str, conversation_id: str,
                 queue: asyncio.Queue[SSEEvent | None]) -> None:
        self.hub = hub
        self.turn_id = turn_id
        self.conversation_id = conversation_id
        self.queue = queue
        self.events: list[Recorded] = []
        self.ended = False
        self.readers = 0
        self.last_read = time.time()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._logged = True

    async def start(self, task: asyncio.Task[None]) -> None:
        """Begin recording the turn running as ``task`` (cancelled to stop it)."""
        self._task = task
        try:
            await self.hub.log.open(self.turn_id, self.conversation_id)
        except Exception:
            log.warning("turn %s: its stream cannot be recorded (not resumable)",
                        self.turn_id, exc_info=True)
            self._logged = False
        self.hub.local[self.turn_id] = self
        self._pump = asyncio.create_task(self._run(), name=f"ctxstack-stream-{self.turn_id}")
        self._watch = asyncio.create_task(self._watchdog(),
                                          name=f"ctxstack-watch-{self.turn_id}")

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _run(self) -> None:
        """Drain the turn's queue into memory at once (the readers here see every event
        without waiting for the log) and wake the writer."""
        writer = asyncio.create_task(self._writer(), name=f"ctxstack-log-{self.turn_id}")
        try:
            while not self.ended:
                item = await self.queue.get()
                while True:
                    if item is None:
                        self.ended = True
                        break
                    self.events.append(recorded(len(self.events) + 1, item))
                    if self.queue.empty():
                        break
                    item = self.queue.get_nowait()
                self._notify()
        finally:
            self.ended = True
            self._notify()
            if self._watch is not None:
                self._watch.cancel()
            try:
                await writer
            finally:
                # Only now: until the log says the stream ended, readers here must keep
                # reading it from memory (the log would look unfinished to them).
                self.hub.forget(self)

    async def _writer(self) -> None:
        """Write what arrived since the last write, at most every ``FLUSH_INTERVAL``
        seconds (a streamed answer's deltas go to the log a batch at a time)."""
        written = 0
        while True:
            ended = self.ended
            if written < len(self.events) or ended:
                batch = self.events[written:]
                written += len(batch)
                await self._write(batch, end=ended and written == len(self.events))
                if ended and written == len(self.events):
                    return
            changed = self._changed
            if not self.ended and written == len(self.events):
                await changed.wait()
            await asyncio.sleep(FLUSH_INTERVAL)

    async def _write(self, batch: list[Recorded], *, end: bool) -> None:
        if not self._logged:
            return
        try:
            await self.hub.log.append(self.turn_id, batch, end=end)
        except Exception:
            log.warning("turn %s: recording its events failed (resuming elsewhere may miss "
                        "them)", self.turn_id, exc_info=True)

    # ------------------------------------------------------------------ readers here
    async def frames(self, after: int = 0) -> AsyncIterator[bytes]:
        """The events after ``after``, then the rest as they come (the response adds the
        keep-alive comments)."""
        index = max(0, after)
        while True:
            if index < len(self.events):
                chunk = self.events[index:]
                index += len(chunk)
                self.last_read = time.time()
                yield b"".join(frame(self.turn_id, e) for e in chunk)
                continue
            if self.ended:
                return
            await self._changed.wait()

    def attach(self) -> Callable[[], None]:
        """Count a reader; returns what to call when it disconnects before the end."""
        self.readers += 1
        self.last_read = time.time()
        done = False

        def detach() -> None:
            nonlocal done
            if done:
                return
            done = True
            self.readers -= 1
            self.last_read = time.time()
            if self.readers <= 0 and self.hub.settings.stream_resume_grace <= 0:
                self.stop()
        return detach

    def stop(self) -> None:
        """Cancel the turn (it saves what it produced as "stopped")."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _watchdog(self) -> None:
        """Stop the turn when asked on another worker, or when nobody read it for the
        grace period (see the module docstring)."""
        grace = self.hub.settings.stream_resume_grace
        while not self.ended:
            await asyncio.sleep(WATCH_INTERVAL)
            if self.ended:
                return
            remote = 0.0
            if self._logged:
                try:
                    info = await self.hub.log.info(self.turn_id)
                except Exception:
                    info = None
                if info is not None:
                    if info.stop_requested:
                        self.stop()
                        return
                    remote = info.watched_at
            if self.readers > 0 or grace <= 0:
                continue
            if time.time() - max(self.last_read, remote) > grace:
                log.info("turn %s: nobody read it for %.0f s; stopping it", self.turn_id,
                         grace)
                self.stop()
                return


async def follow_log(hub: StreamHub, turn_id: str, after: int,
                     running: Callable[[], Awaitable[bool]]) -> AsyncIterator[bytes]:
    """The events of a turn recorded by another worker, after ``after``, polled from the
    log until the stream ended.

    A worker that died mid-turn (``kill -9``, a lost host) never ends its stream: when
    nothing came for three leases and ``running()`` says the turn no longer runs, the
    stream ends with the outcome the conversation will store for it — an ``error`` event
    saying the turn was interrupted (:data:`~ctxstack.server.persist.INTERRUPTED_ANSWER`),
    recorded so that later readers get it at once and the stream reads as ended. (Before,
    it ended without a last event, and a page reconnecting to another host retried for
    minutes.)"""
    quiet_limit = max(3 * hub.settings.turn_lease, 2.0)
    last_event = last_touch = time.monotonic()
    touched = False
    while True:
        now = time.monotonic()
        if not touched or now - last_touch >= TOUCH_INTERVAL:
            touched, last_touch = True, now
            with contextlib.suppress(Exception):
                await hub.log.touch(turn_id)
        events, ended = await hub.log.read(turn_id, after)
        if events:
            after = events[-1].seq
            last_event = time.monotonic()
            yield b"".join(frame(turn_id, e) for e in events)
            continue
        if ended:
            return
        if time.monotonic() - last_event > quiet_limit:
            if not await running() and await _still_silent(hub, turn_id, after):
                yield await _interrupted(hub, turn_id, after)
                return
            last_event = time.monotonic()
        await asyncio.sleep(FOLLOW_POLL)


async def _still_silent(hub: StreamHub, turn_id: str, after: int) -> bool:
    """A last look at the log, :data:`ENDING_GRACE` seconds after the turn was found not
    running: a turn that just ended releases its claim before its ``done`` reaches the
    log, and must not be declared interrupted."""
    await asyncio.sleep(ENDING_GRACE)
    events, ended = await hub.log.read(turn_id, after, limit=1)
    return not events and not ended


async def _interrupted(hub: StreamHub, turn_id: str, after: int) -> bytes:
    """The last event of a turn whose worker died, recorded as the stream's end (best
    effort: a second reader recording it too is refused, and sends the same)."""
    item = recorded(after + 1, SseErrorEvent(data=ErrorData(message=INTERRUPTED_ANSWER,
                                                            kind="failed")))
    try:
        await hub.log.append(turn_id, [item], end=True)
    except Exception:
        log.info("turn %s: its interrupted end was not recorded", turn_id, exc_info=True)
    return frame(turn_id, item)


CLOSE_GRACE_SECONDS = 5.0


@dataclass
class StreamHub:
    """A worker's recorded streams: the log and the turns recording here."""

    settings: Settings
    log: StreamLog
    local: dict[str, TurnRecorder] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: Settings, factory: SessionFactory) -> StreamHub:
        """Redis streams when Redis is configured, the database otherwise."""
        stream_log: StreamLog
        if settings.redis_url:
            stream_log = RedisStreamLog(settings.redis_url,
                                        retention=settings.stream_retention,
                                        timeout=settings.redis_timeout)
        else:
            stream_log = DbStreamLog(factory, retention=settings.stream_retention)
        return cls(settings=settings, log=stream_log)

    def forget(self, recorder: TurnRecorder) -> None:
        if self.local.get(recorder.turn_id) is recorder:
            del self.local[recorder.turn_id]

    async def close(self) -> None:
        """Let the recordings finish their last writes (a few seconds at most), then close
        the log: a write after the close would open a connection nobody closes."""
        # A recorder stays in ``local`` until its last write is done (``_run``).
        pumps = {r._pump for r in self.local.values() if r._pump is not None}
        if pumps:
            _, pending = await asyncio.wait(pumps, timeout=CLOSE_GRACE_SECONDS)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self.log.close()


__all__ = ["StreamHub", "TurnRecorder", "event_id", "follow_log", "frame",
           "parse_event_id"]
