"""Chat turns over real HTTP: a ``ctxstack serve`` process talking to the stub LLM server.

Covers the turn flow of issue 8: ReAct and DAG turns with their event order, usage in
``done`` equal to the sum of what the stub reported for every call of the turn,
compaction on load (``compact`` event with correct counts, the divider text the page
shows; issue 16's exact fields are in tests/test_server_compactions.py), a failing LLM mid-turn, and a client that disconnects mid-answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from tests.service_support import (
    ROOT,
    ServerProcess,
    ServiceRule,
    SSEEvent,
    chat,
    llm_env,
    new_conversation,
    running_server,
    sse_events,
)

LONG_ANSWER = ("Context windows are finite, so older turns must be compacted. " * 40).strip()


@pytest.fixture(scope="module")
def server(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    env = llm_env(stub_server, CTXSTACK_SSE_KEEPALIVE="0.3", CTXSTACK_STREAM_RESUME_GRACE="1")
    with running_server(tmp_path_factory.mktemp("serve"), env) as proc:
        yield proc


def names(events: list[SSEEvent]) -> list[str]:
    return [e.event for e in events]


def answer_text(events: list[SSEEvent]) -> str:
    return "".join(e.data["delta"] for e in events if e.event == "answer")


def messages(client: httpx.Client, conversation_id: str) -> list[dict]:
    response = client.get(f"/api/conversations/{conversation_id}/messages")
    assert response.status_code == 200, response.text
    return list(response.json())


def test_react_turn_streams_steps_then_answer_then_done(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    events = chat(client, cid, "What is 6*7? Use the calculator.")
    order = names(events)
    assert order[-1] == "done", order
    first_answer = order.index("answer")
    steps = [e.data for e in events if e.event == "step"]
    assert [s["kind"] for s in steps] == ["tool_call", "tool_result"]
    assert all(i < first_answer for i, n in enumerate(order) if n == "step")
    assert steps[0]["tool"] == "calculate"
    assert steps[0]["arguments"] == {"expression": "6*7"}
    assert steps[1]["id"] == steps[0]["id"]
    assert "6*7 = 42" in steps[1]["result"]
    assert steps[1]["error"] is False
    assert "compact" not in order  # an empty history needs no compaction

    done = events[-1].data
    assert answer_text(events) == rule.answer == done["answer"]
    assert done["iterations"] >= 2
    assert done["elapsed"] > 0
    # Every LLM call of the turn: tool call, brief answer, streamed synthesis.
    assert rule.kinds == ["tool_call", "brief", "answer"]
    assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == rule.total()

    stored = messages(client, cid)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    user, assistant = stored
    assert user["content"] == "What is 6*7? Use the calculator."
    assert user["kind"] == "query"
    assert assistant["content"] == rule.answer
    assert assistant["status"] == "ok"
    assert assistant["id"] == done["message_id"]
    assert assistant["usage"] == done["usage"]
    stored_names = [e["event"] for e in assistant["events"]]
    # answer deltas are the content; only the last context-meter reading is kept
    assert stored_names == ["step", "step", "context", "done"]
    title = client.get(f"/api/conversations/{cid}").json()["title"]
    assert title == "What is 6*7? Use the calculator."


def test_dag_turn_reports_plan_steps_and_usage(client: httpx.Client, rule: ServiceRule) -> None:
    cid = new_conversation(client)
    events = chat(client, cid, "Work out 6*7 step by step.", mode="dag")
    order = names(events)
    assert order[-1] == "done", order
    steps = [e.data for e in events if e.event == "step"]
    kinds = [s["kind"] for s in steps]
    assert kinds.index("plan") < kinds.index("dag_step")
    statuses = [(s["id"], s["status"]) for s in steps if s["kind"] == "dag_step"]
    assert statuses == [("s1", "running"), ("s1", "done")]
    assert "analysis" in kinds
    assert max(i for i, n in enumerate(order) if n == "step") < order.index("answer")
    done = events[-1].data
    assert done["answer"] == answer_text(events) == rule.answer
    assert done["iterations"] == 1  # one plan→execute→analyze round
    assert "planner" in rule.kinds
    assert "analyzer" in rule.kinds
    assert "tool_call" in rule.kinds
    assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == rule.total()
    assistant = messages(client, cid)[-1]
    assert assistant["mode"] == "dag"
    assert assistant["status"] == "ok"


def _divider_text(compact: dict) -> str | None:
    """What the page's format.js shows for this compact event (None without node)."""
    if shutil.which("node") is None:
        return None
    module = ROOT / "src" / "ctxstack" / "server" / "static" / "format.js"
    script = (f"import {{ dividerText }} from {json.dumps(module.as_uri())};"
              "console.log(dividerText(JSON.parse(process.argv[1])));")
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(compact)],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


def test_compaction_on_load_emits_compact_with_counts(
    client: httpx.Client, rule: ServiceRule
) -> None:
    # A small budget from the admin model config (the first budget source): 4,000 tokens.
    response = client.put("/api/admin/model-configs/main", json={
        "model": "stub-model", "context_size": 8000, "max_output_tokens": 4000})
    assert response.status_code == 200, response.text
    assert response.json()["budget"]["usable_input_tokens"] == 4000
    try:
        rule.answer = LONG_ANSWER
        cid = new_conversation(client)
        compact: SSEEvent | None = None
        turns = 0
        while compact is None and turns < 8:
            rule.reset_usage()
            events = chat(client, cid, f"Question {turns + 1}: tell me more about windows.")
            turns += 1
            assert events[-1].event == "done", names(events)
            found = [e for e in events if e.event == "compact" and e.data["scope"] == "load"]
            if found:
                compact = found[0]
                # reported before the agent starts, right after the summariser's run
                assert [e.event for e in events[:3]] == ["compact_start", "compact_end",
                                                         "compact"]
                assert events[2] is compact
                done = events[-1].data
        assert compact is not None, "history never compacted at a 4,000-token budget"
        history = 2 * (turns - 1)  # user + assistant per earlier turn
        assert compact.data["original_messages"] == history
        assert compact.data["method"] == "llm"
        assert 0 < compact.data["kept_messages"] < history
        assert "summary" in rule.kinds  # the fast model summarised …
        # … and its tokens are part of the turn's usage.
        assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == rule.total()
        stored = messages(client, cid)[-1]
        assert stored["events"][2] == {"event": "compact", "data": compact.data}
        summarized = compact.data["summarized_messages"]
        assert summarized + compact.data["kept_messages"] == history  # none dropped
        text = _divider_text(compact.data)
        if text is not None:
            # the divider counts the messages folded into the summary, not the history
            assert text == f"{summarized} earlier messages summarized by AI"
            trimmed = _divider_text({**compact.data, "method": "truncate", "kept_messages": 3,
                                     "summarized_messages": 0})
            assert trimmed == f"{history - 3} earlier messages trimmed"
            legacy = _divider_text({"original_messages": history, "kept_messages": 4,
                                    "method": "llm"})  # stored before issue 16
            assert legacy == f"Earlier context ({history} messages) was summarized by AI."
    finally:
        client.put("/api/admin/model-configs/main", json={
            "model": "stub-model", "context_size": 128000, "max_output_tokens": 64000})


def test_failing_llm_mid_turn_gives_error_and_a_usable_conversation(
    client: httpx.Client, rule: ServiceRule, stub: StubServer
) -> None:
    cid = new_conversation(client)
    rule.fail_when = lambda kind, request: kind == "brief"
    events = chat(client, cid, "What is 6*7?")
    order = names(events)
    assert order[-1] == "error", order
    assert "done" not in order
    assert [e.data["kind"] for e in events if e.event == "step"] == ["tool_call", "tool_result"]
    error = events[-1].data
    assert error["kind"] == "failed"
    assert error["message"].startswith("The turn failed")
    stored = messages(client, cid)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    failed = stored[-1]
    assert failed["status"] == "failed"
    assert failed["content"].startswith("The turn failed")
    assert [e["event"] for e in failed["events"]][-1] == "error"

    rule.fail_when = None
    before = len(stub.requests)
    events = chat(client, cid, "Try again please.")
    assert events[-1].event == "done", names(events)
    stored = messages(client, cid)
    assert [m["status"] for m in stored if m["role"] == "assistant"] == ["failed", "ok"]
    # The next turn's model saw the failed turn's question, but not the failure notice as
    # something it said itself (issue 15): that text is for the user only.
    first_call = stub.requests[before]
    assert any(m.role == "user" and m.text == "What is 6*7?" for m in first_call.messages)
    assert not any("The turn failed" in m.text for m in first_call.messages)
    assert stub.base_url not in failed["content"]
    assert "127.0.0.1" not in failed["content"]


def test_client_disconnect_stops_the_turn_and_saves_partial_work(
    client: httpx.Client, rule: ServiceRule, server: ServerProcess
) -> None:
    rule.answer = LONG_ANSWER
    rule.chunk_size = 12
    rule.chunk_delay = 0.05
    cid = new_conversation(client)
    received = 0
    with client.stream("POST", "/api/chat", json={"conversation_id": cid, "query": "Go on."},
                       timeout=30) as response:
        assert response.status_code == 200
        for item in sse_events(response):
            if isinstance(item, SSEEvent) and item.event == "answer":
                received += 1
                if received == 5:
                    break  # leaving the block closes the connection mid-answer
    deadline = time.monotonic() + 15
    stored: list[dict] = []
    while time.monotonic() < deadline:
        stored = messages(client, cid)
        if len(stored) == 2:
            break
        time.sleep(0.1)
    assert [m["role"] for m in stored] == ["user", "assistant"], server.log()
    partial = stored[-1]
    assert partial["status"] == "stopped"
    assert partial["content"]
    assert LONG_ANSWER.startswith(partial["content"])
    assert len(partial["content"]) < len(LONG_ANSWER)
    assert partial["events"][-1]["event"] == "error"
    assert partial["events"][-1]["data"]["kind"] == "stopped"
    # The conversation was released: no turn runs, and the next turn works.
    assert client.post("/api/chat/inject", json={"conversation_id": cid, "text": "hi"}
                       ).status_code == 409
    rule.chunk_delay = 0.0
    assert chat(client, cid, "Again.")[-1].event == "done"


def test_second_turn_while_one_runs_is_refused(client: httpx.Client, rule: ServiceRule) -> None:
    rule.tool_delay = 1.0
    cid = new_conversation(client)
    body = {"conversation_id": cid, "query": "slow one"}
    with client.stream("POST", "/api/chat", json=body, timeout=30) as response:
        assert response.status_code == 200
        again = client.post("/api/chat", json={**body, "query": "second"})
        assert again.status_code == 409
        assert "already running" in again.json()["detail"]
        lines = list(response.iter_lines())
    # The quiet second while the slow tool call ran was bridged by keep-alive comments.
    assert ": keep-alive" in lines
    assert [line for line in lines if line.startswith("event:")][-1] == "event: done"
    # Only the first question was stored: a refused turn leaves nothing half-written.
    assert [m["content"] for m in messages(client, cid) if m["role"] == "user"] == ["slow one"]


def test_page_is_served_with_a_strict_policy(client: httpx.Client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("app.js", "markdown.js", "format.js", "sse.js", "style.css", "meter.js",
                  "remember.js", "dagview.js", "settings.js", "turn.js", "dom.js"):
        assert client.get(f"/static/{asset}").status_code == 200, asset
    info = client.get("/api/info").json()
    assert info["demo_model"] is False
    assert info["model"] == "stub-model"
    assert client.get("/openapi.json").json()["paths"]["/api/chat"]
    docs = client.get("/docs")
    assert docs.status_code == 200
    assert "openapi.json" in docs.text
    assert "cdn" not in docs.text.lower()  # works without internet access


def test_openapi_describes_every_sse_event_payload(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    responses = spec["paths"]["/api/chat"]["post"]["responses"]
    stream = responses["200"]["content"]
    assert list(stream) == ["text/event-stream"]
    assert list(responses["404"]["content"]) == ["application/json"]  # errors stay JSON
    schema = stream["text/event-stream"]["schema"]
    assert schema["discriminator"]["propertyName"] == "event"
    mapping = schema["discriminator"]["mapping"]
    assert set(mapping) == {"step", "inject", "compact", "compact_start", "compact_end",
                            "context", "answer", "done", "error"}
    components = spec["components"]["schemas"]

    def resolve(ref: str) -> dict:
        return dict(components[ref.rsplit("/", 1)[-1]])

    for name, ref in mapping.items():
        frame = resolve(ref)
        assert frame["properties"]["event"]["const"] == name
        payload = resolve(frame["properties"]["data"]["$ref"]) if "$ref" in frame[
            "properties"]["data"] else frame["properties"]["data"]
        assert payload, name
    compact = components["CompactData"]["properties"]
    for field in ("original_messages", "kept_messages", "summarized_messages",
                  "cleared_tool_outputs", "first_seq", "last_seq", "summary", "facts"):
        assert field in compact, field
    assert set(components["ContextParts"]["properties"]) == {
        "system", "summary", "history", "tools", "question"}
    step_kinds = components["StepEvent"]["properties"]["data"]["discriminator"]["mapping"]
    assert set(step_kinds) == {"tool_call", "tool_result", "plan", "dag_step", "iteration",
                               "warning", "checklist", "analysis", "note"}
    compactions = spec["paths"]["/api/conversations/{conversation_id}/compactions"]["get"]
    item = compactions["responses"]["200"]["content"]["application/json"]["schema"]["items"]
    assert set(resolve(item["$ref"])["properties"]) == {
        "created_at", "method", "summarized_messages", "first_seq", "last_seq", "summary",
        "facts", "ref", "children", "own_first_seq", "own_last_seq", "own_messages"}
    assert set(components["SummaryChildOut"]["properties"]) == {
        "ref", "first_seq", "last_seq", "messages"}
