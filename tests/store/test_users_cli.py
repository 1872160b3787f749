"""``ctxstack user list | create | token | delete`` on SQLite and PostgreSQL: the real
command in a subprocess against a real database, and the store functions behind it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxstack.store import SessionFactory, create_user
from ctxstack.store.errors import NotFoundError
from ctxstack.store.files import FileStore
from ctxstack.store.users import delete_user, list_users, rotate_token, user_by_name, user_by_token
from tests.store.dbkit import Backend

CLI = [sys.executable, "-c", "from ctxstack.cli import main; main()"]
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00"
       b"\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe"
       b"\xa7\x9d\x8f\x1a\x00\x00\x00\x00IEND\xaeB`\x82")


async def ctxstack(backend: Backend, files: Path, *args: str, stdin: str | None = None
                   ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTXSTACK_DATABASE_URL": backend.url, "CTXSTACK_FILES_DIR": str(files)}
    if backend.schema:
        env["CTXSTACK_DATABASE_SCHEMA"] = backend.schema
    return await asyncio.to_thread(subprocess.run, [*CLI, *args], env=env, input=stdin,
                                   capture_output=True, text=True, timeout=120, check=False)


async def test_token_rotation_revokes_the_old_token(sf: SessionFactory) -> None:
    user, old = await create_user(sf, "carol")
    same, new = await rotate_token(sf, "carol")
    assert same.id == user.id
    assert new != old
    assert await user_by_token(sf, old) is None
    found = await user_by_token(sf, new)
    assert found is not None
    assert found.id == user.id
    with pytest.raises(NotFoundError, match="nobody"):
        await rotate_token(sf, "nobody")


async def test_list_and_delete(sf: SessionFactory, tmp_path: Path) -> None:
    a, _ = await create_user(sf, "alice")
    b, token_b = await create_user(sf, "bob")
    assert [u.name for u in await list_users(sf)] == ["alice", "bob"]
    store = FileStore(sf, tmp_path)
    record = await store.save(b.id, PNG)
    await delete_user(sf, "bob")
    assert [u.name for u in await list_users(sf)] == ["alice"]
    assert await user_by_token(sf, token_b) is None
    assert await store.list_files(b.id) == []  # the rows cascaded
    assert (await user_by_name(sf, "alice")).id == a.id
    with pytest.raises(NotFoundError):
        await delete_user(sf, "bob")
    assert record.owner_id == b.id


async def test_the_user_commands_end_to_end(backend: Backend, tmp_path: Path) -> None:
    files = tmp_path / "files"
    created = await ctxstack(backend, files, "user", "create", "dana")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("ctx_")
    listed = await ctxstack(backend, files, "user", "list")
    assert listed.returncode == 0, listed.stderr
    assert "\tdana\t" in listed.stdout
    assert token not in listed.stdout  # tokens are never listed

    rotated = await ctxstack(backend, files, "user", "token", "dana")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip() not in ("", token)
    assert "no longer works" in rotated.stderr

    missing = await ctxstack(backend, files, "user", "token", "nobody")
    assert missing.returncode == 1
    assert "no user named 'nobody'" in missing.stderr

    # no --yes and "n" on stdin: nothing is deleted
    refused = await ctxstack(backend, files, "user", "delete", "dana", stdin="n\n")
    assert refused.returncode == 1
    assert "\tdana\t" in (await ctxstack(backend, files, "user", "list")).stdout

    deleted = await ctxstack(backend, files, "user", "delete", "dana", "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert "dana" not in (await ctxstack(backend, files, "user", "list")).stdout
