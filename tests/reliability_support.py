"""Helpers for the reliability suites (issue 15): a database per backend, the real
``ctxstack stub-llm`` as a process, and a turn read with an overall deadline."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service_support import (
    _LAUNCH,
    SSEEvent,
    clean_env,
    free_port,
    sse_events,
    stop_process,
    wait_for_http,
)

PG_URL = os.environ.get("CTXSTACK_TEST_POSTGRES_URL",
                        "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


async def _pg(statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"),
                                 timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def database_env(kind: str, workdir: Path) -> Iterator[dict[str, str]]:
    """Server variables for a fresh database of ``kind`` ("sqlite" or "postgres")."""
    if kind == "sqlite":
        yield {"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'svc.db'}"}
        return
    schema = f"rel_{secrets.token_hex(6)}"
    try:
        asyncio.run(_pg(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        message = f"PostgreSQL at {PG_URL} is not reachable ({exc}); start it to run this test"
        if os.environ.get("CTXSTACK_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield {"CTXSTACK_DATABASE_URL": PG_URL, "CTXSTACK_DATABASE_SCHEMA": schema}
    finally:
        asyncio.run(_pg(f'DROP SCHEMA "{schema}" CASCADE'))


class StubProcess:
    """``ctxstack stub-llm`` with the given flags, in its own process, on a fixed port
    (so a server configured once can be pointed at a different fault each time)."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, *flags: str, timeout: float = 30.0) -> StubProcess:
        self.stop()
        with (self.workdir / f"stub-{self.port}.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, "stub-llm", "--port", str(self.port), *flags],
                env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
        problem = wait_for_http(self.proc, f"{self.base_url}/models", timeout, every=0.1)
        if problem is not None:
            raise RuntimeError(f"stub-llm {flags} {problem}")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=10)
        self.proc = None

    def env(self, **extra: str) -> dict[str, str]:
        return {"LLM_BASE_URL": self.base_url, "LLM_API_KEY": "stub-key",
                "LLM_MODEL": "stub-model", **extra}


def turn(client: httpx.Client, conversation_id: str, query: str, *,
         deadline_s: float = 60.0) -> list[SSEEvent]:
    """One turn's events; fails if the stream has not ended after ``deadline_s`` (a
    generous bound: keep-alives alone must not keep a failed turn open)."""
    body = {"conversation_id": conversation_id, "query": query}
    end = time.monotonic() + deadline_s
    events: list[SSEEvent] = []
    with client.stream("POST", "/api/chat", json=body, timeout=deadline_s) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"chat answered {response.status_code}: {response.text}")
        for item in sse_events(response):
            if isinstance(item, SSEEvent):
                events.append(item)
            assert time.monotonic() < end, f"the turn did not end in {deadline_s}s: {events}"
    return events


@contextlib.contextmanager
def database_cut(backend: str, db: dict[str, str], workdir: Path) -> Iterator[None]:
    """Writes to the service's database fail while inside: SQLite locked exclusively;
    PostgreSQL's messages, conversations and claim tables locked (in the test's own
    schema, so nothing else sharing the server is touched). ``workdir``: where
    :func:`database_env` put the SQLite file."""
    if backend == "sqlite":
        conn = sqlite3.connect(workdir / "svc.db", timeout=10, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import asyncpg

    async def hold(stop: asyncio.Event, ready: asyncio.Event) -> None:
        conn = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            async with conn.transaction():
                schema = db["CTXSTACK_DATABASE_SCHEMA"]
                await conn.execute(f'LOCK TABLE "{schema}".messages, "{schema}".active_turns, '
                                   f'"{schema}".conversations IN ACCESS EXCLUSIVE MODE')
                ready.set()
                await stop.wait()
        finally:
            await conn.close()

    loop = asyncio.new_event_loop()
    stop, ready = asyncio.Event(), asyncio.Event()
    task_done = threading.Event()

    def run() -> None:
        try:
            loop.run_until_complete(hold(stop, ready))
        finally:
            task_done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not ready.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.is_set(), "could not lock the tables"
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        task_done.wait(10)
        thread.join(10)
        loop.close()
