"""Accepted injects are never lost (issue 30, item 4), against real servers:

* ``kill -9`` of the worker right after its turn read an inject: the restarted server's
  next turn of the conversation gets the inject, and the killed turn's question gets a
  recorded outcome (an "interrupted" answer), not a bare user message;
* the database cut right after a turn read an inject (its tables locked until the turn's
  save times out): the same once the database is back.

Both on SQLite and PostgreSQL, with the database queue and (``kill -9``) with Redis.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability_support import (
    BACKENDS,
    database_cut,
    database_env,
)
from tests.reliability_support import turn as run_turn
from tests.service_support import (
    new_conversation,
    redis_url_or_skip,
    running_server,
    start_server,
    stored,
)

INJECT = "Also mention the blue notebook, please."


def _open_turn(client: httpx.Client, cid: str, query: str) -> tuple[Any, httpx.Response]:
    stream = client.stream("POST", "/api/chat", json={"conversation_id": cid, "query": query})
    response = stream.__enter__()
    assert response.status_code == 200
    return stream, response


def _inject(client: httpx.Client, cid: str) -> None:
    deadline = time.monotonic() + 20
    while True:  # the turn's claim may not be visible for a moment
        r = client.post("/api/chat/inject", json={"conversation_id": cid, "text": INJECT})
        if r.status_code == 202 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 202, r.text


def _check_recovered(rows: list[dict[str, Any]], first: str, second: str) -> None:
    """The first question has an outcome, the inject is stored exactly once (with the next
    turn), nothing is out of order."""
    roles = [(r["role"], r["content"]) for r in rows]
    questions = [c for role, c in roles if role == "user" and c in (first, second)]
    assert questions == [first, second], roles
    i = next(k for k, r in enumerate(rows) if r["content"] == first)
    assert rows[i + 1]["role"] == "assistant", roles  # not a bare question
    assert rows[i + 1]["status"] == "failed", rows[i + 1]
    assert [r["content"] for r in rows].count(INJECT) == 1, roles
    j = next(k for k, r in enumerate(rows) if r["content"] == INJECT)
    assert j > next(k for k, r in enumerate(rows) if r["content"] == second)
    assert rows[-1]["role"] == "assistant", roles[-3:]
    assert rows[-1]["status"] == "ok", roles[-3:]


@pytest.fixture(params=["db", "redis"])
def queue_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "db":
        yield {}
    else:
        yield {"CTXSTACK_REDIS_URL": redis_url_or_skip()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_after_a_turn_read_an_inject_loses_nothing(
        backend: str, queue_env: dict[str, str], tmp_path: Path) -> None:
    with database_env(backend, tmp_path) as db:
        slow = {**db, **queue_env, "CTXSTACK_DEMO_DELAY": "120", "CTXSTACK_TURN_LEASE": "3"}
        first = start_server(tmp_path, slow)
        try:
            with httpx.Client(base_url=first.url, timeout=30) as client:
                cid = new_conversation(client)
                stream, _response = _open_turn(client, cid, "A slow question")
                _inject(client, cid)
                time.sleep(1.5)  # the worker's poller takes it (every 0.25 s)
                first.kill_9(stream)
        finally:
            first.stop()
        time.sleep(3.5)  # the Redis claim's lease runs out (the database one: dead pid)
        fast = {**db, **queue_env, "CTXSTACK_DEMO_DELAY": "0.3", "CTXSTACK_TURN_LEASE": "3"}
        with running_server(tmp_path, fast) as second, httpx.Client(
                base_url=second.url, timeout=60) as client:
            events = run_turn(client, cid, "Are you back?")
            assert events[-1].event == "done", events
            _check_recovered(stored(client, cid), "A slow question", "Are you back?")


@pytest.mark.parametrize("backend", BACKENDS)
def test_database_cut_after_a_turn_read_an_inject_loses_nothing(
        backend: str, tmp_path: Path) -> None:
    with database_env(backend, tmp_path) as db:
        # The statement timeout is how long the cut turn's save waits for the locked
        # tables. On PostgreSQL it also bounds every statement of the next turn, commit
        # included, so it is kept well above what one takes on a loaded host (at 1 s, one
        # full-suite run on two cores saw the next turn end in an error). On SQLite it is
        # only the wait for another process's lock (this server's writers queue in
        # process), and each of the save's retries waits it out: 1 s keeps the test short.
        timeout = "3" if backend == "postgres" else "1"
        env = {**db, "CTXSTACK_DEMO_DELAY": "2", "CTXSTACK_DB_STATEMENT_TIMEOUT": timeout,
               "CTXSTACK_TURN_LEASE": "3"}
        with running_server(tmp_path, env) as server, httpx.Client(
                base_url=server.url, timeout=60) as client:
            cid = new_conversation(client)
            stream, response = _open_turn(client, cid, "A question before the cut")
            _inject(client, cid)
            time.sleep(1.0)  # taken by the turn, which is still waiting for its model
            with database_cut(backend, db, tmp_path):
                # the turn ends while the database refuses its save
                lines = list(response.iter_lines())
                stream.__exit__(None, None, None)
            assert any("error" in line for line in lines), lines[-5:]
            # its claim could not be released either: it expires with the lease
            time.sleep(3.5)
            events = run_turn(client, cid, "And after it?")
            assert events[-1].event == "done", (events[-1], server.log())
            _check_recovered(stored(client, cid), "A question before the cut", "And after it?")
