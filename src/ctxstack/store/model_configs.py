"""Admin-set model limits per role, and the budget they give (docs/DESIGN.md §3, layer 5).

At most one row per role is active (a partial unique index enforces it). Setting a new
configuration deactivates the old one in the same transaction, so a budget read never sees
two active rows or none in between. :func:`load_budget` feeds the active rows into
:func:`ctxstack.budget.resolve_budget`, which falls back to the environment and defaults
for anything a row leaves NULL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.budget import BudgetRole, ModelBudget, resolve_budget
from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, is_transient_error, reading, retry_transaction
from ctxstack.store.models import MODEL_ROLES, ModelConfig, table_of, utcnow

# Core, built once: read at the start of every turn (a statement built per call cost
# ~0.1 ms of CPU for its construction and cache key, issue 15).
_ACTIVE = select(table_of(ModelConfig)).where(table_of(ModelConfig).c.active.is_(True))


class ModelConfigRecord(BaseModel):
    """A model configuration row (what :func:`resolve_budget` reads as ``model_config``)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int
    role: Literal["main", "fast"]
    model: str
    context_size: int | None
    max_output_tokens: int | None
    tokenizer_path: str | None = None
    active: bool
    created_at: datetime
    updated_at: datetime


MAX_TOKENIZER_PATH = 1000
"""Longest ``tokenizer_path`` accepted (the column's width)."""


def _check(role: str, model: str, context_size: int | None,
           max_output_tokens: int | None, tokenizer_path: str | None = None) -> None:
    if tokenizer_path is not None and (
        not isinstance(tokenizer_path, str) or not tokenizer_path.strip()
        or len(tokenizer_path) > MAX_TOKENIZER_PATH or "\x00" in tokenizer_path
    ):
        raise InputError(f"tokenizer_path: expected a non-empty path of at most "
                         f"{MAX_TOKENIZER_PATH} characters without NUL, or None")
    if role not in MODEL_ROLES:
        raise InputError(f"role: expected 'main' or 'fast', got {role!r}")
    if not model.strip():
        raise InputError("model: the model name must not be empty")
    for field, value in (("context_size", context_size),
                         ("max_output_tokens", max_output_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value <= 0):
            raise InputError(f"{field}: expected a positive integer or None, got {value!r}")


async def set_model_config(
    factory: SessionFactory,
    role: BudgetRole,
    model: str,
    *,
    context_size: int | None = None,
    max_output_tokens: int | None = None,
    tokenizer_path: str | None = None,
) -> ModelConfigRecord:
    """Make a new configuration the active one for ``role`` (the previous one is kept,
    inactive, as history).

    ``tokenizer_path``: a ``tokenizer.json`` for exact counts. Whether the file exists is
    checked when the service builds the counter (a missing one: a warning and the
    heuristic), not here — the file may live on the workers' machines only.

    Raises:
        InputError: unknown role, empty model name, a limit that is not a positive int,
            or a tokenizer path that is empty, longer than 1,000 characters or has a NUL.
        StorageError: the database failed.
    """
    _check(role, model, context_size, max_output_tokens, tokenizer_path)
    action = f"setting the {role} model configuration"
    path = tokenizer_path.strip() if tokenizer_path is not None else None

    async def work(session: AsyncSession) -> ModelConfigRecord:
        return await _activate(session, role, model.strip(), context_size, max_output_tokens,
                               path)

    # Admins saving at once: the partial unique index lets one win per round; the others
    # deactivate the winner's row and try again (last writer wins).
    return await retry_transaction(
        factory, action, work,
        retryable=lambda exc: isinstance(exc, IntegrityError) or is_transient_error(exc),
    )


async def _activate(
    session: AsyncSession, role: str, model: str, context_size: int | None,
    max_output_tokens: int | None, tokenizer_path: str | None,
) -> ModelConfigRecord:
    now = utcnow()
    await session.execute(
        update(ModelConfig)
        .where(ModelConfig.role == role, ModelConfig.active.is_(True))
        .values(active=False, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    row = ModelConfig(role=role, model=model, context_size=context_size,
                      max_output_tokens=max_output_tokens,
                      tokenizer_path=tokenizer_path, active=True,
                      created_at=now, updated_at=now)
    session.add(row)
    await session.flush()
    return ModelConfigRecord.model_validate(row)


async def read_active_model_config(
    session: AsyncSession, role: str
) -> ModelConfigRecord | None:
    """The active row for ``role`` inside an open session."""
    row = await session.scalar(
        select(ModelConfig).where(ModelConfig.role == role, ModelConfig.active.is_(True))
    )
    return ModelConfigRecord.model_validate(row) if row is not None else None


async def get_active_model_config(
    factory: SessionFactory, role: BudgetRole
) -> ModelConfigRecord | None:
    """The active configuration for ``role``, or ``None`` when an admin set none."""
    async with reading(factory, f"loading the {role} model configuration") as session:
        return await read_active_model_config(session, role)


async def list_model_configs(factory: SessionFactory) -> list[ModelConfigRecord]:
    """Every configuration ever set, newest first per role."""
    stmt = select(ModelConfig).order_by(ModelConfig.role, ModelConfig.id.desc())
    async with reading(factory, "listing model configurations") as session:
        return [ModelConfigRecord.model_validate(r) for r in await session.scalars(stmt)]


async def load_budget(
    factory: SessionFactory,
    role: BudgetRole = "main",
    *,
    env: Mapping[str, str] | None = None,
) -> ModelBudget:
    """The budget for ``role`` with the database as the first source.

    For the fast role the main row is read too: a fast limit nobody set falls back to the
    main role's resolved value (docs/DESIGN.md §3, layer 5).

    Raises:
        ConfigError: a stored or environment value is not a positive integer.
        StorageError: the database failed (the caller decides whether to fall back).
    """
    async with reading(factory, f"loading the {role} budget") as session:
        main_row = await read_active_model_config(session, "main")
        row = main_row if role == "main" else await read_active_model_config(session, role)
    return resolve_budget(role, model_config=row, env=env, main_config=main_row)


@dataclass(frozen=True)
class TurnModels:
    """What a turn reads of the model configuration: each role's budget and active row."""

    main: ModelBudget
    fast: ModelBudget
    main_config: ModelConfigRecord | None
    fast_config: ModelConfigRecord | None


async def load_turn_models(
    factory: SessionFactory, *, env: Mapping[str, str] | None = None
) -> TurnModels:
    """(main, fast) budgets as :func:`load_budget` resolves them, and the active rows they
    came from (model name, tokenizer path — the service's counters follow them), from one
    query for both rows (the chat service reads them at the start of every turn).

    Raises:
        ConfigError: a stored or environment value is not a positive integer.
        StorageError: the database failed.
    """
    async with reading(factory, "loading the model budgets") as session:
        found = await (await session.connection()).execute(_ACTIVE)
        rows = {row.role: ModelConfigRecord.model_validate(dict(row._mapping))
                for row in found}
    main_row, fast_row = rows.get("main"), rows.get("fast")
    return TurnModels(
        main=resolve_budget("main", model_config=main_row, env=env, main_config=main_row),
        fast=resolve_budget("fast", model_config=fast_row, env=env, main_config=main_row),
        main_config=main_row, fast_config=fast_row,
    )


async def load_budgets(
    factory: SessionFactory, *, env: Mapping[str, str] | None = None
) -> tuple[ModelBudget, ModelBudget]:
    """(main, fast) budgets of :func:`load_turn_models`.

    Raises:
        ConfigError: a stored or environment value is not a positive integer.
        StorageError: the database failed.
    """
    models = await load_turn_models(factory, env=env)
    return models.main, models.fast
