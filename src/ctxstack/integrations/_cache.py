"""Converting a framework's history to ChatMessages once per message, not once per call.

An agent's history grows at the end: each model call sees the previous call's messages (the
same objects) plus a few new ones. :class:`ConversionCache` keeps the previous call's
sources and their ChatMessages; a new call finds the shared prefix by object identity (one
C-level pass), converts only what follows, and looks those up by identity among the
previous sources first (after a compaction the kept messages are the same objects at new
positions). The last source of the previous call is always converted again, because a
framework may still have been filling it in.

The current query is pinned here too (kind ``"query"``): the pinned copy is cached with
its message, so the guard's per-message token cache stays warm across calls.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ctxstack import ChatMessage

S = TypeVar("S")


class ConversionCache(Generic[S]):
    """``convert(sources)`` → ChatMessages, reusing the previous call's conversions."""

    def __init__(self, convert_one: Callable[[S], list[ChatMessage]], pin_key: str) -> None:
        self._convert_one = convert_one
        self._pin_key = pin_key
        self._sources: list[S] = []
        self._ends: list[int] = []  # ChatMessage end index of each source
        self._messages: list[ChatMessage] = []
        self._pinned: tuple[ChatMessage, ChatMessage] | None = None
        self._user = -1  # position of the latest user message in _messages
        # One adapter may serve several threads (a compiled LangChain agent invoked from a
        # thread pool): the cache's fields change together or not at all.
        self._lock = threading.Lock()

    def convert(self, sources: Sequence[S]) -> list[ChatMessage]:
        """ChatMessages for ``sources`` (a new list); the latest user message pinned."""
        with self._lock:
            return self._convert(sources)

    def _convert(self, sources: Sequence[S]) -> list[ChatMessage]:
        previous = self._sources
        limit = min(len(sources), len(previous) - 1)  # the previous last one is always redone
        shared = max(limit, 0)
        if limit > 0 and not all(map(operator.is_, sources[:limit], previous[:limit])):
            shared = next(i for i, (a, b) in enumerate(zip(sources, previous, strict=False))
                          if a is not b)
        end = self._ends[shared - 1] if shared else 0
        out = self._messages[:end]
        ends = self._ends[:shared]
        # Diverged (a compaction replaced the list): look the rest up among the previous
        # sources before converting; a plain append never pays for building the table.
        lookup = self._by_identity() if shared < limit else {}
        user = self._user if self._user < end else -1
        for source in sources[shared:]:
            found = lookup.get(id(source))
            converted = found if found is not None else self._convert_one(source)
            for message in converted:
                if message.role == "user":
                    user = len(out)
                out.append(message)
            ends.append(len(out))
        self._sources, self._ends, self._messages, self._user = list(sources), ends, out, user
        return self._pin(list(out), user)

    def _by_identity(self) -> dict[int, list[ChatMessage]]:
        """The previous call's conversions by source identity (its last source excluded)."""
        table: dict[int, list[ChatMessage]] = {}
        start = 0
        for source, end in zip(self._sources[:-1], self._ends[:-1], strict=True):
            table[id(source)] = self._messages[start:end]
            start = end
        return table

    def _pin(self, messages: list[ChatMessage], user: int) -> list[ChatMessage]:
        if user < 0 or messages[user].pinned:
            return messages
        message = messages[user]
        if self._pinned is None or self._pinned[0] is not message:
            pinned = message.model_copy(update={"pinned": True, "metadata": {
                **message.metadata, "kind": "query", self._pin_key: True}})
            self._pinned = (message, pinned)
        messages[user] = self._pinned[1]
        return messages
