"""Errors raised only by the storage side (the database and the file store).

Part of the one hierarchy drawn in :mod:`ctxstack.errors`; here because only
:mod:`ctxstack.store` raises them (and the service, which maps them to HTTP statuses).
"""

from __future__ import annotations

from typing import Literal

from ctxstack.errors import CtxstackError, InputError


class StorageError(CtxstackError):
    """The database or the file store failed; nothing is silently treated as empty."""


class NotFoundError(StorageError):
    """The requested row or file does not exist, or does not belong to the caller."""


class FileRejectedError(InputError):
    """An uploaded file was refused before anything was stored.

    ``reason`` tells a service which status to answer: ``"type"`` (not a PNG, JPEG, WebP or
    GIF by its magic bytes — 415), ``"size"`` (over the limit — 413) or ``"empty"`` (400).
    """

    def __init__(self, message: str, *, reason: Literal["type", "size", "empty"]) -> None:
        super().__init__(message)
        self.reason = reason
