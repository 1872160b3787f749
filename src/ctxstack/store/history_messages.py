"""The messages a history load builds from stored rows (layer 4, :mod:`ctxstack.store.memory`).

A row without images becomes a text message carrying its metadata and ``seq``. A row
with images (metadata ``images``: ``[{"file_id", "mime_type"}]``) first gets a
placeholder part per image that is one of the conversation owner's files; a reference that
is malformed or not the owner's becomes the note :data:`IMAGE_NOTE` (and a warning): a
``file_id`` is never a path to follow. Only the messages that survive compaction are then
*materialised* — their placeholders swapped for base64 data URLs read from the file store
— so a long history does not read every image it will not send.
"""

from __future__ import annotations

import asyncio
import base64
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ctxstack.messages import ChatMessage, ContentPart, ImagePart, ImageURL, TextPart
from ctxstack.store.errors import StorageError
from ctxstack.store.files import FileRecord, FileStore, valid_file_id
from ctxstack.store.messages import HistoryRow

IMAGE_NOTE = "[image unavailable]"
PLACEHOLDER = "ctxstack-file:"

Warn = Callable[[str], None]
"""Where a left-out image is reported (DbMemory logs it and keeps it in ``warnings``)."""


def text_message(record: HistoryRow) -> ChatMessage:
    """The history message of a row without images: its text, its metadata and ``seq``."""
    return ChatMessage(role=record.role, content=record.content,
                       metadata={**record.metadata, "seq": record.seq})


class CachedRow(NamedTuple):
    """A history row a load read, its metadata's stored JSON text, and its message."""

    row: HistoryRow
    metadata_text: str | None
    message: ChatMessage


class HistoryMessageCache:
    """Rows and text messages of earlier history loads, kept for the next ones.

    A chat turn loads the conversation's history every time, and at the default 64K
    budget that is ~1,000 rows after the checkpoint — nearly all of them the rows the
    previous turn loaded. Decoding each row's metadata (an answer's holds its turn's
    events), building a :class:`ChatMessage` per row (a validated model) and estimating
    its tokens was most of a load's CPU. With this cache a row read again unchanged is
    the previous load's :class:`HistoryRow` (:func:`~ctxstack.store.messages.
    read_history_rows` compares the stored metadata text instead of decoding it) and its
    message is the same object, its token figures still cached on it (a message is
    frozen; its figures depend only on its content and the counter, which keys them).

    The rows are still read on every load, and an entry is reused only when the row
    read now has the same ``seq``, role, text and metadata text: an edited, deleted or
    re-inserted row is decoded and built anew — the database stays the truth, the cache
    only saves rebuilding what is unchanged. Each load replaces its conversation's entry
    with the rows it read (older rows drop out as checkpoints advance); the least
    recently loaded conversations are dropped beyond ``max_messages`` messages or
    ``max_chars`` characters of text and metadata in all. A load of fewer than
    ``min_rows`` rows is not kept: rebuilding a short history costs little, and a
    service with many short conversations would otherwise hold each one's rows (an
    answer's events included) for nothing — its memory growing by ~20 KB a turn until
    the bounds. One cache per process, shared by its loads (they run on one event loop).
    """

    def __init__(self, *, max_messages: int = 20_000, max_chars: int = 40_000_000,
                 min_rows: int = 128) -> None:
        self.max_messages = max_messages
        self.max_chars = max_chars
        self.min_rows = min_rows
        self._entries: OrderedDict[str, tuple[dict[int, CachedRow], int]] = OrderedDict()
        # conversation → seq → (a cached message, what :meth:`derived` made of it)
        self._derived: dict[str, dict[int, tuple[ChatMessage, ChatMessage]]] = {}
        self._messages = 0
        self._chars = 0

    def __len__(self) -> int:
        """Messages held, over all conversations."""
        return self._messages

    def rows(self, conversation_id: str) -> dict[int, CachedRow]:
        """``seq`` → :class:`CachedRow` as the last load of the conversation left them
        (empty if none is cached). Read-only: a load gives its rows back with
        :meth:`store`."""
        entry = self._entries.get(conversation_id)
        return entry[0] if entry is not None else {}

    @staticmethod
    def message(cached: dict[int, CachedRow], record: HistoryRow) -> ChatMessage:
        """The text message of ``record`` (a row without images): the cached one when
        ``record`` is the row it was built from, else a new one."""
        hit = cached.get(record.seq)
        if hit is not None and hit.row is record:
            return hit.message
        return text_message(record)

    def derived(self, conversation_id: str, message: ChatMessage,
                make: Callable[[ChatMessage], ChatMessage]) -> ChatMessage:
        """``make(message)``, kept with the cached message: the next load that gives the
        same message back gets the same result, not a new copy (whose token figures
        would be estimated again). ``make`` must depend on the message alone; one
        ``make`` per cache (the chat service's: the agent's context copy of a stored
        question). A message that is not one of the conversation's cached messages
        is simply ``make(message)``."""
        entry = self._entries.get(conversation_id)
        seq = message.metadata.get("seq")
        if entry is None or not isinstance(seq, int):
            return make(message)
        cached = entry[0].get(seq)
        if cached is None or cached.message is not message:
            return make(message)
        made = self._derived.setdefault(conversation_id, {})
        hit = made.get(seq)
        if hit is not None and hit[0] is message:
            return hit[1]
        result = make(message)
        made[seq] = (message, result)
        return result

    def store(self, conversation_id: str, rows: dict[int, CachedRow]) -> None:
        """Keep ``rows`` (a load's text rows) as the conversation's entry (with what
        :meth:`derived` made of the messages it keeps)."""
        old = self._entries.pop(conversation_id, None)
        if old is not None:
            self._messages -= len(old[0])
            self._chars -= old[1]
        made = self._derived.pop(conversation_id, None)
        if made:
            kept = {seq: pair for seq, pair in made.items()
                    if seq in rows and rows[seq].message is pair[0]}
            if kept:
                self._derived[conversation_id] = kept
        if len(rows) < self.min_rows:
            self._derived.pop(conversation_id, None)
            return  # short: cheap to rebuild, not worth its memory
        chars = sum(len(c.row.content or "") + len(c.metadata_text or "")
                    for c in rows.values())
        if len(rows) > self.max_messages or chars > self.max_chars:
            self._derived.pop(conversation_id, None)
            return  # larger than the whole cache: not kept
        self._entries[conversation_id] = (rows, chars)
        self._messages += len(rows)
        self._chars += chars
        while self._messages > self.max_messages or self._chars > self.max_chars:
            gone, (dropped, dropped_chars) = self._entries.popitem(last=False)
            self._derived.pop(gone, None)
            self._messages -= len(dropped)
            self._chars -= dropped_chars


def image_message(record: HistoryRow, files: dict[str, FileRecord], warn: Warn) -> ChatMessage:
    """The history message of any row; image references become placeholders or notes."""
    if "images" not in record.metadata:
        return text_message(record)
    meta: dict[str, Any] = {**record.metadata, "seq": record.seq}
    parts: list[ContentPart] = []
    if record.content:
        parts.append(TextPart(text=record.content))
    refs = record.metadata.get("images")
    for ref in refs if isinstance(refs, list) else [refs]:
        file_id = ref.get("file_id") if isinstance(ref, dict) else None
        if not valid_file_id(file_id):
            warn(f"message {record.seq}: image reference {ref!r} is malformed; left out")
            parts.append(TextPart(text=IMAGE_NOTE))
        elif file_id not in files:
            warn(f"message {record.seq}: image {file_id} is not one of the conversation "
                 "owner's files; left out")
            parts.append(TextPart(text=IMAGE_NOTE))
        else:
            parts.append(ImagePart(image_url=ImageURL(url=PLACEHOLDER + str(file_id))))
    return ChatMessage(role=record.role, content=parts or record.content, metadata=meta)


async def materialise(
    messages: Sequence[ChatMessage], files: dict[str, FileRecord], file_store: FileStore,
    warn: Warn,
) -> list[ChatMessage]:
    """Swap image placeholders for data URLs (or notes, when a file cannot be read)."""
    needed = {
        part.image_url.url.removeprefix(PLACEHOLDER)
        for m in messages for part in m.images
        if part.image_url.url.startswith(PLACEHOLDER)
    }
    if not needed:
        return list(messages)
    urls: dict[str, str | None] = {}

    async def fetch(file_id: str) -> None:
        record = files[file_id]
        try:
            data = await file_store.read(record)
        except StorageError as exc:
            warn(f"image {file_id}: {exc}; left out")
            urls[file_id] = None
            return
        urls[file_id] = (f"data:{record.mime_type};base64,"
                         f"{base64.b64encode(data).decode('ascii')}")

    await asyncio.gather(*(fetch(f) for f in sorted(needed)))
    out = []
    for message in messages:
        if not message.images or isinstance(message.content, str) or message.content is None:
            out.append(message)
            continue
        parts: list[ContentPart] = []
        for part in message.content:
            if isinstance(part, ImagePart) and part.image_url.url.startswith(PLACEHOLDER):
                url = urls.get(part.image_url.url.removeprefix(PLACEHOLDER))
                parts.append(ImagePart(image_url=ImageURL(url=url)) if url
                             else TextPart(text=IMAGE_NOTE))
            else:
                parts.append(part)
        out.append(message.replace(content=parts))
    return out
