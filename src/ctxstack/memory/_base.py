"""Layer 1: the memory interface every conversation store implements."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from ctxstack.errors import MessageError
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
        """Record one message. The built-in memories also take an OpenAI-format dict
        (converted by :func:`as_chat_message`); a subclass may keep to ChatMessage."""

    @abstractmethod
    async def get_messages(self) -> list[ChatMessage]:
        """The history to send to the model, within this memory's policy."""

    @abstractmethod
    async def clear(self) -> None:
        """Forget everything."""


class HeldMemory(BaseMemory):
    """A memory that holds its messages in a list, behind a lock: concurrent
    ``add_message`` and ``clear`` calls take turns. A subclass reads the list in
    ``get_messages`` (under ``_lock``) and may act on each new message in :meth:`_added`.
    """

    def __init__(self) -> None:
        self._messages: list[ChatMessage] = []
        self._lock = asyncio.Lock()

    async def add_message(self, message: ChatMessage | Mapping[str, Any]) -> None:
        message = as_chat_message(message)
        async with self._lock:
            self._messages.append(message)
            await self._added()

    async def clear(self) -> None:
        async with self._lock:
            self._messages = []

    async def _added(self) -> None:
        """After a message was appended, still under the lock (nothing by default)."""


def as_chat_message(message: object) -> ChatMessage:
    """``message`` as a :class:`ChatMessage`: an OpenAI-format dict is converted; anything
    else is a :class:`MessageError` naming what was given."""
    if isinstance(message, ChatMessage):
        return message
    if isinstance(message, Mapping):
        try:
            return ChatMessage.from_openai(message)
        except MessageError as exc:
            raise MessageError(f"message: {exc}") from None
    raise MessageError(f"message: expected a ChatMessage or an OpenAI-format dict, got "
                       f"{type(message).__name__}")
