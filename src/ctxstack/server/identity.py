"""Who a request acts as: :class:`CurrentUser`, and the ``--no-auth`` local user.

Kept apart from :mod:`ctxstack.server.auth` (the FastAPI dependencies, which read the
service state) so the service state can name the local user without importing the
dependencies that read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, reading
from ctxstack.store.models import User
from ctxstack.store.users import create_user


class CurrentUser(BaseModel):
    """The caller, as routes see it."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    is_admin: bool = False


async def ensure_local_user(factory: SessionFactory, name: str) -> tuple[int, str]:
    """The id of the ``--no-auth`` user, creating it (with an unusable token) if needed."""
    async with reading(factory, f"looking up user {name!r}") as session:
        found = await session.scalar(select(User.id).where(User.name == name))
    if found is not None:
        return int(found), name
    try:
        record, _ = await create_user(factory, name)
    except InputError:
        # Another worker created it between our look-up and our insert.
        async with reading(factory, f"looking up user {name!r}") as session:
            again = await session.scalar(select(User.id).where(User.name == name))
        if again is None:
            raise
        return int(again), name
    return record.id, record.name
