"""What the OpenAI Agents and LlamaIndex adapters share: one guarded call, its events,
and where a summary leaves the history (framework-neutral, no framework imports).

**Events.** :class:`~ctxstack.ContextGuard` reports compactions to one ``on_compact``
callback, which belongs to the user. An adapter needs the events of *its own* call (to
forward them to its framework's tracing or instrumentation) without taking the callback
away: :func:`guarded` installs a :class:`_Tap` in front of the user's callback once (it
still receives every event) and collects the events of the current call through a
context variable, so concurrent calls on one shared guard never see each other's events.

**Checkpoints.** After an LLM compaction the history is *system → summary → kept suffix*.
:func:`summary_boundary` finds the summary and the first kept original message, so an
adapter can start its next read from "summary + messages from there on" instead of
summarising the whole history again on every read (one summarisation per overflow).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from ctxstack import (
    CalibratingCounter,
    ChatMessage,
    CompactionEvent,
    ConfigError,
    ContextGuard,
    Hint,
    ModelBudget,
)

OnCompact = Callable[[CompactionEvent], Awaitable[None] | None]

_sink: ContextVar[list[CompactionEvent] | None] = ContextVar("ctxstack_integration_sink",
                                                              default=None)


class _Tap:
    """Stands in front of the user's ``on_compact``: records, then forwards."""

    def __init__(self, inner: OnCompact | None) -> None:
        self.inner = inner

    def __call__(self, event: CompactionEvent) -> Awaitable[None] | None:
        sink = _sink.get()
        if sink is not None:
            sink.append(event)
        return self.inner(event) if self.inner is not None else None


@dataclass(frozen=True)
class Guarded:
    """One guarded call's result: the fitted messages and the compactions it caused."""

    messages: list[ChatMessage]
    events: tuple[CompactionEvent, ...]


async def guarded(
    guard: ContextGuard, messages: Sequence[ChatMessage], budget: int, hint: Hint
) -> Guarded:
    """``guard.check_and_compact`` plus the :class:`CompactionEvent` list of this call."""
    if not isinstance(guard.on_compact, _Tap):
        guard.on_compact = _Tap(guard.on_compact)
    events: list[CompactionEvent] = []
    token = _sink.set(events)
    try:
        result = await guard.check_and_compact(messages, budget, hint)
    finally:
        _sink.reset(token)
    return Guarded(result, tuple(events))


def check_guard(guard: object, budget: object) -> int:
    """Validate the adapter arguments every adapter takes; return the budget in tokens.

    Raises:
        ConfigError: ``guard`` is not a ContextGuard, or ``budget`` is not a positive int
            (or a ModelBudget).
    """
    if not isinstance(guard, ContextGuard):
        raise ConfigError(f"guard: expected a ctxstack ContextGuard, got {type(guard).__name__}")
    if isinstance(budget, ModelBudget):
        return budget.usable_input_tokens
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(
            f"budget: expected a positive number of tokens or a ModelBudget, got {budget!r}"
        )
    return budget


def check_counter(guard: ContextGuard, counter: object) -> CalibratingCounter | None:
    """The calibrating counter an adapter trains: ``counter``, else the guard's own if it
    is one. A counter the guard does not use would learn for nothing, so it is refused.

    Raises:
        ConfigError: ``counter`` is not a CalibratingCounter, or not the guard's counter.
    """
    if counter is None:
        return guard.counter if isinstance(guard.counter, CalibratingCounter) else None
    if not isinstance(counter, CalibratingCounter):
        raise ConfigError(
            f"counter: expected a ctxstack CalibratingCounter, got {type(counter).__name__}"
        )
    if guard.counter is not counter:
        raise ConfigError(
            "counter: hand the same CalibratingCounter to the guard "
            "(ContextGuard(counter=...)) so that what it learns is used"
        )
    return counter


def summary_boundary(
    result: Sequence[ChatMessage], key: str
) -> tuple[ChatMessage, object] | None:
    """After an LLM compaction: the summary message and ``metadata[key]`` of the first
    original message kept after it (``None`` when there is no summary, or nothing kept)."""
    summary_at = next((i for i, m in enumerate(result) if m.kind == "summary"), None)
    if summary_at is None:
        return None
    for message in result[summary_at + 1:]:
        if key in message.metadata:
            return result[summary_at], message.metadata[key]
    return None
