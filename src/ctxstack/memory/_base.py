"""Layer 1: the memory interface every conversation store implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ctxstack.messages import ChatMessage


class BaseMemory(ABC):
    """Where an agent gets its conversation history from.

    Contract: ``get_messages()`` returns a *new* list each call (callers may append to it);
    implementations are safe under concurrent ``add_message`` calls from several tasks.
    Read-only implementations (:class:`~ctxstack.memory.DbMemory`) make ``add_message`` and
    ``clear`` no-ops: the chat service owns every write.
    """

    @abstractmethod
    async def add_message(self, message: ChatMessage) -> None:
        """Record one message."""

    @abstractmethod
    async def get_messages(self) -> list[ChatMessage]:
        """The history to send to the model, within this memory's policy."""

    @abstractmethod
    async def clear(self) -> None:
        """Forget everything."""
