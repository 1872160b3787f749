"""Resumable streams over real HTTP (issue 31, item 2): a client that drops the
connection mid-answer resumes with ``Last-Event-ID`` and gets exactly the rest — on
SQLite, on PostgreSQL, and from a second ``ctxstack serve`` process sharing PostgreSQL
(with and without Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import EventSource

from ctxstack.llm.stub import StubServer
from tests.service_support import ServerProcess, ServiceRule, llm_env, start_server
from tests.test_server_injects import PG_URL, pg_schema, redis_url  # noqa: F401 (fixtures)

ANSWER = " ".join(f"word{i}" for i in range(120))


@pytest.fixture
def stub() -> Iterator[tuple[StubServer, ServiceRule]]:
    rule = ServiceRule(answer=ANSWER, chunk_size=6, chunk_delay=0.03)
    with StubServer(rule=rule) as server:
        yield server, rule


def frames(response: httpx.Response) -> Iterator[tuple[str | None, str, str]]:
    """(id, event, data) of each frame (keep-alive comments are not frames)."""
    for sse in EventSource(response).iter_sse():
        if sse.data:  # see tests.service_support.sse_events
            yield sse.id or None, sse.event, sse.data


def drop_then_resume(first: ServerProcess, second: ServerProcess) -> None:
    import json

    with httpx.Client(base_url=first.url, timeout=30) as a, \
            httpx.Client(base_url=second.url, timeout=30) as b:
        cid = a.post("/api/conversations", json={}).json()["id"]
        seen: list[tuple[str | None, str, str]] = []
        with a.stream("POST", "/api/chat", json={"conversation_id": cid,
                                                 "query": "Count."}) as response:
            assert response.status_code == 200
            for item in frames(response):
                seen.append(item)
                if sum(1 for _, e, _ in seen if e == "answer") == 4:
                    break  # the connection drops mid-answer
        last_id = seen[-1][0]
        assert last_id is not None
        assert last_id.count(".") == 1
        rest: list[tuple[str | None, str, str]] = []
        with b.stream("GET", f"/api/conversations/{cid}/stream",
                      headers={"Last-Event-ID": last_id}) as response:
            assert response.status_code == 200, response.read()
            rest.extend(frames(response))
        ids = [int(str(i).rsplit(".", 1)[1]) for i, _, _ in seen + rest]
        assert ids == list(range(1, len(ids) + 1)), "no event lost or repeated"
        assert rest[-1][1] == "done"
        answer = "".join(json.loads(d)["delta"] for _, e, d in seen + rest if e == "answer")
        assert answer == ANSWER
        # A reader from the start (a reload) gets the whole turn, also after it ended.
        with b.stream("GET", f"/api/conversations/{cid}/stream",
                      headers={"Last-Event-ID": f"{last_id.split('.')[0]}.0"}) as response:
            assert [e for _, e, _ in frames(response)][-1] == "done"
        # Nothing running: nothing to resume.
        assert b.get(f"/api/conversations/{cid}/stream").status_code == 204
        stored = a.get(f"/api/conversations/{cid}/messages").json()
        assert stored[-1]["status"] == "ok"
        assert stored[-1]["content"] == ANSWER


def test_resume_with_last_event_id_on_sqlite(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server = start_server(tmp_path, llm_env(stub[0]))
    try:
        drop_then_resume(server, server)
    finally:
        server.stop()


def test_resume_with_last_event_id_on_postgres(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path, pg_schema: str  # noqa: F811
) -> None:
    env = llm_env(stub[0], CTXSTACK_DATABASE_URL=PG_URL, CTXSTACK_DATABASE_SCHEMA=pg_schema)
    server = start_server(tmp_path, env)
    try:
        drop_then_resume(server, server)
    finally:
        server.stop()


@pytest.mark.parametrize("with_redis", [False, True], ids=["postgres", "postgres+redis"])
def test_resume_on_another_server_process(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path, pg_schema: str,  # noqa: F811
    with_redis: bool, request: pytest.FixtureRequest,
) -> None:
    env = llm_env(stub[0], CTXSTACK_DATABASE_URL=PG_URL, CTXSTACK_DATABASE_SCHEMA=pg_schema)
    if with_redis:
        env["CTXSTACK_REDIS_URL"] = request.getfixturevalue("redis_url")
    first = start_server(tmp_path, env)
    try:
        second = start_server(tmp_path, env)
        try:
            drop_then_resume(first, second)
        finally:
            second.stop()
    finally:
        first.stop()


def test_stop_from_another_process_and_unknown_ids(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path, pg_schema: str  # noqa: F811
) -> None:
    env = llm_env(stub[0], CTXSTACK_DATABASE_URL=PG_URL, CTXSTACK_DATABASE_SCHEMA=pg_schema)
    stub[1].chunk_delay = 0.1
    first = start_server(tmp_path, env)
    try:
        second = start_server(tmp_path, env)
        try:
            with httpx.Client(base_url=first.url, timeout=30) as a, \
                    httpx.Client(base_url=second.url, timeout=30) as b:
                cid = a.post("/api/conversations", json={}).json()["id"]
                assert b.post(f"/api/conversations/{cid}/stop").status_code == 409
                with a.stream("POST", "/api/chat", json={"conversation_id": cid,
                                                         "query": "Count."}) as response:
                    events = []
                    for _, event, _ in frames(response):
                        events.append(event)
                        if event == "answer" and events.count("answer") == 2:
                            assert b.post(f"/api/conversations/{cid}/stop").status_code == 202
                    assert events[-1] == "error"
                stored = a.get(f"/api/conversations/{cid}/messages").json()
                assert stored[-1]["status"] == "stopped"
                bad = b.get(f"/api/conversations/{cid}/stream",
                            headers={"Last-Event-ID": "nothex.12"})
                assert bad.status_code == 204
                other = b.get("/api/conversations/" + "0" * 32 + "/stream")
                assert other.status_code == 404
        finally:
            second.stop()
    finally:
        first.stop()
