"""The conversations behind ``previous_response_id``, kept by the proxy.

A Responses client that continues with ``previous_response_id`` sends only its new
items; the upstream would resolve the rest itself, and could then be sent far more than
the budget. So the proxy remembers every response it relays — its parent's id and the
items it added (the request's new input, then the response's output) — and expands a
known chain into the whole ``input`` before fitting it, forwarding it without
``previous_response_id``. What the upstream receives is then exactly what was counted.

* **Where.** In this worker's memory (the newest chains, bounded by size) and, for
  responses created with ``store`` not false, in the database
  (:mod:`ctxstack.store.proxy_responses`) so every worker finds them. ``store: false``
  is honoured: such a conversation is never written anywhere, it lives only in the
  memory of the worker that relayed it (as OpenAI keeps it only in the WebSocket
  connection's memory) and is gone when that worker stops or needs the room.
* **Whose.** Keyed by an owner hash of the caller's identity and its credentials: a
  chain is found only by whoever created it.
* **Unknown ids.** A chain whose start is not known here (created before the proxy, by
  another client, expired) is ``None``: the request is forwarded as sent and the upstream
  answers for it. A database failure degrades the same way (logged).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ctxstack.store import SessionFactory
from ctxstack.store.errors import StorageError
from ctxstack.store.proxy_responses import (
    ProxyResponseRecord,
    find_proxy_response,
    prune_proxy_responses,
    save_proxy_response,
)

log = logging.getLogger("ctxstack.proxy")

MEMORY_CHARS = 64_000_000
"""JSON characters of chains a worker keeps in memory (least recent dropped)."""
MAX_DEPTH = 100_000
PRUNE_EVERY = 256
"""Saves between two prunings of the table."""


def owner_key(salt: str, headers: Mapping[str, str]) -> str:
    """The owner of the chains a caller creates: its proxy identity and its own key."""
    credentials = headers.get("authorization") or headers.get("x-api-key") or ""
    return hashlib.sha256(f"{salt}\x1f{credentials}".encode()).hexdigest()


class _Link:
    __slots__ = ("chars", "items", "parent")

    def __init__(self, parent: str | None, items: list[dict[str, Any]], chars: int) -> None:
        self.parent = parent
        self.items = items
        self.chars = chars


class ChainStore:
    """Find and remember Responses conversations (see the module doc)."""

    def __init__(self, factory: SessionFactory | None, *, ttl_seconds: float,
                 max_rows: int = 100_000, memory_chars: int = MEMORY_CHARS) -> None:
        self.factory = factory
        self.ttl = timedelta(seconds=ttl_seconds)
        self.max_rows = max_rows
        self.memory_chars = memory_chars
        self._memory: OrderedDict[tuple[str, str], _Link] = OrderedDict()
        self._chars = 0
        self._saves = 0

    async def conversation(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """Every item of the chain ending with ``response_id`` (None: not known here).

        Raises nothing: a database failure is logged and reads as "not known".
        """
        parts: list[list[dict[str, Any]]] = []
        current: str | None = response_id
        for _ in range(MAX_DEPTH):
            if current is None:
                parts.reverse()
                return [item for part in parts for item in part]
            link = await self._link(owner, current)
            if link is None:
                return None
            parts.append(link.items)
            current = link.parent
        return None

    async def _link(self, owner: str, response_id: str) -> _Link | None:
        key = (owner, response_id)
        link = self._memory.get(key)
        if link is not None:
            self._memory.move_to_end(key)
            return link
        if self.factory is None:
            return None
        try:
            record = await find_proxy_response(self.factory, owner, response_id, ttl=self.ttl)
        except StorageError as exc:
            log.warning("proxy: looking up a previous response failed: %s", exc)
            return None
        if record is None:
            return None
        try:
            items = json.loads(record.items)
        except json.JSONDecodeError:
            return None
        link = _Link(record.parent_id, items, len(record.items))
        self._keep(key, link)
        return link

    def _keep(self, key: tuple[str, str], link: _Link) -> None:
        old = self._memory.pop(key, None)
        if old is not None:
            self._chars -= old.chars
        self._memory[key] = link
        self._chars += link.chars
        while self._chars > self.memory_chars and len(self._memory) > 1:
            _, dropped = self._memory.popitem(last=False)
            self._chars -= dropped.chars

    async def remember(self, owner: str, response_id: str, parent_id: str | None, model: str,
                       items: Sequence[dict[str, Any]], *, persist: bool,
                       size: int | None = None) -> None:
        """Keep the response ``response_id`` (``parent_id``: the chain it continues,
        ``items``: what it added); written to the database only when ``persist``.

        ``size``: an upper bound of the items' JSON length the caller knows (the request's
        body plus the output), which a response kept in memory only is accounted with
        instead of serialising a whole resent history on every request."""
        if (not persist or self.factory is None) and size is not None:
            self._keep((owner, response_id), _Link(parent_id, list(items), size))
            return
        text = json.dumps(list(items), ensure_ascii=False, separators=(",", ":"))
        self._keep((owner, response_id), _Link(parent_id, list(items), len(text)))
        if not persist or self.factory is None:
            return
        try:
            await save_proxy_response(self.factory, ProxyResponseRecord(
                owner=owner, response_id=response_id[:200],
                parent_id=parent_id[:200] if parent_id else None, model=model[:200],
                items=text))
            self._saves += 1
            if self._saves % PRUNE_EVERY == 0:
                await prune_proxy_responses(self.factory, max_rows=self.max_rows,
                                            ttl=self.ttl)
        except StorageError as exc:
            log.warning("proxy: could not store a response for its followers: %s", exc)
