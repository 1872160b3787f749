"""``ctxstack db``: database maintenance (schema migrations)."""

from __future__ import annotations

import asyncio

import click

from ctxstack.cli.app import main, needs_extra

ENV_DATABASE_URL = "CTXSTACK_DATABASE_URL"


@main.group()
def db() -> None:
    """Database maintenance (URL from --url, else CTXSTACK_DATABASE_URL, else SQLite)."""


_url_option = click.option(
    "--url",
    envvar=ENV_DATABASE_URL,
    default=None,
    help="Database URL, e.g. postgresql+asyncpg://user@host/db "
    "(default: CTXSTACK_DATABASE_URL, else a SQLite file in the user data directory).",
)
_schema_option = click.option(
    "--schema", default=None, help="PostgreSQL schema to use (sets search_path)."
)


def _where(url: str | None) -> str:
    from ctxstack.store.db import database_url, parse_url

    return parse_url(database_url(url)).render_as_string(hide_password=True)


@db.command("upgrade")
@_url_option
@_schema_option
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def upgrade_command(url: str | None, schema: str | None, revision: str) -> None:
    """Create or migrate the schema to the newest (or the given) revision."""
    with needs_extra("server", "db upgrade"):
        from ctxstack.store.errors import StorageError
        from ctxstack.store.migrate import head_revision, upgrade
    try:
        where = _where(url)
        applied = asyncio.run(upgrade(url, schema=schema, revision=revision))
    except StorageError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"database {where} is at revision {applied} (head {head_revision()})")


@db.command("current")
@_url_option
@_schema_option
def current_command(url: str | None, schema: str | None) -> None:
    """Show the schema revision the database is at."""
    with needs_extra("server", "db current"):
        from ctxstack.store.errors import StorageError
        from ctxstack.store.migrate import current_revision, head_revision
    try:
        where = _where(url)
        revision = asyncio.run(current_revision(url, schema=schema))
    except StorageError as exc:
        raise click.ClickException(str(exc)) from exc
    state = "not migrated" if revision is None else f"at revision {revision}"
    hint = "" if revision == head_revision() else " — run: ctxstack db upgrade"
    click.echo(f"database {where} is {state} (head {head_revision()}){hint}")
