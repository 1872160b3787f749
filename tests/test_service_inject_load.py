"""Load with faults (issue 30, item 4): 2 workers, 10 streaming clients for ~40 s, each
sending questions and an inject during every turn, while one worker is killed (``kill -9``)
and the database is cut for a few seconds. Afterwards every question the service accepted
(200) and every inject it accepted (202) must be stored exactly once, in the order sent —
0 lost, 0 duplicated, 0 misordered — and every question must have an answer or a recorded
outcome after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability_support import (
    BACKENDS,
    database_cut,
    database_env,
)
from tests.service_support import new_conversation, running_server, sse_events, stored

CLIENTS = 10
DURATION = 40.0
KILL_AT = 12.0
CUT_AT = 24.0
CUT_SECONDS = 4.0


@dataclass
class Client:
    """One client's conversation and what the service accepted from it, in order."""

    index: int
    conversation_id: str
    questions: list[str] = field(default_factory=list)
    injects: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _workers(supervisor: int) -> list[int]:
    """uvicorn's worker processes (children started by multiprocessing's spawn)."""
    out = []
    for line in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{line}/cmdline").read_bytes():
                out.append(int(line))
    return out


def _one_turn(http: httpx.Client, client: Client, n: int) -> None:
    query = f"c{client.index} question {n}"
    inject = f"c{client.index} inject {n}"
    body = {"conversation_id": client.conversation_id, "query": query}
    try:
        with http.stream("POST", "/api/chat", json=body, timeout=60) as response:
            if response.status_code != 200:
                response.read()
                time.sleep(0.3)  # busy (the last turn's claim), or the database is cut
                return
            client.questions.append(query)
            sent = False
            for item in sse_events(response):
                if not sent and getattr(item, "event", None) in ("step", "context", "answer"):
                    sent = True
                    r = http.post("/api/chat/inject", timeout=30, json={
                        "conversation_id": client.conversation_id, "text": inject})
                    if r.status_code == 202:
                        client.injects.append(inject)
    except httpx.HTTPError:
        time.sleep(0.3)  # the worker died under the stream, or the answer never came


def _run_client(url: str, client: Client, until: float) -> None:
    with httpx.Client(base_url=url) as http:
        n = 0
        while time.monotonic() < until:
            _one_turn(http, client, n)
            n += 1


def _final_turn(url: str, client: Client) -> None:
    """One more turn after the faults, so injects left by a failed turn are adopted."""
    query = f"c{client.index} final"
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, timeout=60) as http:
        while time.monotonic() < deadline:
            body = {"conversation_id": client.conversation_id, "query": query}
            with contextlib.suppress(httpx.HTTPError), http.stream(
                    "POST", "/api/chat", json=body) as response:
                if response.status_code == 200:
                    client.questions.append(query)
                    for _ in response.iter_lines():
                        pass
                    return
                response.read()
            time.sleep(0.5)
    client.problems.append("the final turn was never accepted")


def _check(client: Client, rows: list[dict[str, Any]]) -> list[str]:
    problems = list(client.problems)
    contents = [r["content"] for r in rows]
    for kind, sent in (("question", client.questions), ("inject", client.injects)):
        for text in sent:
            count = contents.count(text)
            if count != 1:
                problems.append(f"{kind} {text!r} stored {count} times")
        positions = [contents.index(t) for t in sent if t in contents]
        if positions != sorted(positions):
            problems.append(f"{kind}s of c{client.index} stored out of order")
    for text in client.injects:  # after the question it was sent during
        question = text.replace(" inject ", " question ")
        if question in contents and text in contents and (
                contents.index(text) < contents.index(question)):
            problems.append(f"{text!r} stored before its question")
    queries = [i for i, r in enumerate(rows) if r["role"] == "user" and r.get("kind") == "query"]
    for a, b in zip(queries, [*queries[1:], len(rows)], strict=True):
        answers = [r for r in rows[a + 1:b] if r["role"] == "assistant"]
        if len(answers) != 1:
            problems.append(f"question {rows[a]['content']!r} has {len(answers)} answers")
    return problems


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_with_a_kill_and_a_database_cut_loses_no_accepted_message(
        backend: str, tmp_path: Path) -> None:
    with database_env(backend, tmp_path) as db:
        env = {**db, "CTXSTACK_DEMO_DELAY": "0.4", "CTXSTACK_DEMO_CHUNK_DELAY": "0.02",
               "CTXSTACK_TURN_LEASE": "2", "CTXSTACK_DB_STATEMENT_TIMEOUT": "2"}
        with running_server(tmp_path, env, workers=2, startup_timeout=90) as server:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                clients = [Client(i, new_conversation(http)) for i in range(CLIENTS)]
            start = time.monotonic()
            threads = [threading.Thread(target=_run_client,
                                        args=(server.url, c, start + DURATION))
                       for c in clients]
            for t in threads:
                t.start()
            time.sleep(KILL_AT)
            workers = _workers(server.proc.pid)
            assert len(workers) == 2, workers
            os.kill(workers[0], signal.SIGKILL)
            time.sleep(max(0.0, start + CUT_AT - time.monotonic()))
            with database_cut(backend, db, tmp_path):
                time.sleep(CUT_SECONDS)
            for t in threads:
                t.join(timeout=DURATION + 120)
            time.sleep(2.5)  # claims a failed release left expire with their lease
            for c in clients:
                _final_turn(server.url, c)
            problems: list[str] = []
            with httpx.Client(base_url=server.url, timeout=30) as http:
                for c in clients:
                    problems += _check(c, stored(http, c.conversation_id))
        accepted = sum(len(c.questions) for c in clients)
        injected = sum(len(c.injects) for c in clients)
        assert accepted > 3 * CLIENTS, (accepted, injected)
        assert injected > CLIENTS, (accepted, injected)
        assert problems == [], problems[:20]
