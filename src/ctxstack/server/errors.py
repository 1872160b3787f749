"""Errors raised only by the chat service's turn lifecycle.

Part of the one hierarchy drawn in :mod:`ctxstack.errors`; here because only
:mod:`ctxstack.server` raises them (mapped to 409 and 404 by its routes).
"""

from __future__ import annotations

from ctxstack.errors import CtxstackError


class NoRunningTurnError(CtxstackError):
    """An inject was sent for a conversation that has no turn running."""


class TurnBusyError(CtxstackError):
    """A turn was started for a conversation that already has one running."""
