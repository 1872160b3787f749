"""The chat service's summary requests reuse the conversation's cached prefix (issue 29
item 3), over real HTTP: a ``ctxstack serve`` process talks to the stub LLM (which records
every request body as sent) with an 8,000-token window, and turns go on until the stored
history is summarised on load. That summary request must begin with exactly the messages
and tools of the previous conversation call (the last ReAct call of the turn before),
byte for byte in the wire form, carry ``tool_choice: "none"`` and end with the summary
instruction. When the stub refuses that request, the transcript request is sent and the
load still summarises."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION, is_summary_instruction
from ctxstack.llm.stub import StubServer
from ctxstack.server.turn import SYSTEM_PROMPT
from tests.service_support import ServiceRule, chat, llm_env, running_server
from tests.test_server_access import make_user

LONG_ANSWER = ("Context windows are finite, so older turns must be compacted. " * 40).strip()
SUMMARY = "The user asked several questions about context windows."


@pytest.fixture
def stub() -> Iterator[tuple[StubServer, ServiceRule]]:
    rule = ServiceRule(answer=LONG_ANSWER, summary=SUMMARY)
    with StubServer(rule=rule) as server:
        yield server, rule


def _is_prefix(body: Mapping[str, Any]) -> bool:
    last = (body.get("messages") or [{}])[-1]
    return last.get("role") == "user" and isinstance(last.get("content"), str) and \
        is_summary_instruction(last["content"])


def _is_transcript(body: Mapping[str, Any]) -> bool:
    first = (body.get("messages") or [{}])[0]
    return first.get("role") == "system" and str(first.get("content", "")).rstrip().endswith(
        LANGUAGE_INSTRUCTION)


def _conversation_call(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(body.get("tools")) and bool(messages) and \
        messages[0].get("content") == SYSTEM_PROMPT and not _is_prefix(body)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _turns_until_load_summary(client: Any, cid: str, times: int = 1) -> None:
    for turn in range(1, 30):
        events = chat(client, cid, f"Question {turn}: tell me more about windows "
                                   f"(ticket TCK-{turn}00).")
        assert events[-1].event == "done", [e.event for e in events]
        if any(e.event == "compact" and e.data["scope"] == "load" for e in events):
            times -= 1
            if not times:
                return
    raise AssertionError("the history never compacted at an 8,000-token window")


def test_the_load_summary_begins_with_the_previous_conversation_call(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, _ = stub
    env = llm_env(server, LLM_CONTEXT_SIZE="8000", LLM_MAX_OUTPUT_TOKENS="4000")
    with running_server(tmp_path, env, auth=True) as proc, make_user(proc, "alice") as alice:
        cid = alice.post("/api/conversations", json={}).json()["id"]
        # the first summary, then one from the checkpoint it left (turns since then
        # offered the recall tool: the request carries it too)
        _turns_until_load_summary(alice, cid, times=2)
    bodies = [r.body for r in server.state.requests]
    summaries = [i for i, b in enumerate(bodies) if _is_prefix(b)]
    assert len(summaries) >= 2
    for at in summaries:
        request = bodies[at]
        previous = next(b for b in reversed(bodies[:at]) if _conversation_call(b))
        head = request["messages"][:-1]
        assert len(head) > 2
        assert _dumps(head) == _dumps(previous["messages"][: len(head)])
        assert _dumps(request["tools"]) == _dumps(previous["tools"])
        assert request["tool_choice"] == "none"
        # the wire form the provider caches: the request's text up to the instruction is
        # a prefix of the previous call's text
        assert _dumps(previous["messages"]).startswith(_dumps(head)[:-1])
    assert any(t["function"]["name"] == "recall" for t in bodies[summaries[-1]]["tools"])


def test_a_refused_prefix_request_falls_back_to_the_transcript(
    stub: tuple[StubServer, ServiceRule], tmp_path: Path
) -> None:
    server, rule = stub
    rule.fail_when = lambda kind, request: kind == "summary" and _is_prefix(request.body)
    env = llm_env(server, LLM_CONTEXT_SIZE="8000", LLM_MAX_OUTPUT_TOKENS="4000")
    with running_server(tmp_path, env, auth=True) as proc, make_user(proc, "alice") as alice:
        cid = alice.post("/api/conversations", json={}).json()["id"]
        _turns_until_load_summary(alice, cid)
        stored = alice.get(f"/api/conversations/{cid}/compactions").json()
    bodies = [r.body for r in server.state.requests]
    at = next(i for i, b in enumerate(bodies) if _is_prefix(b))
    assert any(_is_transcript(b) for b in bodies[at + 1:])
    assert "summary:failed" in rule.kinds
    assert "summary" in rule.kinds
    assert stored
    assert stored[-1]["method"] == "llm"
    assert SUMMARY in stored[-1]["summary"], "the load summarised with the transcript request"
