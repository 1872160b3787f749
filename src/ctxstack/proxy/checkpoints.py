"""Recognising a continuing conversation by its message prefix, and reusing its summary.

Clients of an OpenAI-compatible endpoint send no conversation id: each call carries the
whole history. The proxy fingerprints each wire message (role, content, tool calls, tool
call id, name — not the fields clients add or drop when they echo an answer back, such as
``refusal: null``) and chains the fingerprints into prefix hashes, salted with the
caller's identity so two users never share a checkpoint.

* ``root_hash`` — the prefix up to the first non-system message: the lookup key, the same
  for every request of one conversation;
* ``prefix_hash(k)`` — the first ``k`` messages: a checkpoint covering ``k`` messages is
  valid for a request whose prefix hash at ``k`` matches it.

A checkpoint stores the summary standing for messages ``[prompt_end, covered)``; a later
request of the same conversation is forwarded as system prompt + summary + messages from
``covered`` on, which is what the guard produced when it summarised. Stored in the
database (:mod:`ctxstack.store.proxy_checkpoints`), so every proxy worker shares them.

A checkpoint lives ``ttl`` after its **last use**: when a lookup reuses one whose last
recorded use is older than :func:`touch_interval` (an eighth of the ttl, at most an hour),
its ``used_at`` is written — one small write per checkpoint per interval, whatever the
request rate, and none at all for requests already within budget (they never look up).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ctxstack.store import SessionFactory
from ctxstack.store.errors import StorageError
from ctxstack.store.models import utcnow
from ctxstack.store.proxy_checkpoints import (
    ProxyCheckpointRecord,
    find_proxy_checkpoints,
    save_proxy_checkpoint,
    touch_proxy_checkpoint,
)

log = logging.getLogger("ctxstack.proxy")

_SEP = b"\x1e"


def fingerprint(message: Mapping[str, Any]) -> bytes:
    """The bytes that identify one wire message across resends."""
    return _fingerprint_text(message).encode("utf-8", "surrogatepass")


def _fingerprint_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if (isinstance(content, str) and not message.get("tool_calls")
            and not message.get("tool_call_id") and not message.get("name")):
        # The common message, hashed on every request over the whole history: the same
        # text as below, without the list.
        return f"{message.get('role')}\x1f{content}"
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    else:
        text = json.dumps(content, ensure_ascii=False, sort_keys=True)
    parts = [str(message.get("role")), text]
    calls = message.get("tool_calls")
    if calls:
        parts.append(json.dumps(
            [[c.get("id"), (c.get("function") or {}).get("name"),
              (c.get("function") or {}).get("arguments")] if isinstance(c, dict) else c
             for c in calls], ensure_ascii=False))
    call_id = message.get("tool_call_id")
    if call_id:
        parts.append(f"tool_call_id={call_id}")
    name = message.get("name")
    if name:
        parts.append(f"name={name}")
    return "\x1f".join(parts)


class PrefixHasher:
    """Chained hashes of a message list's prefixes, computed once, on demand."""

    def __init__(self, messages: Sequence[Mapping[str, Any]], salt: str) -> None:
        self._messages = messages
        self._hash = hashlib.blake2b(salt.encode("utf-8"), digest_size=32)
        self._done = 0

    @property
    def position(self) -> int:
        """How many messages have been hashed so far."""
        return self._done

    def at(self, k: int) -> str:
        """The hash of the first ``k`` messages (``k`` never below an earlier call's)."""
        if k < self._done:
            raise ValueError("PrefixHasher.at: prefixes must be asked for in growing order")
        if k > self._done:
            # One update of the fingerprints joined: the same hash as one update per
            # fingerprint and separator (the hash is of the byte stream), a fraction of
            # the calls over a resent history of thousands of messages.
            self._hash.update("\x1e".join(
                [_fingerprint_text(m) for m in self._messages[self._done:k]]
            ).encode("utf-8", "surrogatepass") + _SEP)
        self._done = k
        return self._hash.hexdigest()


def root_length(messages: Sequence[Mapping[str, Any]], prompt_end: int) -> int:
    """Messages the root hash covers: the system prompt and the first message after it."""
    return min(len(messages), prompt_end + 1)


def touch_interval(ttl: timedelta) -> timedelta:
    """How stale a checkpoint's recorded last use may get before a reuse rewrites it."""
    return min(ttl / 8, timedelta(hours=1))


class CheckpointStore:
    """Find and save proxy checkpoints; a database failure degrades to "no checkpoint"."""

    def __init__(self, factory: SessionFactory, *, max_rows: int, ttl_seconds: float) -> None:
        self.factory = factory
        self.max_rows = max_rows
        self.ttl = timedelta(seconds=ttl_seconds)
        self.touch_every = touch_interval(self.ttl)

    async def find(
        self, messages: Sequence[Mapping[str, Any]], prompt_end: int, salt: str
    ) -> ProxyCheckpointRecord | None:
        """The checkpoint covering the longest prefix of ``messages`` (at least one message
        must remain after it: the current turn), or None."""
        n = len(messages)
        hasher = PrefixHasher(messages, salt)
        root = hasher.at(root_length(messages, prompt_end))
        try:
            candidates = await find_proxy_checkpoints(self.factory, root, n - 1, ttl=self.ttl)
        except StorageError as exc:
            log.warning("proxy: checkpoint lookup failed, summarising afresh: %s", exc)
            return None
        # Candidates come longest first; hashing goes forward, so check shortest first and
        # keep the longest match.
        best: ProxyCheckpointRecord | None = None
        for record in sorted(candidates, key=lambda r: r.covered):
            if record.covered <= prompt_end or record.covered < hasher.position:
                continue
            if hasher.at(record.covered) == record.prefix_hash:
                best = record
        if best is not None:
            await self._touch(best)
        return best

    async def _touch(self, record: ProxyCheckpointRecord) -> None:
        """Extend a reused checkpoint's life (rarely a write: see the module doc)."""
        last = record.last_use()
        if last is not None and last >= utcnow() - self.touch_every:
            return
        try:
            await touch_proxy_checkpoint(self.factory, record.prefix_hash,
                                         every=self.touch_every)
        except StorageError as exc:
            log.warning("proxy: could not extend a checkpoint's life: %s", exc)

    async def save(
        self, messages: Sequence[Mapping[str, Any]], prompt_end: int, salt: str, *,
        covered: int, summary: str, token_count: int, model: str,
    ) -> bool:
        """Store the summary of ``messages[prompt_end:covered]``; False if not stored."""
        if covered <= prompt_end or covered > len(messages):
            return False
        hasher = PrefixHasher(messages, salt)
        root = hasher.at(root_length(messages, prompt_end))
        record = ProxyCheckpointRecord(
            prefix_hash=hasher.at(covered), root_hash=root, covered=covered, model=model,
            summary=summary, token_count=token_count)
        try:
            return await save_proxy_checkpoint(self.factory, record, max_rows=self.max_rows,
                                               ttl=self.ttl)
        except StorageError as exc:
            log.warning("proxy: could not save a checkpoint: %s", exc)
            return False
