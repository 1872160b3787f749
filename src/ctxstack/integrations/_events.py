"""Seeing the CompactionEvents of one guard call, without taking the guard's callback away.

An adapter must report each compaction through its framework's own channel (LangChain
callbacks, OpenTelemetry span events, …), but :class:`~ctxstack.ContextGuard` has one
``on_compact`` slot that belongs to the user. So the adapter installs, once per guard, a
relay in that slot that still calls the user's callback and also appends the event to the
list of whichever adapter call is running in the current context (a ``ContextVar``, so
concurrent tasks sharing one guard each see only their own events).

A callback assigned to ``guard.on_compact`` after the adapter was built replaces the relay:
the user's callback then still runs, but the adapter no longer reports to its framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ctxstack import CompactionEvent, ContextGuard

_sink: ContextVar[list[CompactionEvent] | None] = ContextVar("ctxstack_compaction_sink",
                                                             default=None)


class _Relay:
    """The guard's ``on_compact``: feed the current capture, then the user's callback."""

    def __init__(self, previous: object) -> None:
        self.previous = previous

    def __call__(self, event: CompactionEvent) -> Awaitable[None] | None:
        sink = _sink.get()
        if sink is not None:
            sink.append(event)
        if callable(self.previous):
            result: Awaitable[None] | None = self.previous(event)
            return result
        return None


def install_relay(guard: ContextGuard) -> None:
    """Put the relay in ``guard.on_compact`` (idempotent; the user's callback is kept)."""
    if not isinstance(guard.on_compact, _Relay):
        guard.on_compact = _Relay(guard.on_compact)


@contextmanager
def capture() -> Iterator[list[CompactionEvent]]:
    """Collect the events of the guard calls made inside the ``with`` block."""
    events: list[CompactionEvent] = []
    token = _sink.set(events)
    try:
        yield events
    finally:
        _sink.reset(token)
