"""Users and their API tokens.

A token is shown once, at creation; only its SHA-256 is stored. A fast hash is the right
tool here (unlike for passwords): the tokens are 256-bit random strings, so there is
nothing to brute-force, and a lookup must cost one indexed equality match per request.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.errors import InputError
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import NotFoundError
from ctxstack.store.models import User

TOKEN_PREFIX = "ctx_"
MIN_TOKEN_LENGTH = 16
MAX_NAME_LENGTH = 200


class UserRecord(BaseModel):
    """A user as the rest of ctxstack sees it (never the token or its hash)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int
    name: str
    created_at: datetime


def hash_token(token: str) -> str:
    """The stored form of an API token (hex SHA-256)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random API token (``ctx_`` + 43 URL-safe characters, 256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def create_user(
    factory: SessionFactory, name: str, *, token: str | None = None
) -> tuple[UserRecord, str]:
    """Create a user; return it and its API token (the only time the token is visible).

    Raises:
        InputError: the name is empty, too long or taken, or a given token is too short.
        StorageError: the database failed.
    """
    name = name.strip()
    if not name:
        raise InputError("name: a user name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(f"name: at most {MAX_NAME_LENGTH} characters, got {len(name)}")
    if token is None:
        token = new_token()
    elif len(token) < MIN_TOKEN_LENGTH:
        raise InputError(f"token: at least {MIN_TOKEN_LENGTH} characters, got {len(token)}")
    async with transaction(factory, f"creating user {name!r}") as session:
        taken = await session.scalar(select(User.id).where(User.name == name))
        if taken is not None:
            raise InputError(f"name: a user named {name!r} already exists")
        user = User(name=name, token_hash=hash_token(token))
        session.add(user)
        try:
            await session.flush()
        except IntegrityError:
            # Lost a race with a concurrent create of the same name (or token).
            raise InputError(f"name: a user named {name!r} already exists") from None
        record = UserRecord.model_validate(user)
    return record, token


async def user_by_token(factory: SessionFactory, token: str) -> UserRecord | None:
    """The user owning ``token``, or ``None`` for an unknown (or empty) token."""
    if not token:
        return None
    async with reading(factory, "looking up an API token") as session:
        user = await session.scalar(select(User).where(User.token_hash == hash_token(token)))
        return UserRecord.model_validate(user) if user is not None else None


async def get_user(factory: SessionFactory, user_id: int) -> UserRecord:
    """The user with this id.

    Raises:
        NotFoundError: no such user.
    """
    async with reading(factory, f"loading user {user_id}") as session:
        user = await session.get(User, user_id)
        if user is None:
            raise NotFoundError(f"user {user_id} does not exist")
        return UserRecord.model_validate(user)


async def list_users(factory: SessionFactory) -> list[UserRecord]:
    """Every user, oldest first (never a token or its hash)."""
    async with reading(factory, "listing users") as session:
        rows = await session.scalars(select(User).order_by(User.id))
        return [UserRecord.model_validate(u) for u in rows]


async def user_by_name(factory: SessionFactory, name: str) -> UserRecord:
    """The user called ``name``.

    Raises:
        NotFoundError: no such user.
    """
    async with reading(factory, f"loading user {name!r}") as session:
        return UserRecord.model_validate(await _named(session, name))


async def rotate_token(factory: SessionFactory, name: str) -> tuple[UserRecord, str]:
    """Issue a new API token for ``name``; the old one stops working at once (only the new
    hash is stored). Returns the user and the token (the only time it is visible).

    Raises:
        NotFoundError: no such user.
    """
    token = new_token()
    async with transaction(factory, f"issuing a token for {name!r}") as session:
        user = await _named(session, name)
        user.token_hash = hash_token(token)
        record = UserRecord.model_validate(user)
    return record, token


async def delete_user(factory: SessionFactory, name: str) -> UserRecord:
    """Delete ``name`` with everything the database holds for them (conversations,
    messages, checkpoints, file rows: the foreign keys cascade). The bytes of their
    uploaded files are the file store's to remove first (``ctxstack user delete`` does).

    Raises:
        NotFoundError: no such user.
    """
    async with transaction(factory, f"deleting user {name!r}") as session:
        user = await _named(session, name)
        record = UserRecord.model_validate(user)
        await session.delete(user)
    return record


async def _named(session: AsyncSession, name: str) -> User:
    user = await session.scalar(select(User).where(User.name == name.strip()))
    if user is None:
        raise NotFoundError(f"no user named {name!r}")
    return user
