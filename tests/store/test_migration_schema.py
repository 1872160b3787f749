"""Each migration builds exactly the schema it built when it was written, on both backends.

A migration that has run in production must never change what it creates: a database
migrated last year and one migrated today must end up identical. The snapshot files in
``tests/store/data/`` hold, per revision, the schema a database has after upgrading
to it (SQLite: every ``sqlite_master`` entry's DDL, white space folded; PostgreSQL: the
columns, constraints and indexes from the catalogue, the test schema's name replaced by
``<schema>``). Refactoring the migrations (shared helpers, say) must leave them equal.

A new migration adds its revision: run this module with
``CTXSTACK_WRITE_SCHEMA_SNAPSHOT=1`` and check that the diff of the data files adds the
new revision's entry and changes no older one.

Every step down is pinned likewise: it restores the schema of the revision below.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from ctxstack.store import downgrade, upgrade
from ctxstack.store.migrate import alembic_config
from tests.store.dbkit import Backend

DATA = Path(__file__).parent / "data"
Schema = dict[str, list[list[str]]]


def _revisions() -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def _sqlite_schema(connection: Connection) -> Schema:
    rows = connection.execute(text(
        "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' AND tbl_name != 'alembic_version' "
        "ORDER BY type, name"))
    return {"objects": [[kind, name, table, _constraints_sorted(" ".join(sql.split()))]
                        for kind, name, table, sql in rows]}


def _constraints_sorted(ddl: str) -> str:
    """``ddl`` with a CREATE TABLE's table constraints in name order: a table that SQLite
    rebuilt (Alembic's batch mode, to drop a column) gets them in no fixed order."""
    if not ddl.startswith("CREATE TABLE ") or not ddl.endswith(" )"):
        return ddl
    head, _, inner = ddl[:-2].partition(" ( ")
    items, depth, start = [], 0, 0
    for at, char in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(inner[start:at].strip())
            start = at + 1
    items.append(inner[start:].strip())
    columns = [item for item in items if not item.startswith("CONSTRAINT ")]
    constraints = sorted(item for item in items if item.startswith("CONSTRAINT "))
    return f"{head} ( {', '.join(columns + constraints)} )"


def _postgres_schema(connection: Connection) -> Schema:
    schema = connection.execute(text("SELECT current_schema()")).scalar_one()

    def rows(sql: str) -> list[list[str]]:
        result = connection.execute(text(sql), {"schema": schema})
        return [[str(value).replace(schema, "<schema>") for value in row]
                for row in result if row[0] != "alembic_version"]

    return {
        "columns": rows(
            "SELECT table_name, column_name, data_type, "
            "coalesce(character_maximum_length::text, ''), is_nullable, "
            "coalesce(column_default, '') FROM information_schema.columns "
            "WHERE table_schema = :schema ORDER BY table_name, ordinal_position"),
        "constraints": rows(
            "SELECT rel.relname, con.conname, con.contype::text, "
            "pg_get_constraintdef(con.oid) FROM pg_constraint con "
            "JOIN pg_class rel ON rel.oid = con.conrelid "
            "JOIN pg_namespace ns ON ns.oid = rel.relnamespace "
            "WHERE ns.nspname = :schema ORDER BY rel.relname, con.conname"),
        "indexes": rows(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = :schema ORDER BY tablename, indexname"),
    }


async def _schema(backend: Backend) -> Schema:
    engine = backend.engine()
    try:
        async with engine.connect() as connection:
            dump = _sqlite_schema if backend.name == "sqlite" else _postgres_schema
            return await connection.run_sync(dump)
    finally:
        await engine.dispose()


def _dumps(built: dict[str, Schema]) -> str:
    """JSON with one schema object a line, so that a diff names the objects changed."""
    revisions = []
    for revision, schema in built.items():
        parts = []
        for part, rows in schema.items():
            lines = ",\n".join(f"   {json.dumps(row, ensure_ascii=False)}" for row in rows)
            parts.append(f"  {json.dumps(part)}: [\n{lines}\n  ]" if rows
                         else f"  {json.dumps(part)}: []")
        revisions.append(f" {json.dumps(revision)}: {{\n" + ",\n".join(parts) + "\n }")
    return "{\n" + ",\n".join(revisions) + "\n}\n"


async def test_each_revision_builds_its_recorded_schema_and_steps_back(
    backend: Backend,
) -> None:
    revisions = _revisions()
    built: dict[str, Schema] = {"base": await _schema(backend)}
    for revision in revisions:
        assert await upgrade(backend.url, revision=revision, schema=backend.schema) == revision
        built[revision] = await _schema(backend)
    # Stepping down restores the revision below; on SQLite a step that rebuilds a table
    # (batch mode) may write its DDL differently (quoted name, constraint order): such a
    # state is recorded under its own key so that it too stays as it is.
    for below, revision in reversed(list(zip(["base", *revisions], revisions, strict=False))):
        assert await downgrade(backend.url, revision=below, schema=backend.schema) == (
            None if below == "base" else below)
        stepped = await _schema(backend)
        if stepped != built[below]:
            built[f"{below} after downgrading {revision}"] = stepped

    snapshot = DATA / f"migration_schema_{backend.name}.json"
    if os.environ.get("CTXSTACK_WRITE_SCHEMA_SNAPSHOT") == "1":
        snapshot.write_text(_dumps(built))
    recorded = json.loads(snapshot.read_text())
    assert sorted(built) == sorted(recorded)
    for state, schema in built.items():
        assert schema == recorded[state], f"the schema {state} changed"
