"""Concurrency against the real server (issue 15, failures 1 and 2), SQLite and PostgreSQL.

* Five clients hammer one conversation, retrying on 409: every stored question is
  followed by its own answer — the claim is released only after the answer is committed.
* ``kill -9`` mid-turn: the restarted server takes the dead process's claim over at once
  (the lease is set to 10 minutes here, so only the holder check can explain it), and the
  conversation can be deleted too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.reliability_support import BACKENDS, database_env, turn
from tests.service_support import new_conversation, running_server, start_server, stored

CLIENTS = 5
TURNS_EACH = 5


def _client_loop(url: str, cid: str, name: str, errors: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(TURNS_EACH):
            query = f"Question {name}-{i}: what is {i} + 1?"
            for _attempt in range(2000):
                try:
                    turn(client, cid, query)
                    break
                except AssertionError as exc:
                    if "409" not in str(exc):
                        errors.append(f"{name}: {exc}")
                        return
                    time.sleep(0.02)
            else:
                errors.append(f"{name}: never got a turn")
                return


@pytest.mark.parametrize("backend", BACKENDS)
def test_clients_retrying_on_409_never_interleave_turns(backend: str, tmp_path: Path) -> None:
    with database_env(backend, tmp_path) as db, running_server(
            tmp_path, {**db, "CTXSTACK_DEMO_DELAY": "0.005",
                       "CTXSTACK_DEMO_CHUNK_DELAY": "0"}) as server:
        with httpx.Client(base_url=server.url) as client:
            cid = new_conversation(client)
        errors: list[str] = []
        threads = [threading.Thread(target=_client_loop, args=(server.url, cid, f"W{n}", errors))
                   for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert errors == []
        with httpx.Client(base_url=server.url) as client:
            rows = stored(client, cid)
    assert len(rows) == 2 * CLIENTS * TURNS_EACH
    for question, answer in zip(rows[0::2], rows[1::2], strict=True):
        assert question["role"] == "user", (question["seq"], question["content"])
        assert answer["role"] == "assistant", (answer["seq"], answer["content"])
        assert answer["status"] == "ok"
        # The demo model quotes the question it answered: it must be the one just before.
        assert question["content"] in answer["content"], (question["seq"], answer["seq"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_mid_turn_the_restarted_server_takes_over_at_once(
    backend: str, tmp_path: Path
) -> None:
    with database_env(backend, tmp_path) as db:
        slow = {**db, "CTXSTACK_DEMO_DELAY": "120", "CTXSTACK_TURN_LEASE": "600"}
        first = start_server(tmp_path, slow)
        try:
            with httpx.Client(base_url=first.url, timeout=30) as client:
                cid = new_conversation(client)
                body = {"conversation_id": cid, "query": "A slow question"}
                stream = client.stream("POST", "/api/chat", json=body)
                response = stream.__enter__()
                assert response.status_code == 200
                busy = client.post("/api/chat", json={"conversation_id": cid, "query": "again"})
                assert busy.status_code == 409
                first.kill_9(stream)
        finally:
            first.stop()
        fast = {**db, "CTXSTACK_DEMO_DELAY": "0.005", "CTXSTACK_TURN_LEASE": "600"}
        with running_server(tmp_path, fast) as second, httpx.Client(
                base_url=second.url, timeout=60) as client:
            events = turn(client, cid, "Are you back?")  # accepted at once, not after 600 s
            assert events[-1].event == "done"
            rows = stored(client, cid)
            assert [r["content"] for r in rows if r["role"] == "user"] == [
                "A slow question", "Are you back?"]
            assert client.delete(f"/api/conversations/{cid}").status_code == 204
