"""Injects reach a running turn from any worker process, in ReAct and in DAG mode.

Two ``ctxstack serve`` processes share one database (PostgreSQL, own schema) — or one
SQLite file plus Redis for the queue. A turn runs on the first; the inject is sent to the
second; the agent on the first must see it at its next iteration, and the stored
conversation must keep it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxstack.dag import _prompts as dag_prompts
from ctxstack.llm.stub import StubServer
from tests.service_support import (
    ServiceRule,
    SSEEvent,
    llm_env,
    redis_url_or_skip,
    running_server,
    sse_events,
)

PG_URL = os.environ.get("CTXSTACK_TEST_POSTGRES_URL",
                        "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
INJECT = "Also convert the result to hexadecimal, please."


async def _pg(statement: str) -> None:
    import asyncpg

    dsn = PG_URL.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
def pg_schema() -> Iterator[str]:
    schema = f"svc_{secrets.token_hex(6)}"
    try:
        asyncio.run(_pg(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # unreachable server, driver refused, …
        message = f"PostgreSQL at {PG_URL} is not reachable ({exc}); start it to run this test"
        if os.environ.get("CTXSTACK_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    yield schema
    asyncio.run(_pg(f'DROP SCHEMA "{schema}" CASCADE'))


@pytest.fixture
def redis_url() -> str:
    return redis_url_or_skip()


@pytest.fixture
def stub() -> Iterator[tuple[StubServer, ServiceRule]]:
    # The agent's first call (the tool call) is slow, so the turn is surely running when
    # the inject is sent, and the inject is picked up before its next call.
    rule = ServiceRule(tool_delay=2.0)
    with StubServer(rule=rule) as server:
        yield server, rule


def _inject_across_processes(workdir: Path, env: dict[str, str], stub: StubServer,
                             mode: str = "react") -> None:
    """Two service processes on one store: a turn runs on the first, the inject is sent to
    the second and must reach the turn."""
    with running_server(workdir, env) as first, running_server(workdir, env) as second, \
            httpx.Client(base_url=first.url, timeout=30) as a, \
            httpx.Client(base_url=second.url, timeout=30) as b:
        cid = a.post("/api/conversations", json={}).json()["id"]
        # Both processes act as the same local user over the same database.
        assert b.get(f"/api/conversations/{cid}").status_code == 200
        assert b.post("/api/chat/inject", json={"conversation_id": cid, "text": INJECT}
                      ).status_code == 409
        events: list[SSEEvent] = []
        opened = threading.Event()

        def run_turn() -> None:
            with a.stream("POST", "/api/chat", json={"conversation_id": cid, "mode": mode,
                                                      "query": "What is 6*7?"}) as response:
                assert response.status_code == 200
                opened.set()
                events.extend(e for e in sse_events(response)
                              if isinstance(e, SSEEvent))

        thread = threading.Thread(target=run_turn)
        thread.start()
        assert opened.wait(15), first.log()
        sent = b.post("/api/chat/inject", json={"conversation_id": cid, "text": INJECT})
        assert sent.status_code == 202, sent.text
        thread.join(60)
        assert not thread.is_alive()

        names = [e.event for e in events]
        assert names[-1] == "done", (names, first.log())
        injects = [e.data for e in events if e.event == "inject"]
        assert injects == [{"text": INJECT, "consumed": True}], (names, first.log())
        # The agent saw the inject in its context on the following call.
        assert any(any(m.text == INJECT and m.role == "user" for m in r.messages)
                   for r in stub.requests), "the model never saw the injected message"
        stored = a.get(f"/api/conversations/{cid}/messages").json()
        assert [(m["role"], m["kind"]) for m in stored] == [
            ("user", "query"), ("user", "inject"), ("assistant", None)]
        assert stored[1]["content"] == INJECT
        assert [e["event"] for e in stored[2]["events"]].count("inject") == 1
        # The turn is over: injects are refused again, on both processes.
        for client in (a, b):
            assert client.post("/api/chat/inject", json={"conversation_id": cid,
                                                         "text": "late"}).status_code == 409


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["react", "dag"])
def test_inject_reaches_a_turn_on_another_process_via_postgres(
    mode: str, pg_schema: str, stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, _ = stub
    env = llm_env(server, CTXSTACK_DATABASE_URL=PG_URL, CTXSTACK_DATABASE_SCHEMA=pg_schema)
    _inject_across_processes(tmp_path, env, server, mode)


def test_inject_reaches_a_turn_on_another_process_via_redis(
    redis_url: str, stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, _ = stub
    _inject_across_processes(tmp_path, llm_env(server, CTXSTACK_REDIS_URL=redis_url), server)


# ---------------------------------------------------------------------- DAG mode
def _dag_turn_with_inject(client: httpx.Client, cid: str,
                          send_when: Callable[[SSEEvent], bool]) -> list[SSEEvent]:
    """Run a DAG turn; send INJECT (once) right after the first event matching
    ``send_when``; return every event of the turn."""
    events: list[SSEEvent] = []
    sent = False
    body = {"conversation_id": cid, "query": "What is 6*7?", "mode": "dag"}
    with client.stream("POST", "/api/chat", json=body, timeout=60) as response:
        assert response.status_code == 200
        for item in sse_events(response):
            if not isinstance(item, SSEEvent):
                continue
            events.append(item)
            if not sent and send_when(item):
                posted = client.post("/api/chat/inject",
                                     json={"conversation_id": cid, "text": INJECT})
                assert posted.status_code == 202, posted.text
                sent = True
    assert sent, [e.event for e in events]
    return events


def _requests_of(stub: StubServer, role: str) -> list[list[Any]]:
    return [r.messages for r in stub.requests
            if r.messages and r.messages[0].role == "system"
            and r.messages[0].text.startswith(role)]


def test_inject_reaches_a_running_dag_step_the_analyzer_and_the_synthesis(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, _ = stub
    with running_server(tmp_path, llm_env(server)) as app, \
            httpx.Client(base_url=app.url, timeout=30) as client:
        cid = client.post("/api/conversations", json={}).json()["id"]
        # The step's first model call (its tool call) takes 2 s: inject while it runs.
        events = _dag_turn_with_inject(client, cid, lambda e: (
            e.event == "step" and e.data.get("kind") == "dag_step"
            and e.data.get("status") == "running"))
        names = [e.event for e in events]
        assert names[-1] == "done", (names, app.log())
        injects = [e.data for e in events if e.event == "inject"]
        assert injects == [{"text": INJECT, "consumed": True}], (names, app.log())
        assert names.index("inject") < names.index("answer")
        # The running step agent got it in its context (pinned user message) ...
        steps = _requests_of(server, dag_prompts.STEP_ROLE)
        assert any(any(m.role == "user" and m.text == INJECT for m in r) for r in steps), \
            "the step agent never saw the injected message"
        # ... and the analyzer and the synthesis read it with the request.
        for role in (dag_prompts.ANALYZER_ROLE, dag_prompts.SYNTHESIS_ROLE):
            (request,) = _requests_of(server, role)
            assert INJECT in "\n".join(m.text for m in request if m.role == "user"), role
        stored = client.get(f"/api/conversations/{cid}/messages").json()
        assert [(m["role"], m["kind"]) for m in stored] == [
            ("user", "query"), ("user", "inject"), ("assistant", None)]
        assert stored[1]["content"] == INJECT
        assert [e["event"] for e in stored[2]["events"]].count("inject") == 1


def test_inject_during_dag_synthesis_is_kept_for_the_next_turn(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, rule = stub
    rule.tool_delay = 0.0
    rule.stream_delay = 2.0  # the synthesis call is slow: inject while it runs
    with running_server(tmp_path, llm_env(server)) as app, \
            httpx.Client(base_url=app.url, timeout=30) as client:
        cid = client.post("/api/conversations", json={}).json()["id"]
        # The analysis event goes out just before the engine starts the synthesis.
        events = _dag_turn_with_inject(client, cid, lambda e: (
            e.event == "step" and e.data.get("kind") == "analysis"))
        names = [e.event for e in events]
        assert names[-1] == "done", (names, app.log())
        injects = [e.data for e in events if e.event == "inject"]
        assert injects == [{"text": INJECT, "consumed": False}], (names, app.log())
        (synthesis,) = _requests_of(server, dag_prompts.SYNTHESIS_ROLE)
        assert all(INJECT not in m.text for m in synthesis)
        stored = client.get(f"/api/conversations/{cid}/messages").json()
        assert [(m["role"], m["kind"]) for m in stored] == [
            ("user", "query"), ("assistant", None), ("user", "inject")]
        assert stored[2]["content"] == INJECT
