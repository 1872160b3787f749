"""The fault suite (issue 15): the real server against the real ``ctxstack stub-llm`` with
each fault flag, on SQLite and PostgreSQL.

For every fault: the turn ends (an ``error`` event, or an answer when the fault clears
after N tries) within a bound set by ``LLM_TIMEOUT``; the question is kept; nothing
half-written is stored (a failed turn stores only its failure notice, status "failed");
the notice names no URL, host or port; and the next turn, against a healthy model,
works and does not show the model the failure notice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability_support import (
    BACKENDS,
    StubProcess,
    database_env,
    turn,
)
from tests.service_support import ServerProcess, new_conversation, running_server, stored

LLM_TIMEOUT = "2"
FAULTS = {
    "503": ["--fail-status", "503"],
    "429-retry-after": ["--fail-status", "429", "--retry-after", "1"],
    "hang": ["--hang"],
    "garbage": ["--garbage"],
    "dropped-stream": ["--drop-stream"],
    "overflow": ["--overflow"],
    "500-then-ok": ["--fail-status", "500", "--fail-times", "1"],
}
RECOVERS = {"500-then-ok"}


@pytest.fixture(scope="module", params=BACKENDS)
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[ServerProcess, StubProcess]]:
    workdir = tmp_path_factory.mktemp(f"faults-{request.param}")
    stub = StubProcess(workdir)
    stub.start()
    try:
        with database_env(request.param, workdir) as db, running_server(
                workdir, {**db, **stub.env(LLM_TIMEOUT=LLM_TIMEOUT, FAST_LLM_TIMEOUT=LLM_TIMEOUT,
                                           CTXSTACK_SSE_KEEPALIVE="0.5")}) as server:
            yield server, stub
    finally:
        stub.stop()


def _no_address(text: str, stub: StubProcess) -> None:
    for leak in ("127.0.0.1", str(stub.port), "http://", "/v1"):
        assert leak not in text, f"{leak!r} leaked in {text!r}"


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_model_fault_ends_the_turn_and_the_next_turn_works(
    rig: tuple[ServerProcess, StubProcess], fault: str
) -> None:
    server, stub = rig
    stub.start(*FAULTS[fault])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        cid = new_conversation(client)
        events = turn(client, cid, "What is 6*7?", deadline_s=40)
        last = events[-1]
        rows = stored(client, cid)
        assert rows[0]["role"] == "user"
        assert rows[0]["content"] == "What is 6*7?"
        if fault in RECOVERS:
            assert last.event == "done", [e.event for e in events]
            assert [r["status"] for r in rows[1:]] == ["ok"]
        else:
            assert last.event == "error", [e.event for e in events]
            assert "done" not in [e.event for e in events]
            _no_address(last.data["message"], stub)
            assert [(r["role"], r["status"]) for r in rows] == [("user", None),
                                                               ("assistant", "failed")]
            assert rows[1]["content"].startswith("The turn failed")
            assert "cut off in the middle" not in rows[1]["content"]  # no half answer
            _no_address(rows[1]["content"], stub)

        stub.start()  # healthy: echoes the last user message
        events = turn(client, cid, "And now?", deadline_s=40)
        assert events[-1].event == "done", [e.event for e in events]
        answer = events[-1].data["answer"]
        assert "And now?" in answer
        assert "The turn failed" not in answer  # the model never saw the notice
        rows = stored(client, cid)
        assert rows[-1]["role"] == "assistant"
        assert rows[-1]["status"] == "ok"
        assert [r["role"] for r in rows].count("user") == 2


def test_stub_fault_flags_are_checked(tmp_path: Path) -> None:
    from tests.service_support import clean_env, run_cli

    both = run_cli("stub-llm", "--hang", "--garbage", env=clean_env())
    assert both.returncode != 0
    assert "one fault at a time" in both.stderr
    orphan = run_cli("stub-llm", "--retry-after", "1", env=clean_env())
    assert orphan.returncode != 0
    assert "need a fault flag" in orphan.stderr
