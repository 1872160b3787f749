"""A token counter that learns how far its estimates are from what the provider bills.

The heuristic counter (ASCII/4, non-ASCII/1.5) can be systematically off for a given
model — code-heavy or punctuation-heavy prompts, a tokenizer with a small vocabulary, the
provider's own chat-template overhead. A guard that under-counts by 30% lets a "fitting"
prompt overflow the real window. :class:`CalibratingCounter` fixes that from evidence:
after each LLM call it is told the estimate it made and the ``input_tokens`` the provider
reported, and it learns a per-model correction factor applied to later estimates.

The factor is:

* **smoothed** — an exponential moving average (``smoothing`` is the weight of a new
  sample), so one odd call does not swing it;
* **bounded** — clamped to ``[min_factor, max_factor]`` (default 0.5–3.0), so a bad
  stream of samples cannot make the guard wildly over- or under-count;
* **robust** — samples whose ratio is not finite, whose estimate is too small to be
  meaningful (``min_sample_tokens``), or whose ratio lies beyond twice the bounds (a
  provider reporting a cached or a zero figure, a caller passing the wrong number) are
  ignored and counted in :attr:`CalibratingCounter.rejected`;
* **per model** — ``observe(..., model="gpt-4o")`` trains that model's factor; a model
  with no samples yet uses the factor learnt without a model name, else 1.0.

The library never calibrates unless you build one and feed it (the chat service does, see
``CTXSTACK_CALIBRATE``). The simplest feed is a metered LLM, which observes every call
whose usage the provider reported::

    from ctxstack.tokens._metering import UsageMeter

    llm = UsageMeter().wrap(raw_llm, calibrate=counter)

Or by hand::

    from ctxstack.tokens._calibration import CalibratingCounter
    from ctxstack.guard._guard import ContextGuard

    counter = CalibratingCounter(model="gpt-4o")          # wraps the heuristic counter
    guard = ContextGuard(compact_llm=fast_llm, counter=counter)
    ...
    messages = await guard.check_and_compact(messages, hint="react_iteration")
    result = await llm.chat(messages)
    counter.observe_result(messages, result)              # learn from the provider's figure

``observe_result`` computes the base estimate of exactly the messages sent and skips
results whose usage was itself estimated. The lower-level
``observe(estimated_input_tokens, reported_input_tokens, model=None)`` takes the *base*
counter's figure (``counter.base_count(messages)``), never the calibrated one, or the
factor would chase its own tail. Tool schemas sent with the call are billed by the
provider but are not messages: :meth:`CalibratingCounter.observe_call` (what a metered
LLM uses) adds the base estimate of the specs' JSON to the estimated side, so the factor
corrects the text estimate rather than learning the tool list's size; ``observe_result``
and ``observe_messages`` know nothing of tools, so a steady tool overhead is learnt into
their factor (an over-count: the safe direction).

Anchoring: a factor removes a bias, not the scatter of single texts (a few % per text).
But a provider call is the whole request — system prompt, tool schemas, the conversation
so far — and consecutive calls share all but their newest messages. So after an accepted
:meth:`~CalibratingCounter.observe_call` / ``observe_messages`` the counter keeps a
:class:`CallAnchor` (those messages and the reported total less the tool specs' share);
a later ``count_messages`` of a list that *extends* them is the reported total plus the
per-kind calibrated estimate of the new tail, so only the tail is guessed. A list that
does not extend them (compacted, another conversation) is counted by the factors alone.
The anchor belongs to the counter object (in practice one conversation in one process):
it is neither shared with :meth:`~CalibratingCounter.for_model` views nor exported, so the
persisted per-model state (``ctxstack.store.calibration``) is unchanged. A report that is
rejected (zero, negative, absurd ratio) neither sets nor replaces it. The factor bounds
bound the anchored count as well (between ``min_factor`` and ``max_factor`` times the base
estimate), so a counter that corrects upward only (``min_factor=1``) stays upward only.

Lower bound: no calibrated count — text, message or list, anchored or not — is below the
heuristic's own lower bound (:func:`~ctxstack.tokens._model.lower_bound`: 8 characters per
token, plus the per-message overhead, images and binary parts, see :func:`message_floor`).

Caching: the per-message cache (see :class:`~ctxstack.tokens.TokenCounter`) holds the
*base* counter's figures under the base key; the factor is applied on top, to totals.
So learning never invalidates the cache, and this counter's own ``cache_key`` (which
nothing is stored under) differs from the base's, so nobody reads an uncalibrated figure
believing it calibrated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any

from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, ImagePart
from ctxstack.protocol import LLMResult, ToolSpec, Usage
from ctxstack.tokens._counter import (
    DEFAULT_COUNTER,
    TokenCounter,
    budget_margin,
    message_cache,
    tool_specs_tokens,
)
from ctxstack.tokens._model import CONTENT_KINDS, content_kind, lower_bound
from ctxstack.tokens._parts import binary_part_tokens


def message_kind(message: ChatMessage) -> int:
    """The content kind of a message's text (index into ``CONTENT_KINDS``), cached on it."""
    cache = message_cache(message)
    kind = cache.get("content-kind")
    if kind is None:
        text = message.text
        if message.tool_calls:
            text = " ".join([text, *(c.arguments_json for c in message.tool_calls)])
        kind = cache["content-kind"] = content_kind(text)
    return kind


def message_floor(message: ChatMessage, base: TokenCounter) -> int:
    """The least a calibrated count of ``message`` may say (cached on it): the base
    counter's per-message overhead, images and binary parts plus the heuristic's lower
    bound for its characters (:func:`~ctxstack.tokens._model.lower_bound`), never above the
    base count."""
    cache = message_cache(message)
    key = f"floor:{base.cache_key}"
    floor = cache.get(key)
    if floor is None:
        chars = len(message.text) + sum(len(c.name) + len(c.arguments_json) + 2
                                        for c in message.tool_calls or ())
        images = sum(isinstance(p, ImagePart) for p in message.content or ()) \
            if isinstance(message.content, list) else 0
        binary = sum(binary_part_tokens(p) for p in message.binary_parts)
        floor = (int(getattr(base, "message_overhead", 0)) + lower_bound(chars)
                 + images * int(getattr(base, "image_tokens", 0)) + binary)
        floor = cache[key] = min(floor, base.count_message(message))
    return floor


@dataclass(frozen=True)
class CallAnchor:
    """What the provider reported for the messages of the last observed call.

    ``tokens`` is the reported input minus the calibrated estimate of the tool specs sent
    with it; ``floor`` the sum of the messages' :func:`message_floor` (0 for a counter
    whose ``min_factor`` is at least 1, where floors cannot bind). A later list that
    *extends* ``messages`` (the same messages, by identity or equality, then more) is
    counted as ``tokens`` + the per-kind calibrated estimate of the new tail: consecutive
    calls of one conversation share most of their content, so only the tail is guessed.

    Per counter object and process (in practice per conversation): never persisted.
    """

    messages: tuple[ChatMessage, ...]
    tokens: float
    floor: int


def extends(messages: Sequence[ChatMessage], prefix: Sequence[ChatMessage]) -> bool:
    """Whether ``messages`` starts with ``prefix`` (each message the same object or equal)."""
    k = len(prefix)
    if len(messages) < k:
        return False
    head = messages[:k]
    if all(map(is_, head, prefix)):  # the same objects: the usual case, at C speed
        return True
    return all(a is b or a == b for a, b in zip(head, prefix, strict=True))


@dataclass
class _State:
    """Factors and sample counts, shared by every model view of one counter."""

    factors: dict[str | None, float] = field(default_factory=dict)
    samples: dict[str | None, int] = field(default_factory=dict)
    rejected: int = 0
    listeners: list[Callable[[CalibratingCounter], None]] = field(default_factory=list)
    kind_factors: dict[tuple[str | None, int], float] = field(default_factory=dict)
    """(model, content kind) → factor, learnt from calls whose messages are known."""
    kind_models: set[str | None] = field(default_factory=set)
    """The models (``None``: no name) with an entry in ``kind_factors``: whether a view
    applies per-kind factors is one set lookup, not a scan of the table per message."""

    def set_kind_factor(self, model: str | None, kind: int, value: float) -> None:
        self.kind_factors[(model, kind)] = value
        self.kind_models.add(model)


class CalibratingCounter:
    """A :class:`~ctxstack.tokens.TokenCounter` whose estimates carry a learnt factor.

    Args:
        base: the counter whose figures are corrected (default: the heuristic).
        model: the model whose factor this view applies (``None``: the unnamed factor).
        min_factor: lower bound of the factor.
        max_factor: upper bound of the factor.
        smoothing: weight of a new sample in the moving average (0 < smoothing ≤ 1).
        min_sample_tokens: estimates below this are too small to learn from.

    Raises:
        ConfigError: bounds or smoothing out of range.
    """

    def __init__(
        self,
        base: TokenCounter | None = None,
        *,
        model: str | None = None,
        min_factor: float = 0.5,
        max_factor: float = 3.0,
        smoothing: float = 0.3,
        min_sample_tokens: int = 32,
    ) -> None:
        if not (0 < min_factor <= 1.0 <= max_factor) or not math.isfinite(max_factor):
            raise ConfigError(
                f"min_factor/max_factor: need 0 < min_factor <= 1 <= max_factor < inf, "
                f"got {min_factor!r} and {max_factor!r}"
            )
        if not (0 < smoothing <= 1):
            raise ConfigError(f"smoothing: expected 0 < smoothing <= 1, got {smoothing!r}")
        if min_sample_tokens < 1:
            raise ConfigError(f"min_sample_tokens: expected >= 1, got {min_sample_tokens!r}")
        self.base: TokenCounter = base or DEFAULT_COUNTER
        self.model = model
        self.min_factor = min_factor
        self.max_factor = max_factor
        self.smoothing = smoothing
        self.min_sample_tokens = min_sample_tokens
        self._state = _State()
        self._anchor: CallAnchor | None = None

    def for_model(self, model: str | None) -> CalibratingCounter:
        """A view applying ``model``'s factor; it shares what this counter has learnt."""
        view = CalibratingCounter(
            self.base,
            model=model,
            min_factor=self.min_factor,
            max_factor=self.max_factor,
            smoothing=self.smoothing,
            min_sample_tokens=self.min_sample_tokens,
        )
        view._state = self._state
        return view

    # ------------------------------------------------------------------ learning
    def factor(self, model: str | None = None) -> float:
        """The correction for ``model`` (or this view's model): learnt, unnamed, or 1.0."""
        key = self.model if model is None else model
        factors = self._state.factors
        if key in factors:
            return factors[key]
        return factors.get(None, 1.0)

    def samples(self, model: str | None = None) -> int:
        """How many accepted samples trained ``model``'s factor (this view's by default)."""
        return self._state.samples.get(self.model if model is None else model, 0)

    @property
    def rejected(self) -> int:
        """Samples ignored as absurd (see the module docstring)."""
        return self._state.rejected

    def observe(
        self, estimated_input_tokens: int, reported_input_tokens: int, model: str | None = None,
        *, kinds: Sequence[int] | None = None,
    ) -> bool:
        """Learn from one call: the base estimate and the provider-reported input tokens.

        ``model`` defaults to this view's model. ``kinds``: the same estimate split by
        content kind (:meth:`kind_estimates`), which also trains the per-kind factors.
        Returns whether the sample was used.
        """
        key = self.model if model is None else model
        if estimated_input_tokens < self.min_sample_tokens or reported_input_tokens <= 0:
            self._state.rejected += 1
            return False
        ratio = reported_input_tokens / estimated_input_tokens
        if not math.isfinite(ratio) or not (
            self.min_factor / 2 <= ratio <= self.max_factor * 2
        ):
            self._state.rejected += 1
            return False
        factors = self._state.factors
        # A model's first sample starts from the unnamed factor (or 1.0): the best guess
        # before any evidence about this model.
        current = factors.get(key, factors.get(None, 1.0))
        updated = current + self.smoothing * (ratio - current)
        factors[key] = self._clamp(updated)
        self._state.samples[key] = self._state.samples.get(key, 0) + 1
        if kinds is not None:
            self._learn_kinds(key, kinds, reported_input_tokens)
        for listener in list(self._state.listeners):
            listener(self)
        return True

    def _clamp(self, value: float) -> float:
        return min(self.max_factor, max(self.min_factor, value))

    def _learn_kinds(self, key: str | None, kinds: Sequence[int], reported: int) -> None:
        """Per-kind factors by normalised least mean squares: the call's error is shared
        among the kinds in proportion to their share of the estimate (a call of one kind
        moves that kind's factor like an exponential average)."""
        current = [self.kind_factor(kind, key) for kind in range(len(CONTENT_KINDS))]
        predicted = sum(f * e for f, e in zip(current, kinds, strict=True))
        norm = sum(e * e for e in kinds)
        if norm <= 0:
            return
        error = reported - predicted
        # The first few calls average the evidence (weight 1, 1/2, 1/3…) before the moving
        # average takes over: five calls should be enough to learn a tokenizer.
        rate = max(self.smoothing, 1.0 / max(1, self._state.samples.get(key, 1)))
        for kind, estimate in enumerate(kinds):
            if estimate > 0:
                step = rate * error * estimate / norm
                self._state.set_kind_factor(key, kind, self._clamp(current[kind] + step))

    def kind_factor(self, kind: int, model: str | None = None) -> float:
        """The correction for content kind ``kind`` (index into ``CONTENT_KINDS``): learnt
        for the model, else for no model name, else the model's overall factor."""
        key = self.model if model is None else model
        table = self._state.kind_factors
        hit = table.get((key, kind))
        if hit is None:
            hit = table.get((None, kind))
        return hit if hit is not None else self.factor(key)

    def kind_estimates(self, messages: Iterable[ChatMessage]) -> list[int]:
        """The base estimate of ``messages`` split by content kind (cached per message)."""
        out = [0] * len(CONTENT_KINDS)
        key = self.base.cache_key
        for message in messages:
            # both figures are cached on the message: read them without function calls
            # (this runs on the guard's under-budget path)
            private = message.__pydantic_private__
            cache = private["_token_cache"] if private else message_cache(message)
            tokens = cache.get(key)
            kind = cache.get("content-kind")
            out[message_kind(message) if kind is None else kind] += (
                self.base.count_message(message) if tokens is None else tokens)
        return out

    # ------------------------------------------------------------------ persistence
    @property
    def listeners(self) -> list[Callable[[CalibratingCounter], None]]:
        """Called with this counter after every accepted sample (e.g. to persist it);
        shared by every model view. A listener must not raise."""
        return self._state.listeners

    def export_state(self) -> dict[str, Any]:
        """What was learnt, as JSON-ready data (the unnamed factor under ``""``)."""
        return {
            "factors": {k or "": v for k, v in self._state.factors.items()},
            "samples": {k or "": v for k, v in self._state.samples.items()},
            "kinds": {f"{CONTENT_KINDS[kind]}:{model or ''}": v
                      for (model, kind), v in self._state.kind_factors.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Adopt an :meth:`export_state` result (factors clamped to this counter's bounds;
        malformed entries are ignored, never trusted)."""
        factors = state.get("factors", {})
        samples = state.get("samples", {})
        if not isinstance(factors, Mapping) or not isinstance(samples, Mapping):
            return
        for raw_key, value in factors.items():
            if not isinstance(raw_key, str) or not isinstance(value, int | float) \
                    or isinstance(value, bool) or not math.isfinite(value):
                continue
            key = raw_key or None
            self._state.factors[key] = min(self.max_factor, max(self.min_factor, float(value)))
            count = samples.get(raw_key, 0)
            self._state.samples[key] = count if isinstance(count, int) and count >= 0 else 0
        kinds = state.get("kinds", {})
        for raw_key, value in (kinds.items() if isinstance(kinds, Mapping) else ()):
            name, _, model = str(raw_key).partition(":")
            if name in CONTENT_KINDS and isinstance(value, int | float) \
                    and not isinstance(value, bool) and math.isfinite(value):
                self._state.set_kind_factor(model or None, CONTENT_KINDS.index(name),
                                            self._clamp(float(value)))

    def observe_messages(
        self, messages: Sequence[ChatMessage], reported_input_tokens: int,
        model: str | None = None,
    ) -> bool:
        """:meth:`observe` with the base estimate of ``messages`` (by kind) computed here."""
        kinds = self.kind_estimates(messages)
        used = self.observe(sum(kinds), reported_input_tokens, model, kinds=kinds)
        if used and (model is None or model == self.model):
            self._set_anchor(messages, reported_input_tokens, 0)
        return used

    def observe_result(
        self, messages: Sequence[ChatMessage], result: LLMResult, model: str | None = None
    ) -> bool:
        """Learn from a chat result (its usage and, unless given, its model name).

        Results whose usage was estimated rather than reported are skipped: learning from
        our own estimate would teach nothing.
        """
        if result.usage.estimated or result.usage.input_tokens <= 0:
            return False
        name = model if model is not None else (result.model or self.model)
        return self.observe_messages(messages, result.usage.input_tokens, name)

    def observe_call(
        self,
        messages: Sequence[ChatMessage],
        usage: Usage,
        tools: Sequence[ToolSpec] | None = None,
    ) -> bool:
        """Learn from one call: the messages and tool specs sent, the usage reported.

        Trains the factor this view applies (its own model name, whatever model string
        the provider answered with), so the counter handed to a guard is the one that
        learns. The estimated side is the base estimate of the messages plus that of the
        tool specs' JSON (:meth:`tool_specs_tokens`). Usage that was itself estimated, or
        reports no input, is skipped.
        """
        if usage.estimated or usage.input_tokens <= 0:
            return False
        kinds = self.kind_estimates(messages)
        tools_tokens = self.tool_specs_tokens(tools)
        kinds[CONTENT_KINDS.index("code")] += tools_tokens  # JSON schemas
        used = self.observe(sum(kinds), usage.input_tokens, kinds=kinds)
        if used:
            self._set_anchor(messages, usage.input_tokens, tools_tokens)
        return used

    # ------------------------------------------------------------------ anchoring
    @property
    def anchor(self) -> CallAnchor | None:
        """The last accepted call whose messages are known (see :class:`CallAnchor`):
        this counter object's own, not shared with other model views, not persisted."""
        return self._anchor

    def forget_anchor(self) -> None:
        """Count from the factors alone until the next observed call."""
        self._anchor = None

    def _set_anchor(self, messages: Sequence[ChatMessage], reported: int,
                    tools_tokens: int) -> None:
        tools = self.kind_factor(CONTENT_KINDS.index("code")) * tools_tokens
        frozen = tuple(messages)
        floor = sum(message_floor(m, self.base) for m in frozen) if self._floors_bind() else 0
        self._anchor = CallAnchor(frozen, max(0.0, reported - tools), floor)

    def _floors_bind(self) -> bool:
        """Whether an anchored count can fall below the messages' floors: only when the
        factor bounds allow correcting downward. With ``min_factor >= 1`` (the service's
        counters) an anchored count is at least the base count, and a message's floor
        never exceeds its base count — so the floors (a first computation per message of
        every call's ~1,000 messages) are neither computed nor compared."""
        return self.min_factor < 1.0

    def _anchored(self, messages: Sequence[ChatMessage]) -> int | None:
        """The anchored count of ``messages`` if they extend the anchor's, else None."""
        anchor = self._anchor
        if anchor is None or not extends(messages, anchor.messages):
            return None
        tail = messages[len(anchor.messages):]
        total = anchor.tokens + self._factored(tail)
        # the factor bounds bound the anchor too: a counter built to correct upward only
        # (min_factor=1, as the service's) never anchors below the base estimate
        base = self.base.count_messages(messages)
        total = min(self.max_factor * base, max(self.min_factor * base, total))
        if not self._floors_bind():
            return math.ceil(total)
        floor = anchor.floor + sum(message_floor(m, self.base) for m in tail)
        return max(math.ceil(total), floor)

    def tool_specs_tokens(self, tools: Sequence[ToolSpec] | None) -> int:
        """The base counter's estimate of the tool specs' compact JSON (0 without tools)."""
        return tool_specs_tokens(tools, self.base)

    def base_count(self, messages: Iterable[ChatMessage]) -> int:
        """The base counter's (uncalibrated, cached) total for ``messages``."""
        return self.base.count_messages(messages)

    # ------------------------------------------------------------------ TokenCounter
    @property
    def margin(self) -> float:
        """The base counter's margin: the factor corrects a bias, not the scatter."""
        return budget_margin(self.base)

    @property
    def cache_key(self) -> str:
        return f"calibrated({self.base.cache_key})"

    def _apply(self, tokens: int) -> int:
        if tokens <= 0:
            return tokens
        # Round up: the factor protects a budget, so err on the side of fitting.
        return math.ceil(tokens * self.factor())

    def _kinds_learnt(self) -> bool:
        models = self._state.kind_models
        return bool(models) and (self.model in models or None in models)

    def count_text(self, text: str) -> int:
        """The base count times the learnt factor for the text's kind; never below the
        heuristic's lower bound for its length (a factor < 1 cannot undercut it)."""
        tokens = self.base.count_text(text)
        if tokens <= 0:
            return tokens
        if not self._kinds_learnt():
            calibrated = self._apply(tokens)
        else:
            calibrated = math.ceil(tokens * self.kind_factor(content_kind(text)))
        return max(calibrated, min(tokens, lower_bound(len(text))))

    def count_message(self, message: ChatMessage) -> int:
        """The base count times the factor for the message's kind (the overall factor
        before any per-kind learning), rounded up; never below :func:`message_floor`
        (see :meth:`count_each`)."""
        return self.count_each((message,))[0]

    def count_each(self, messages: Iterable[ChatMessage]) -> list[int]:
        """:meth:`count_message` of every message, the factors looked up once for all of
        them: what the chat service's context meter and history load run over the whole
        context (~1,000 messages at a 64K budget) at every call.

        The base figure and the content kind are read from each message's cache
        directly, and the floor is looked up only when the factor is below 1 — a floor
        never exceeds the base count, so a factor of at least 1 (the service's counters
        only correct upward) cannot take the result below it.
        """
        base = self.base
        key = base.cache_key
        learnt = self._kinds_learnt()
        factors = [self.kind_factor(kind) for kind in range(len(CONTENT_KINDS))] if learnt \
            else [self.factor()]
        out: list[int] = []
        for message in messages:
            private = message.__pydantic_private__
            cache = private["_token_cache"] if private else message_cache(message)
            tokens = cache.get(key)
            if tokens is None:
                tokens = base.count_message(message)
            if tokens <= 0:
                out.append(tokens)
                continue
            if learnt:
                kind = cache.get("content-kind")
                factor = factors[message_kind(message) if kind is None else kind]
            else:
                factor = factors[0]
            calibrated = math.ceil(tokens * factor)
            out.append(calibrated if factor >= 1.0
                       else max(calibrated, message_floor(message, base)))
        return out

    def count_messages(self, messages: Iterable[ChatMessage]) -> int:
        """The calibrated total. A list extending the last observed call's messages is
        anchored on what the provider reported for them (:class:`CallAnchor`); otherwise
        each kind's factor times its base total (one rounding); before any per-kind
        learning, the overall factor times the base total. Never below the sum of the
        messages' :func:`message_floor` when a factor is below 1 or an anchor is used."""
        if self._anchor is not None:
            listed = messages if isinstance(messages, Sequence) else list(messages)
            anchored = self._anchored(listed)
            if anchored is not None:
                return anchored
            messages = listed
        if not self._kinds_learnt():
            if self.factor() >= 1.0:
                return self._apply(self.base.count_messages(messages))
            listed = messages if isinstance(messages, Sequence) else list(messages)
            floor = sum(message_floor(m, self.base) for m in listed)
            return max(self._apply(self.base.count_messages(listed)), floor)
        listed = messages if isinstance(messages, Sequence) else list(messages)
        total = self._factored(listed)
        calibrated = math.ceil(total) if total > 0 else 0
        if self._lowest_kind_factor() >= 1.0:
            return calibrated
        return max(calibrated, sum(message_floor(m, self.base) for m in listed))

    def _factored(self, messages: Sequence[ChatMessage]) -> float:
        """Σ over content kinds of the kind's factor × its base estimate of ``messages``."""
        if not messages:
            return 0.0
        kinds = self.kind_estimates(messages)
        if not self._kinds_learnt():
            return self.factor() * sum(kinds)
        return sum(self.kind_factor(k) * e for k, e in enumerate(kinds) if e)

    def _lowest_kind_factor(self) -> float:
        return min(self.kind_factor(k) for k in range(len(CONTENT_KINDS)))

    def __repr__(self) -> str:
        return (
            f"CalibratingCounter(base={self.base.cache_key!r}, model={self.model!r}, "
            f"factor={self.factor():.3f}, samples={self.samples()})"
        )


def message_counts(counter: TokenCounter, messages: Sequence[ChatMessage]) -> list[int]:
    """Each message's count by ``counter``: a :class:`CalibratingCounter`'s in one pass
    (:meth:`CalibratingCounter.count_each`), any other counter's message by message."""
    if isinstance(counter, CalibratingCounter):
        return counter.count_each(messages)
    return [counter.count_message(m) for m in messages]
