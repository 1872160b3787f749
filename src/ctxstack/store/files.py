"""Uploaded images on disk, each owned by one user.

Safety rules, and why:

* **Our ids, never a user's path.** A file id is 32 random hex characters generated here
  (random rather than a content hash, so one user cannot probe whether another uploaded a
  given image). Every id is checked against that exact pattern *before* it touches the
  database or the disk, and the path on disk is derived from the id alone
  (``<dir>/<id[:2]>/<id>.<ext>``). ``../../etc/passwd`` cannot even be looked up.
* **Type by content.** Only PNG, JPEG, WebP and GIF are accepted, recognised by their magic
  bytes; the file name and the client's declared type are ignored.
* **Size limit.** Uploads over ``max_bytes`` (default 10 MiB) are refused before writing.
* **Owner scoping.** Every lookup filters by owner; another user's id looks exactly like a
  missing one (:class:`~ctxstack.store.errors.NotFoundError`).
* **Integrity.** The SHA-256 recorded at upload is checked on every read, so a truncated
  or swapped file is reported rather than sent to a model.

Files are written to a temporary name and renamed into place, so a crash never leaves a
half-written image under a valid id. The directory is ``CTXSTACK_FILES_DIR`` or
``files/`` in ctxstack's data directory.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import secrets
import tempfile
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, select

from ctxstack.store.db import SessionFactory, data_dir, reading, storage_settings, transaction
from ctxstack.store.errors import FileRejectedError, NotFoundError, StorageError
from ctxstack.store.models import StoredFile

ENV_FILES_DIR = "CTXSTACK_FILES_DIR"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
FILE_ID_PATTERN = re.compile(r"[0-9a-f]{32}")
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif"}

# Recognised only to word the refusal; never accepted.
_OTHER_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"BM", "a BMP image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x00\x00\x01\x00", "an ICO icon"),
)


def sniff_image_type(data: bytes) -> str | None:
    """The MIME type of an accepted image format from its first bytes, else ``None``."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _describe_unknown(data: bytes) -> str:
    for signature, what in _OTHER_SIGNATURES:
        if data.startswith(signature):
            return what
    head = data[:256].lstrip().lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "an SVG image (refused: SVG can carry scripts)"
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "an ISO media file (HEIC/AVIF/MP4)"
    return "an unrecognised format"


def valid_file_id(file_id: object) -> bool:
    """True when ``file_id`` has the exact shape of an id this store generates."""
    return isinstance(file_id, str) and FILE_ID_PATTERN.fullmatch(file_id) is not None


def _clean_name(name: str | None) -> str | None:
    """A display-only copy of the client's file name (never used as a path)."""
    if not name:
        return None
    base = re.split(r"[\\/]", name)[-1]
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C").strip()
    return base[:255] or None


class FileRecord(BaseModel):
    """A stored file's row (what a caller may know about it)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: str
    owner_id: int
    mime_type: str
    size: int
    sha256: str
    original_name: str | None
    created_at: datetime


class LoadedFile(BaseModel):
    """A file's record and its bytes."""

    model_config = ConfigDict(frozen=True)

    record: FileRecord
    data: bytes

    def data_url(self) -> str:
        """``data:<mime>;base64,…`` — the form an OpenAI-style image part carries."""
        return f"data:{self.record.mime_type};base64,{base64.b64encode(self.data).decode()}"


class FileStore:
    """Owner-scoped image storage: bytes on disk, one ``files`` row per image.

    Args:
        session_factory: the store's session factory (rows live in the ``files`` table).
        directory: where the bytes go; default ``CTXSTACK_FILES_DIR`` or
            ``<data dir>/files``. Created on first save.
        max_bytes: the upload size limit.
    """

    def __init__(
        self,
        session_factory: SessionFactory,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if directory is None:
            directory = storage_settings(env).files_dir or data_dir() / "files"
        self.directory = Path(directory).resolve()
        self.max_bytes = max_bytes
        self._sessions = session_factory

    # ------------------------------------------------------------------ paths
    def _path(self, file_id: str, mime_type: str) -> Path:
        if not valid_file_id(file_id):  # defence in depth: callers validated already
            raise NotFoundError(f"file {file_id!r} not found")
        ext = EXTENSIONS.get(mime_type)
        if ext is None:
            raise StorageError(f"file {file_id}: stored with unsupported type {mime_type!r}")
        return self.directory / file_id[:2] / f"{file_id}.{ext}"

    # ------------------------------------------------------------------ write
    def check(self, data: bytes) -> str:
        """Validate an upload; return its MIME type.

        Raises:
            FileRejectedError: empty, over the size limit, or not PNG/JPEG/WebP/GIF.
        """
        if not data:
            raise FileRejectedError("file: the upload is empty", reason="empty")
        if len(data) > self.max_bytes:
            raise FileRejectedError(
                f"file: {len(data):,} bytes is over the {self.max_bytes:,}-byte limit",
                reason="size",
            )
        mime = sniff_image_type(data)
        if mime is None:
            raise FileRejectedError(
                f"file: only PNG, JPEG, WebP and GIF images are accepted; this looks like "
                f"{_describe_unknown(data)}",
                reason="type",
            )
        return mime

    async def save(self, owner_id: int, data: bytes, *, filename: str | None = None) -> FileRecord:
        """Store ``data`` for ``owner_id`` under a new random id.

        Raises:
            FileRejectedError: see :meth:`check` (nothing is written).
            StorageError: the disk or the database failed (a written file is removed).
        """
        mime = self.check(data)
        file_id = secrets.token_hex(16)
        path = self._path(file_id, mime)
        digest = hashlib.sha256(data).hexdigest()
        try:
            await asyncio.to_thread(_write_atomic, path, data)
        except OSError as exc:
            raise StorageError(f"writing an upload to {self.directory} failed: {exc}") from exc
        try:
            async with transaction(self._sessions, f"recording upload {file_id}") as session:
                row = StoredFile(
                    id=file_id,
                    owner_id=owner_id,
                    stored_name=str(path.relative_to(self.directory)),
                    mime_type=mime,
                    size=len(data),
                    sha256=digest,
                    original_name=_clean_name(filename),
                )
                session.add(row)
                await session.flush()
                return FileRecord.model_validate(row)
        except BaseException:
            await asyncio.to_thread(path.unlink, missing_ok=True)
            raise

    # ------------------------------------------------------------------ read
    async def info(self, owner_id: int, file_id: str) -> FileRecord:
        """The owner's file record.

        Raises:
            NotFoundError: malformed id, no such file, or another owner's.
        """
        found = await self.infos(owner_id, [file_id])
        if file_id not in found:
            raise NotFoundError(f"file {file_id!r} not found")
        return found[file_id]

    async def infos(self, owner_id: int, file_ids: Iterable[str]) -> dict[str, FileRecord]:
        """Records of those ``file_ids`` that are well-formed and ``owner_id``'s (one query).

        Ids that are malformed, unknown or another owner's are simply absent.
        """
        wanted = sorted({f for f in file_ids if valid_file_id(f)})
        if not wanted:
            return {}
        stmt = select(StoredFile).where(StoredFile.owner_id == owner_id,
                                        StoredFile.id.in_(wanted))
        async with reading(self._sessions, f"looking up files of user {owner_id}") as session:
            return {r.id: FileRecord.model_validate(r) for r in await session.scalars(stmt)}

    async def read(self, record: FileRecord) -> bytes:
        """The bytes of a file whose record the caller already holds (integrity-checked).

        Raises:
            NotFoundError: the file is gone from disk or no longer matches its checksum.
            StorageError: the disk could not be read.
        """
        path = self._path(record.id, record.mime_type)
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise NotFoundError(f"file {record.id} is missing from {self.directory}") from None
        except OSError as exc:
            raise StorageError(f"reading file {record.id} failed: {exc}") from exc
        if len(data) != record.size or hashlib.sha256(data).hexdigest() != record.sha256:
            raise NotFoundError(f"file {record.id} on disk does not match its checksum")
        return data

    async def load(self, owner_id: int, file_id: str) -> LoadedFile:
        """The owner's file with its bytes.

        Raises:
            NotFoundError: malformed id, unknown, another owner's, gone or corrupt.
        """
        record = await self.info(owner_id, file_id)
        return LoadedFile(record=record, data=await self.read(record))

    async def list_files(self, owner_id: int) -> list[FileRecord]:
        """The owner's files, newest first."""
        stmt = (select(StoredFile).where(StoredFile.owner_id == owner_id)
                .order_by(StoredFile.created_at.desc(), StoredFile.id))
        async with reading(self._sessions, f"listing files of user {owner_id}") as session:
            return [FileRecord.model_validate(r) for r in await session.scalars(stmt)]

    async def delete(self, owner_id: int, file_id: str) -> None:
        """Delete the owner's file (row, then bytes).

        Raises:
            NotFoundError: malformed id, unknown, or another owner's.
        """
        if not valid_file_id(file_id):
            raise NotFoundError(f"file {file_id!r} not found")
        stmt = (delete(StoredFile)
                .where(StoredFile.id == file_id, StoredFile.owner_id == owner_id)
                .returning(StoredFile.mime_type))
        async with transaction(self._sessions, f"deleting file {file_id}") as session:
            mime = await session.scalar(stmt)
        if mime is None:
            raise NotFoundError(f"file {file_id!r} not found")
        await asyncio.to_thread(self._path(file_id, mime).unlink, missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
