"""More than one host (issue 31, item 3): two ``ctxstack serve`` processes on different
ports, sharing PostgreSQL (a schema of their own) and Redis (a database of their own),
with one conversation's requests alternating between them, behave as one service:

* turns never interleave — a question sent to the other host while a turn runs is
  answered 409 (the documented answer, :mod:`ctxstack.server.lifecycle`), and two
  drivers hammering one conversation through both hosts store every answer right after
  its own question;
* an inject sent to one host reaches the turn running on the other;
* a stream started on one host resumes on the other with ``Last-Event-ID`` and goes on
  live there;
* ``kill -9`` of a host mid-turn loses nothing: once its lease expires the other host
  takes the conversation, the killed turn's question has a recorded outcome, the inject
  it had taken is stored with the next turn, and the conversation goes on.

The model is the stub with :class:`~tests.two_host_support.HoldingRule`: a turn is held
open until an inject releases it, so no step depends on the machine's speed.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from tests.reliability_support import database_env
from tests.service_support import ServerProcess, llm_env, redis_url_or_skip, start_server
from tests.test_server_streams import frames
from tests.two_host_support import (
    HOLD,
    RELEASE,
    Frame,
    HoldingRule,
    StreamReader,
    redis_db_url,
    wait_until,
)

pytestmark = pytest.mark.postgres

REDIS_DB = 5
"""The Redis database the two hosts share (other tests use 0)."""
LEASE_SECONDS = 3
"""A turn's lease: how long a killed host's claim blocks the conversation."""


@pytest.fixture(scope="module")
def stub() -> Iterator[StubServer]:
    with StubServer(rule=HoldingRule(), max_recorded=40) as server:
        yield server


@pytest.fixture(scope="module")
def host_env(stub: StubServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, str]]:
    """What both hosts are started with: the stub model, a fresh PostgreSQL schema, a
    Redis database of this test's own, a short lease."""
    workdir = tmp_path_factory.mktemp("two-hosts")
    redis = redis_db_url(redis_url_or_skip(), REDIS_DB)
    with database_env("postgres", workdir) as db:
        yield llm_env(stub, **db, CTXSTACK_REDIS_URL=redis,
                      CTXSTACK_TURN_LEASE=str(LEASE_SECONDS),
                      CTXSTACK_MAX_ITERATIONS="400", CTXSTACK_STREAM_RETENTION="600",
                      CTXSTACK_FILES_DIR=str(workdir / "files"))


@pytest.fixture(scope="module")
def cluster(host_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[list[ServerProcess]]:
    """Hosts A and B, and a third one the kill test kills, started together (they all
    migrate the fresh schema at once, as hosts deployed together do)."""
    workdirs = [tmp_path_factory.mktemp(f"host-{name}") for name in ("a", "b", "victim")]
    with ThreadPoolExecutor(len(workdirs)) as pool:
        starting = [pool.submit(start_server, w, host_env) for w in workdirs]
    started = [f.result() for f in starting if f.exception() is None]
    try:
        for f in starting:
            f.result()  # the first failure to start, with its log
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def hosts(cluster: list[ServerProcess]) -> tuple[ServerProcess, ServerProcess]:
    """Hosts A and B."""
    return cluster[0], cluster[1]


def _conversation(server: ServerProcess) -> str:
    made = httpx.post(f"{server.url}/api/conversations", json={}, timeout=30)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _stored(server: ServerProcess, cid: str) -> list[dict[str, Any]]:
    rows = httpx.get(f"{server.url}/api/conversations/{cid}/messages", timeout=30)
    assert rows.status_code == 200, rows.text
    result: list[dict[str, Any]] = rows.json()
    return result


def _ask(server: ServerProcess, cid: str, query: str) -> StreamReader:
    return StreamReader(server.url, "POST", "/api/chat",
                        {"json": {"conversation_id": cid, "query": query}})


def _inject(server: ServerProcess, cid: str, text: str) -> httpx.Response:
    return httpx.post(f"{server.url}/api/chat/inject",
                      json={"conversation_id": cid, "text": text}, timeout=30)


def _steps(reader: StreamReader) -> int:
    return reader.events().count("step")


def _consecutive(frames: list[Frame], first: int = 1) -> bool:
    return [f.seq for f in frames] == list(range(first, first + len(frames)))


def _answer_text(frames: list[Frame]) -> str:
    return "".join(f.data["delta"] for f in frames if f.event == "answer")


def test_turns_alternate_between_hosts_without_interleaving_and_injects_cross(
    hosts: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = hosts
    cid = _conversation(a)
    for i, (runs, other) in enumerate([(a, b), (b, a), (a, b)]):
        reader = _ask(runs, cid, f"Q{i}: {HOLD} what is {i}+1?")
        reader.wait_started()
        reader.wait_for(lambda r: _steps(r) >= 2, "the agent's first tool step")
        # The turn is held until released: it surely runs while the other host is asked.
        busy = httpx.post(f"{other.url}/api/chat", timeout=30,
                          json={"conversation_id": cid, "query": f"Q{i}b: interleave?"})
        assert busy.status_code == 409, busy.text
        assert "already running" in busy.text
        assert httpx.delete(f"{other.url}/api/conversations/{cid}", timeout=30
                            ).status_code == 409
        note = f"NOTE {i}: also say hello {RELEASE}"
        sent = _inject(other, cid, note)
        assert sent.status_code == 202, sent.text
        got = reader.join()
        assert got[-1].event == "done", [f.event for f in got]
        assert [f.data for f in got if f.event == "inject"] == [
            {"text": note, "consumed": True}]
        assert _consecutive(got)
        # Over: the turn takes no more injects, on either host.
        for server in (a, b):
            assert _inject(server, cid, "late").status_code == 409
    rows = _stored(b, cid)
    assert [(r["role"], r["kind"]) for r in rows] == [
        ("user", "query"), ("user", "inject"), ("assistant", None)] * 3
    for i in range(3):
        question, note, answer = rows[3 * i:3 * i + 3]
        assert question["content"].startswith(f"Q{i}:")
        assert note["content"].startswith(f"NOTE {i}:")
        assert answer["status"] == "ok"
        assert answer["content"].startswith(f"Answer to Q{i}:")


def test_two_drivers_on_two_hosts_never_run_two_turns_at_once(
    hosts: tuple[ServerProcess, ServerProcess],
) -> None:
    """Each driver sends its questions to its own host, retrying on 409; every stored
    answer follows its own question."""
    cid = _conversation(hosts[0])
    errors: list[str] = []

    def drive(n: int, server: ServerProcess) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for k in range(3):
                body = {"conversation_id": cid, "query": f"Q{10 * n + k}: from host {n}"}
                deadline = time.monotonic() + 90
                while True:
                    with client.stream("POST", "/api/chat", json=body) as response:
                        if response.status_code == 200:
                            events = [e for _, e, _ in frames(response)]
                            if events[-1:] != ["done"]:
                                errors.append(f"driver {n}: {events}")
                            break
                        response.read()
                        if response.status_code != 409 or time.monotonic() > deadline:
                            errors.append(f"driver {n}: {response.status_code} {response.text}")
                            return
                    time.sleep(0.02)

    threads = [threading.Thread(target=drive, args=(n, s)) for n, s in enumerate(hosts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert errors == []
    rows = _stored(hosts[1], cid)
    assert len(rows) == 12
    for question, answer in zip(rows[0::2], rows[1::2], strict=True):
        assert question["role"] == "user", [(r["role"], r["content"][:20]) for r in rows]
        assert answer["role"] == "assistant"
        assert answer["status"] == "ok"
        label = question["content"].split(":", 1)[0]
        assert answer["content"].startswith(f"Answer to {label}:"), (question, answer)


def test_a_stream_started_on_one_host_resumes_on_the_other(
    hosts: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = hosts
    cid = _conversation(a)
    seen: list[Frame] = []
    with httpx.Client(base_url=a.url, timeout=60) as client, client.stream(
            "POST", "/api/chat", json={"conversation_id": cid,
                                       "query": f"Q1: {HOLD} count to three"}) as response:
        assert response.status_code == 200
        for frame_id, event, data in frames(response):
            seen.append(Frame(frame_id, event, json.loads(data)))
            if sum(f.event == "step" for f in seen) >= 4:
                break  # the connection drops mid-turn (a reload, a lost network)
    last = seen[-1]
    # Resumed on the other host after the last event seen; a second tab reloads there.
    resumed = StreamReader(b.url, "GET", f"/api/conversations/{cid}/stream",
                           {"headers": {"Last-Event-ID": str(last.id)}})
    reloaded = StreamReader(b.url, "GET", f"/api/conversations/{cid}/stream")
    for reader in (resumed, reloaded):
        reader.wait_started()
    resumed.wait_for(lambda r: len(r.frames) > 0 or r.finished, "the first resumed event")
    # Still held: what follows is produced after the resumed stream was open on B.
    sent = _inject(b, cid, f"NOTE: that is enough {RELEASE}")
    assert sent.status_code == 202, sent.text
    rest = resumed.join()
    whole = reloaded.join()
    assert _consecutive(seen), "no event lost or repeated"
    assert _consecutive(rest, last.seq + 1), "no event lost or repeated"
    assert {f.turn for f in seen + rest} == {last.turn}
    assert "inject" in [f.event for f in rest], "the stream went on live on the other host"
    assert rest[-1].event == "done"
    assert [(f.id, f.event, f.data) for f in whole] == [
        (f.id, f.event, f.data) for f in seen + rest]
    stored = _stored(a, cid)[-1]
    assert stored["status"] == "ok"
    assert stored["content"] == _answer_text(seen + rest)
    # Ended: nothing to resume any more, on either host.
    for server in (a, b):
        assert httpx.get(f"{server.url}/api/conversations/{cid}/stream",
                         timeout=30).status_code == 204


def test_kill_9_of_a_host_mid_turn_loses_nothing(
    cluster: list[ServerProcess], stub: StubServer,
) -> None:
    _, b, victim = cluster
    try:
        cid = _conversation(victim)
        held = _ask(victim, cid, f"Q1: {HOLD} a long question")
        held.wait_started()
        held.wait_for(lambda r: _steps(r) >= 2, "the agent's first tool step")
        # A second tab follows the turn through the other host.
        watcher = StreamReader(b.url, "GET", f"/api/conversations/{cid}/stream")
        watcher.wait_started()
        assert httpx.post(f"{b.url}/api/chat", timeout=30, json={
            "conversation_id": cid, "query": "Q2: too early"}).status_code == 409
        note = "NOTE: keep the blue notebook"  # accepted on B, taken by the victim's turn
        assert _inject(b, cid, note).status_code == 202
        for reader in (held, watcher):
            reader.wait_for(lambda r: "inject" in r.events(), "the inject reaching the turn")
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait(timeout=30)
    finally:
        victim.stop()
    held.join()
    assert "done" not in held.events()

    # The dead host's claim blocks the conversation until its lease runs out (another
    # host cannot tell a dead process from a slow one), then the other host takes it.
    turns: list[StreamReader] = []

    def accepted() -> bool:
        turns.append(_ask(b, cid, "Q3: are you back?"))
        turns[-1].wait_for(lambda r: r.status is not None, "a response")
        return turns[-1].status != 409

    wait_until(accepted, "the other host to take the conversation over", timeout=60,
               pause=0.5)
    turns[-1].wait_started()
    assert turns[-1].join()[-1].event == "done", turns[-1].events()

    # The second tab's stream ends with the dead turn's outcome instead of hanging, and
    # the outcome is recorded: resuming again gets it at once.
    watched = watcher.join()
    assert _consecutive(watched)
    assert watched[-1].event == "error", [f.event for f in watched]
    assert watched[-1].data["kind"] == "failed"
    assert "interrupted" in watched[-1].data["message"]
    later = StreamReader(b.url, "GET", f"/api/conversations/{cid}/stream",
                         {"headers": {"Last-Event-ID": str(watched[-2].id)}})
    assert [(f.id, f.data) for f in later.join()] == [(watched[-1].id, watched[-1].data)]

    rows = _stored(b, cid)
    contents = [(r["role"], r["content"][:30]) for r in rows]
    assert [r["content"] for r in rows if r["role"] == "user" and r["kind"] == "query"] == [
        "Q1: [hold] a long question", "Q3: are you back?"], contents
    killed = rows[1]
    assert (killed["role"], killed["status"]) == ("assistant", "failed"), contents
    assert killed["content"] == watched[-1].data["message"]  # one outcome, seen alike
    # The inject the killed turn had taken went back to the queue: the new turn read it
    # (stored before its answer) or, when it ended first, stored it after its answer.
    assert [r["content"] for r in rows].count(note) == 1, contents
    assert [(r["role"], r["kind"]) for r in rows[3:]] in (
        [("user", "inject"), ("assistant", None)],
        [("assistant", None), ("user", "inject")]), contents
    answer = next(r for r in rows[3:] if r["role"] == "assistant")
    assert answer["status"] == "ok"
    assert answer["content"].startswith("Answer to Q3:")
    # Usable afterwards, and the model has seen the inject by now.
    again = _ask(b, cid, "Q4: and now?")
    assert again.join()[-1].event == "done"
    assert any(m.role == "user" and m.text == note for r in stub.requests[-3:]
               for m in r.messages), "the inject never reached the model"
    assert httpx.delete(f"{b.url}/api/conversations/{cid}", timeout=30).status_code == 204
