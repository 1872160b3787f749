"""``CompactionOptions``: the one place compaction settings and their defaults live.

``CompactUtils.llm_compact``, :class:`~ctxstack.guard.ContextGuard` and
:class:`~ctxstack.store.memory.DbMemory` all take one of these (or build it from their
keyword arguments), so a default is written once and validated once.

Every watermark is a share of the **room for history**: the budget less the system prompt
and the pinned messages (:func:`watermark`). Those never shrink, so a share of the whole
budget could fall below them alone — a real agent's system prompt and tool rules are a
large part of a small budget (τ-bench's airline policy is ~1,200 tokens) — and then a
compaction could leave no headroom at all: one compaction, and one rewritten cached
prefix, per call.

Why these defaults:

* ``keep_recent=4`` — the seed's floor of messages kept verbatim by a summary.
* ``target_fill`` — the low watermark: after a compaction the context fills this share of
  the room for history, so the next iterations append without compacting again and consecutive
  calls share their prefix (what providers cache). Chosen by measurement in
  ``benchmarks/bench_recall.py`` (compactions per 100 iterations and stable-prefix share
  against facts kept over a tool-heavy agent run); see :data:`DEFAULT_TARGET_FILL`.
* ``mask_fill`` — the mask stage's own low watermark: a mask step clears old outputs,
  oldest first, until the context fills this share of the room for history. A mask step changes the
  context from its first newly cleared output on, whatever it clears after that, so few big
  steps keep more of the prefix stable than many small ones; see :data:`DEFAULT_MASK_FILL`.
* ``mask_accept`` — with a summariser set, a mask step that cannot bring the context
  within this share of the room for history is not taken: freeing so little, it would recur on the
  next calls (once outputs cleared earlier fill the context, every call would clear one
  more), while the summary it only postpones rewrites from near the start anyway. The
  summary runs at once instead; the mask stays its fallback if the summariser fails.
  Without a summariser any mask step that fits is taken. See :data:`DEFAULT_MASK_ACCEPT`.
* ``mask_keep_groups=2`` — the outputs of the newest tool groups stay whole: the model is
  usually reasoning about what it just read.
* ``mask_min_tokens=64`` — clearing a short output saves less than its placeholder costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from ctxstack.compaction._prompts import Hint, check_hint
from ctxstack.errors import ConfigError

DEFAULT_TARGET_FILL = 0.6
"""Measured in ``benchmarks/bench_recall.py`` (the ``target_fill`` sweep)."""
DEFAULT_MASK_FILL = 0.4
"""Measured in ``benchmarks/bench_recall.py`` (the ``mask_fill`` sweep)."""
DEFAULT_MASK_ACCEPT = 0.9
"""Measured in ``benchmarks/bench_recall.py`` (the ``mask_accept`` sweep)."""


def watermark(limit: int, fixed: int, share: float) -> int:
    """Tokens a context fills at ``share`` of the room for history: ``fixed`` (the system
    prompt and pinned messages, which compaction never shrinks) plus ``share`` of what
    they leave of ``limit``; ``limit`` itself when they leave nothing."""
    if limit <= fixed:
        return limit
    return fixed + int((limit - fixed) * share)


def check_timeout(timeout: object) -> None:
    """:class:`ConfigError` unless ``timeout`` is None or a positive finite number."""
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"timeout: must be a positive number of seconds, got {timeout!r}")


class CompactionOptions(BaseModel):
    """Settings of one compaction (immutable; derive variants with :meth:`with_`).

    Attributes:
        keep_recent: compactable messages a summary keeps verbatim at least.
        hint: which summariser prompt to use (:data:`ctxstack.compaction.Hint`).
        prompt: a custom summariser prompt replacing the hint prompts.
        target_fill: share of the room for history (the budget less the system prompt and
            pinned messages) a summary fills (its low watermark).
        timeout: seconds the summariser may take (None: no limit) before falling back.
        mask: clear old tool outputs before summarising (stage "mask").
        mask_fill: share of the room for history a mask step fills (its low watermark).
        mask_accept: with a summariser, a mask step leaving the context above this share
            of the room for history gives way to the summary.
        mask_keep_groups: newest tool groups whose outputs are never cleared.
        mask_min_tokens: tool outputs smaller than this are never cleared.
        preview_chars: characters of an output's head kept in its placeholder.
        recall_tool: the name of the tool that reads the archive back, as the placeholders
            and the summary's note name it (``recall``, the agents' tool; the proxy offers
            ``ctxstack_recall``).
        strategies: the compaction pipeline, cheapest first — each a
            :class:`~ctxstack.compaction.Compactor`; ``None`` (the default) runs
            ``MaskToolOutputs(), RollingSummary(), Truncate()``. Reorder, remove or add
            one (``examples/custom_strategy.py``); a truncation always ends the pipeline
            if nothing else fits.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    keep_recent: int = 4
    hint: Hint = "general"
    prompt: str | None = None
    target_fill: float = DEFAULT_TARGET_FILL
    timeout: float | None = None
    mask: bool = True
    mask_fill: float = DEFAULT_MASK_FILL
    mask_accept: float = DEFAULT_MASK_ACCEPT
    mask_keep_groups: int = 2
    mask_min_tokens: int = 64
    preview_chars: int = 160
    recall_tool: str = "recall"
    strategies: tuple[Any, ...] | None = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValueError as exc:  # pydantic's ValidationError: name the field
            raise ConfigError(f"CompactionOptions: {exc}") from exc

    @field_validator("keep_recent", "mask_keep_groups", "mask_min_tokens", "preview_chars",
                     mode="before")
    @classmethod
    def _non_negative_int(cls, value: object, info: Any) -> object:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{info.field_name}: must be a non-negative integer, got {value!r}")
        return value

    @field_validator("hint", mode="before")
    @classmethod
    def _hint(cls, value: object) -> object:
        try:
            return check_hint(value)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("target_fill", "mask_fill", "mask_accept", mode="before")
    @classmethod
    def _fill(cls, value: object, info: Any) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ValueError(f"{info.field_name}: must be a number in (0, 1], got {value!r}")
        return value

    @model_validator(mode="after")
    def _mask_watermarks(self) -> CompactionOptions:
        if self.mask_fill > self.mask_accept:
            raise ValueError(f"mask_fill ({self.mask_fill}) must not exceed mask_accept "
                             f"({self.mask_accept}): a mask step reaching its fill is taken")
        return self

    @field_validator("strategies", mode="before")
    @classmethod
    def _strategies(cls, value: object) -> object:
        if value is None:
            return None
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
            raise ValueError("strategies: expected a non-empty list of Compactor strategies, "
                             f"got {value!r}")
        for i, strategy in enumerate(value):
            # the Compactor protocol, checked by shape (its module imports this one)
            if not callable(getattr(strategy, "compact", None)) or getattr(
                    strategy, "method", None) not in ("mask", "llm", "truncate"):
                raise ValueError(
                    f"strategies[{i}]: expected a Compactor (a `name`, a `method` of 'mask', "
                    f"'llm' or 'truncate', and `async compact(messages, ctx)`), "
                    f"got {strategy!r}")
        return tuple(value)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> object:
        check_timeout(value)
        return value

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, value: object) -> object:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError("prompt: a custom compaction prompt must not be empty")
        return value

    def with_(self, **changes: Any) -> CompactionOptions:
        """A copy with ``changes`` applied (``None`` values mean "keep"), validated."""
        update = {k: v for k, v in changes.items() if v is not None}
        if not update:
            return self
        return CompactionOptions(**{**dict(self), **update})
