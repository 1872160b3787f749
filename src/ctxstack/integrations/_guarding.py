"""What the OpenAI Agents and LlamaIndex adapters share: one guarded call, its events,
and where a summary leaves the history (framework-neutral, no framework imports).

**Events.** An adapter needs the events of *its own* call (to forward them to its
framework's tracing or instrumentation): :meth:`ContextGuard.check` returns them with the
fitted messages, so concurrent calls on one shared guard never see each other's events,
and the guard's ``on_compact`` listeners (the user's) still see every event.

**Checkpoints.** After an LLM compaction the history is *system → summary → kept suffix*.
:func:`summary_boundary` finds the summary and the first kept original message, so an
adapter can start its next read from "summary + messages from there on" instead of
summarising the whole history again on every read (one summarisation per overflow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxstack import (
    CalibratingCounter,
    ChatMessage,
    CompactionEvent,
    ConfigError,
    ContextGuard,
    Hint,
)
from ctxstack.budget import input_tokens


@dataclass(frozen=True)
class Guarded:
    """One guarded call's result: the fitted messages and the compactions it caused."""

    messages: list[ChatMessage]
    events: tuple[CompactionEvent, ...]


async def guarded(
    guard: ContextGuard, messages: Sequence[ChatMessage], budget: int, hint: Hint
) -> Guarded:
    """``guard.check`` as the fitted messages and the compactions of this call. The
    callers (a session's or a memory's view, a per-call filter) fit the whole stored
    history again at every call: ``carried=False``."""
    result, event = await guard.check(messages, budget, hint, carried=False)
    return Guarded(result, (event,) if event is not None else ())


def check_guard(guard: object, budget: object, *, default: bool = False) -> int:
    """Validate the adapter arguments every adapter takes; return the budget in tokens.

    With ``default=True`` a ``budget`` of None means the guard's ``default_budget`` (the
    adapters whose framework passes no window of its own).

    Raises:
        ConfigError: ``guard`` is not a ContextGuard, or ``budget`` is not a positive int
            (or a ModelBudget).
    """
    if not isinstance(guard, ContextGuard):
        raise ConfigError(f"guard: expected a ctxstack ContextGuard, got {type(guard).__name__}")
    if budget is None and default:
        return guard.default_budget
    return input_tokens(budget, "budget")


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


class ModelWindow:
    """The two numbers ctxstack's :class:`~ctxstack.LLM` protocol asks of a model, checked
    once: what the framework summarisers (LangChain, pydantic-ai) share."""

    def __init__(self, context_size: int, max_output_tokens: int) -> None:
        for name, value in (("context_size", context_size),
                            ("max_output_tokens", max_output_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
        self._context_size = context_size
        self._max_output_tokens = max_output_tokens

    @property
    def context_size(self) -> int:
        return self._context_size

    @property
    def max_output_tokens(self) -> int:
        return self._max_output_tokens
