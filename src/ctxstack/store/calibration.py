"""Persisted token-count calibration, one row per model name (table ``token_calibrations``).

The service loads a role's learnt factors when a process starts
(:func:`load_calibration`) and saves them after the counter learns
(:func:`save_calibration`, an upsert: the last writer wins, which is what every worker
wants — each starts from the newest state saved by any of them).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import StorageError
from ctxstack.store.models import TokenCalibration, utcnow

MAX_MODEL_CHARS = 200


def _check_model(model: str) -> str:
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_CHARS:
        raise InputError(f"model: expected a name of 1–{MAX_MODEL_CHARS} characters, "
                         f"got {model!r}")
    return model


async def load_calibration(factory: SessionFactory, model: str) -> dict[str, Any] | None:
    """The state saved for ``model`` (``CalibratingCounter.export_state`` form), or None."""
    _check_model(model)
    async with reading(factory, "load token calibration") as session:
        row = await session.get(TokenCalibration, model)
        if row is None:
            return None
        state = json.loads(row.state)
    return state if isinstance(state, dict) else None


async def save_calibration(factory: SessionFactory, model: str, state: dict[str, Any]) -> None:
    """Insert or replace ``model``'s state."""
    _check_model(model)
    text = json.dumps(state, sort_keys=True)
    for attempt in range(2):  # a concurrent first insert by another worker: update instead
        try:
            async with transaction(factory, "save token calibration") as session:
                row = (await session.execute(
                    select(TokenCalibration).where(TokenCalibration.model == model)
                )).scalar_one_or_none()
                if row is None:
                    session.add(TokenCalibration(model=model, state=text, updated_at=utcnow()))
                else:
                    row.state = text
                    row.updated_at = utcnow()
            return
        except StorageError as exc:
            if attempt or not isinstance(exc.__cause__, IntegrityError):
                raise
