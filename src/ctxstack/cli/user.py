"""``ctxstack user``: manage the chat service's users and their API tokens."""

from __future__ import annotations

import asyncio

import click

from ctxstack.cli.app import main, needs_extra
from ctxstack.errors import CtxstackError


@main.group()
def user() -> None:
    """Users of the chat service (database from CTXSTACK_DATABASE_URL)."""


@user.command("create")
@click.argument("name")
@click.option("--schema", default=None, envvar="CTXSTACK_DATABASE_SCHEMA",
              help="PostgreSQL schema to use.")
def create(name: str, schema: str | None) -> None:
    """Create user NAME and print its API token (shown only this once)."""
    with needs_extra("server", "user create"):
        from ctxstack.store.db import create_engine_from_url, session_factory
        from ctxstack.store.migrate import upgrade
        from ctxstack.store.users import create_user

    async def run() -> str:
        engine = create_engine_from_url(None, schema=schema)
        try:
            await upgrade(engine)
            _, token = await create_user(session_factory(engine), name)
            return token
        finally:
            await engine.dispose()

    try:
        token = asyncio.run(run())
    except CtxstackError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(token)
    click.echo(f"created user {name!r}; send the token as 'Authorization: Bearer <token>' "
               "(it is not stored and cannot be shown again)", err=True)
