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
from collections.abc import Callable, Sequence
from typing import Any

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
