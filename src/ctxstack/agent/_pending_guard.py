"""TEMPORARY stand-in for ctxstack.guard.CompactionEvent until the guard lands on main."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxstack.llm.base import Usage


class CompactionEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    hint: str = "general"
    method: Literal["llm", "truncate"] = "truncate"
    reason: str = ""
    messages_before: int = 0
    messages_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    usage: Usage = Usage()
    duration_s: float = 0.0
    budget: int = 0
