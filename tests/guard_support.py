"""Test doubles around the guard, shared by the agent's tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxstack.guard import ContextGuard, GuardCheck
from ctxstack.messages import ChatMessage


class SpyGuard(ContextGuard):
    """The real guard, recording each call's message count, budget and hint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[int, int | None, str]] = []

    async def check(self, messages: Sequence[ChatMessage], budget: Any = None,
                    hint: Any = "general") -> GuardCheck:
        self.calls.append((len(messages), budget, hint))
        return await super().check(messages, budget, hint)
