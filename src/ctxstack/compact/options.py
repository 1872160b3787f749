"""``CompactionOptions``: the one place compaction settings and their defaults live.

``CompactUtils.llm_compact``, :class:`~ctxstack.guard.ContextGuard` and
:class:`~ctxstack.store.memory.DbMemory` all take one of these (or build it from their
keyword arguments), so a default is written once and validated once.

Why these defaults:

* ``keep_recent=4`` — the seed's floor of messages kept verbatim by a summary.
* ``target_fill`` — the low watermark: after a compaction the context fills this share of
  the budget, so the next iterations append without compacting again and consecutive
  calls share their prefix (what providers cache). Chosen by measurement in
  ``benchmarks/bench_recall.py`` (compactions per 100 iterations and stable-prefix share
  against facts kept over a tool-heavy agent run); see :data:`DEFAULT_TARGET_FILL`.
* ``mask_keep_groups=2`` — the outputs of the newest tool groups stay whole: the model is
  usually reasoning about what it just read.
* ``mask_min_tokens=64`` — clearing a short output saves less than its placeholder costs.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from ctxstack.errors import ConfigError
from ctxstack.prompts import Hint, check_hint

DEFAULT_TARGET_FILL = 0.6
"""Measured in ``benchmarks/bench_recall.py`` (the ``target_fill`` sweep)."""


class CompactionOptions(BaseModel):
    """Settings of one compaction (immutable; derive variants with :meth:`with_`).

    Attributes:
        keep_recent: compactable messages a summary keeps verbatim at least.
        hint: which summariser prompt to use (:data:`ctxstack.prompts.Hint`).
        prompt: a custom summariser prompt replacing the hint prompts.
        target_fill: share of the budget a compaction fills (the low watermark).
        timeout: seconds the summariser may take (None: no limit) before falling back.
        mask: clear old tool outputs before summarising (stage "mask").
        mask_keep_groups: newest tool groups whose outputs are never cleared.
        mask_min_tokens: tool outputs smaller than this are never cleared.
        preview_chars: characters of an output's head kept in its placeholder.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_recent: int = 4
    hint: Hint = "general"
    prompt: str | None = None
    target_fill: float = DEFAULT_TARGET_FILL
    timeout: float | None = None
    mask: bool = True
    mask_keep_groups: int = 2
    mask_min_tokens: int = 64
    preview_chars: int = 160

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

    @field_validator("target_fill", mode="before")
    @classmethod
    def _fill(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ValueError(f"target_fill: must be a number in (0, 1], got {value!r}")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> object:
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"timeout: must be a positive number of seconds, got {value!r}")
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
        return CompactionOptions(**{**self.model_dump(), **update})
