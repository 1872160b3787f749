"""``ctxstack user``: manage the chat service's users and their API tokens.

``create NAME`` and ``token NAME`` print a token once (only its hash is stored; ``token``
revokes the previous one); ``list`` shows names, ids and creation times, never tokens;
``delete NAME`` removes the user, their conversations and their uploaded files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from ctxstack.cli.app import main, needs_extra
from ctxstack.errors import CtxstackError

if TYPE_CHECKING:
    from ctxstack.store.db import SessionFactory

T = TypeVar("T")

_schema = click.option("--schema", default=None, envvar="CTXSTACK_DATABASE_SCHEMA",
                       help="PostgreSQL schema to use.")


@main.group()
def user() -> None:
    """Users of the chat service (database from CTXSTACK_DATABASE_URL)."""


@user.command("create")
@click.argument("name")
@_schema
def create(name: str, schema: str | None) -> None:
    """Create user NAME and print its API token (shown only this once)."""
    with needs_extra("server", "user create"):
        from ctxstack.store.users import create_user
    _, token = _run(lambda f: create_user(f, name), schema)
    click.echo(token)
    click.echo(f"created user {name!r}; send the token as 'Authorization: Bearer <token>' "
               "(it is not stored and cannot be shown again)", err=True)


def _run(work: Callable[[SessionFactory], Awaitable[T]], schema: str | None) -> T:
    """Run ``work`` against the migrated database; storage and input errors become a
    one-line click error (exit 1) naming the problem."""
    from ctxstack.store.db import create_engine_from_url, session_factory
    from ctxstack.store.migrate import upgrade

    async def run() -> T:
        engine = create_engine_from_url(None, schema=schema)
        try:
            await upgrade(engine)
            return await work(session_factory(engine))
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except CtxstackError as exc:
        raise click.ClickException(str(exc)) from exc


@user.command("list")
@_schema
def list_command(schema: str | None) -> None:
    """List users: id, name, created (tokens are never shown)."""
    with needs_extra("server", "user list"):
        from ctxstack.store.users import list_users
    users = _run(list_users, schema)
    for u in users:
        click.echo(f"{u.id}\t{u.name}\t{u.created_at:%Y-%m-%d %H:%M}")
    if not users:
        click.echo("no users (create one: ctxstack user create NAME)", err=True)


@user.command("token")
@click.argument("name")
@_schema
def token_command(name: str, schema: str | None) -> None:
    """Issue a new API token for NAME and revoke the old one; print it (shown once)."""
    with needs_extra("server", "user token"):
        from ctxstack.store.users import rotate_token
    _, token = _run(lambda f: rotate_token(f, name), schema)
    click.echo(token)
    click.echo(f"new token for {name!r}; the previous one no longer works", err=True)


@user.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_schema
def delete_command(name: str, yes: bool, schema: str | None) -> None:
    """Delete NAME with their conversations and uploaded files."""
    with needs_extra("server", "user delete"):
        from ctxstack.store.files import FileStore
        from ctxstack.store.users import delete_user, user_by_name

    async def work(factory: SessionFactory) -> int:
        record = await user_by_name(factory, name)
        store = FileStore(factory)
        files = await store.list_files(record.id)
        for f in files:  # bytes first: a failure here leaves the user whole, to retry
            await store.delete(record.id, f.id)
        await delete_user(factory, name)
        return len(files)

    if not yes:
        click.confirm(f"Delete user {name!r} with all their conversations and files?",
                      abort=True)
    removed = _run(work, schema)
    click.echo(f"deleted user {name!r} ({removed} uploaded file(s) removed)", err=True)
