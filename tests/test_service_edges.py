"""The service's edges (issue 15): validation, dead or hung dependencies, the turn lease.

These run the real app in-process (``httpx.ASGITransport``, the app's own lifespan) on a
real SQLite file or PostgreSQL schema, a real Redis port with nothing behind it, and a
real TCP server that accepts connections and never answers (a hung PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ctxstack.server.app import create_app
from ctxstack.server.errors import NoRunningTurnError, TurnBusyError
from ctxstack.server.injects import DbInjectQueue
from ctxstack.server.settings import Settings
from ctxstack.store import create_conversation, create_user, session_factory, upgrade
from ctxstack.store.db import create_engine_from_url
from ctxstack.store.models import Message
from tests.reliability_support import database_env
from tests.service_support import clean_env, free_port, redis_url_or_skip, run_cli

NUL = "a\x00b"


@contextlib.asynccontextmanager
async def app_client(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client, app


async def _migrated(db: dict[str, str]) -> None:
    await upgrade(db["CTXSTACK_DATABASE_URL"], schema=db.get("CTXSTACK_DATABASE_SCHEMA"))


def _settings(db: dict[str, str], tmp_path: Path, **kw: Any) -> Settings:
    return Settings(database_url=db["CTXSTACK_DATABASE_URL"],
                    database_schema=db.get("CTXSTACK_DATABASE_SCHEMA"),
                    files_dir=tmp_path / "files", auth="none", **kw)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    with database_env(request.param, tmp_path) as env:
        asyncio.run(_migrated(env))
        yield env


# ---------------------------------------------------------------------------- validation
async def test_huge_integers_and_nul_bytes_are_422_on_every_backend(
    db: dict[str, str], tmp_path: Path
) -> None:
    async with app_client(_settings(db, tmp_path)) as (client, _):
        cid = (await client.post("/api/conversations", json={})).json()["id"]
        for url in (f"/api/conversations/{cid}/messages?after_seq={2**70}",
                    f"/api/conversations?offset={2**70}"):
            answer = await client.get(url)
            assert answer.status_code == 422, (url, answer.status_code, answer.text)
        assert (await client.get(f"/api/conversations/{cid}/messages?after_seq={2**31 - 1}"
                                 )).status_code == 200
        bad: list[tuple[str, str, dict[str, Any]]] = [
            ("POST", "/api/chat", {"conversation_id": cid, "query": NUL}),
            ("POST", "/api/chat/inject", {"conversation_id": cid, "text": NUL}),
            ("POST", "/api/conversations", {"title": NUL}),
            ("PATCH", f"/api/conversations/{cid}", {"title": NUL}),
            ("PUT", "/api/admin/model-configs/main", {"model": NUL}),
        ]
        for method, url, body in bad:
            answer = await client.request(method, url, json=body)
            assert answer.status_code == 422, (url, answer.status_code, answer.text)
            assert "NUL" in answer.json()["detail"]
        png = (b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
        boundary = "nulboundary"
        raw = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
               f"filename=\"a\x00.png\"\r\nContent-Type: image/png\r\n\r\n").encode()
        raw += png + f"\r\n--{boundary}--\r\n".encode()
        upload = await client.post("/api/files", content=raw, headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert upload.status_code == 422, upload.text
        assert "filename" in upload.json()["detail"]
        # Nothing was stored on either backend.
        listed = (await client.get(f"/api/conversations/{cid}/messages")).json()
        assert listed == []
        titles = [c["title"] for c in (await client.get("/api/conversations")).json()]
        assert all("\x00" not in t for t in titles)


# ---------------------------------------------------------------------------- Redis down
async def test_a_dead_redis_is_a_503_naming_redis_not_a_500(tmp_path: Path) -> None:
    with database_env("sqlite", tmp_path) as env:
        await _migrated(env)
        port = free_port()  # nothing listens there
        settings = _settings(env, tmp_path, redis_url=f"redis://127.0.0.1:{port}/0",
                             redis_timeout=1.0)
        async with app_client(settings) as (client, _):
            cid = (await client.post("/api/conversations", json={})).json()["id"]
            answers = [
                await client.post("/api/chat", json={"conversation_id": cid, "query": "hi"}),
                await client.post("/api/chat/inject", json={"conversation_id": cid,
                                                            "text": "hi"}),
                await client.delete(f"/api/conversations/{cid}"),
            ]
            for answer in answers:
                assert answer.status_code == 503, answer.text
                assert "Redis" in answer.json()["detail"]
                assert str(port) not in answer.text
                assert "127.0.0.1" not in answer.text


# ---------------------------------------------------------------------------- hung PostgreSQL
@contextlib.contextmanager
def hung_server() -> Iterator[int]:
    """A TCP server on loopback that accepts every connection and never sends a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(sock.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        sock.close()


async def test_a_hung_postgres_gives_a_bounded_503_without_its_address(tmp_path: Path) -> None:
    with hung_server() as port:
        url = f"postgresql+asyncpg://secretuser@127.0.0.1:{port}/secretdb"
        settings = Settings(database_url=url, files_dir=tmp_path / "files", auth="token",
                            db_connect_timeout=1.0, db_statement_timeout=1.0)
        async with app_client(settings) as (client, _):
            answer = await asyncio.wait_for(client.get(
                "/api/conversations/" + "a" * 32 + "/messages",
                headers={"Authorization": "Bearer some-token"}), timeout=30)
            assert answer.status_code == 503, answer.text
            assert answer.json()["detail"] == "the database is unavailable; try again shortly"
            for leak in ("secretuser", "secretdb", str(port), "127.0.0.1"):
                assert leak not in answer.text


def test_serve_against_a_hung_postgres_exits_with_an_error(tmp_path: Path) -> None:
    with hung_server() as port:
        env = clean_env({"CTXSTACK_DATABASE_URL": f"postgresql+asyncpg://u@127.0.0.1:{port}/db",
                         "CTXSTACK_DB_CONNECT_TIMEOUT": "1",
                         "CTXSTACK_FILES_DIR": str(tmp_path / "files")})
        done = run_cli("serve", "--port", str(free_port()), env=env, timeout=60)
        assert done.returncode != 0
        assert "migrating" in done.stderr


# ---------------------------------------------------------------------------- the lease
@pytest.fixture
async def queue_env(db: dict[str, str]) -> AsyncIterator[tuple[Any, str]]:
    engine = create_engine_from_url(db["CTXSTACK_DATABASE_URL"],
                                    schema=db.get("CTXSTACK_DATABASE_SCHEMA"))
    factory = session_factory(engine)
    user, _ = await create_user(factory, f"u{secrets.token_hex(3)}")
    cid = (await create_conversation(factory, user.id)).id
    try:
        yield factory, cid
    finally:
        await engine.dispose()


async def test_a_crashed_holders_claim_expires_with_its_lease_and_keeps_its_injects(
    queue_env: tuple[Any, str]
) -> None:
    factory, cid = queue_env
    elsewhere = DbInjectQueue(factory, stale_after=0.5, holder="another-host:1")
    here = DbInjectQueue(factory, stale_after=0.5)
    await elsewhere.begin(cid, "dead-turn")
    await here.push(cid, "sent while the dead turn looked alive")
    with pytest.raises(TurnBusyError):
        await here.begin(cid, "next")
    await asyncio.sleep(0.7)  # the lease runs out: no heartbeat
    assert not await here.is_running(cid)
    await here.begin(cid, "next")
    # The inject accepted (202) for the dead turn is the new turn's, not deleted.
    assert await here.take(cid, "next") == ["sent while the dead turn looked alive"]


async def test_a_claim_of_a_dead_process_on_this_host_is_taken_over_at_once(
    queue_env: tuple[Any, str]
) -> None:
    factory, cid = queue_env
    gone = _dead_pid()
    crashed = DbInjectQueue(factory, stale_after=600, holder=f"{socket.gethostname()}:{gone}")
    await crashed.begin(cid, "crashed")
    here = DbInjectQueue(factory, stale_after=600)
    assert not await here.is_running(cid)
    await here.begin(cid, "restarted")  # no waiting for the 600 s lease
    with pytest.raises(TurnBusyError):
        await DbInjectQueue(factory, stale_after=600).begin(cid, "third")


async def test_saving_state_refuses_injects_and_still_blocks_a_new_turn(
    queue_env: tuple[Any, str]
) -> None:
    factory, cid = queue_env
    queue = DbInjectQueue(factory)
    await queue.begin(cid, "t1")
    await queue.push(cid, "late")
    assert await queue.finish(cid, "t1") == ["late"]
    with pytest.raises(NoRunningTurnError, match="finishing"):
        await queue.push(cid, "too late")
    with pytest.raises(TurnBusyError):
        await queue.begin(cid, "t2")  # not released before the answer is committed
    await queue.release(cid, "t1")
    await queue.begin(cid, "t2")


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------------- 404 before 409
@pytest.mark.parametrize("queue", ["database", "redis"])
async def test_a_turn_on_a_conversation_not_the_callers_is_404_even_while_busy(
    db: dict[str, str], tmp_path: Path, queue: str
) -> None:
    # The route reads the conversation inside the claim's transaction (database queue)
    # or just before the claim (Redis): either way the ownership check comes first.
    redis_url = redis_url_or_skip() if queue == "redis" else None
    settings = _settings(db, tmp_path, demo_delay=0, demo_chunk_delay=0, redis_url=redis_url)
    async with app_client(settings) as (client, app):
        state = app.state.ctxstack
        mine = (await client.post("/api/conversations", json={})).json()["id"]
        other, _ = await create_user(state.factory, f"u{secrets.token_hex(3)}")
        theirs = (await create_conversation(state.factory, other.id)).id
        held = {cid: f"held-{secrets.token_hex(4)}" for cid in (mine, theirs)}
        for cid, turn in held.items():  # a live turn of this process holds both
            await state.injects.begin(cid, turn)

        def ask(cid: str) -> Any:
            return client.post("/api/chat", json={"conversation_id": cid, "query": "hi"})

        try:
            busy = await ask(mine)
            assert busy.status_code == 409, busy.text
            for cid in (theirs, secrets.token_hex(16), "not-an-id"):
                answer = await ask(cid)
                assert answer.status_code == 404, (cid, answer.text)
                assert "not found" in answer.json()["detail"]
        finally:
            for cid, turn in held.items():
                await state.injects.release(cid, turn)
        # Nothing was stored for the refused turns, and their conversations are free.
        async with state.factory() as session:
            count = await session.scalar(select(func.count()).select_from(Message))
        assert count == 0
        assert not await state.injects.is_running(theirs)
        # Deleted, the conversation is a 404 too; a live one of the caller's still runs.
        assert (await client.delete(f"/api/conversations/{mine}")).status_code == 204
        assert (await ask(mine)).status_code == 404
        fresh = (await client.post("/api/conversations", json={})).json()["id"]
        ok = await client.post("/api/chat", json={"conversation_id": fresh, "query": "2+3?"})
        assert ok.status_code == 200
        assert "event: done" in ok.text
