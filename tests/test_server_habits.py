"""Chat habits over real HTTP (issue 31, item 1): regenerate, edit, checkpoint
invalidation, Compact now (preview, then run) and the summarising events — against a
``ctxstack serve`` process and the stub LLM."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from tests.service_support import (
    ServerProcess,
    ServiceRule,
    SSEEvent,
    llm_env,
    new_conversation,
    running_server,
    sse_events,
)

LONG = ("Compaction keeps a long conversation inside the window. " * 60).strip()


@pytest.fixture(scope="module")
def server(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    env = llm_env(stub_server, LLM_CONTEXT_SIZE="2400", LLM_MAX_OUTPUT_TOKENS="400",
                  CTXSTACK_STREAM_RESUME_GRACE="1")
    with running_server(tmp_path_factory.mktemp("habits"), env) as proc:
        yield proc


def stream(client: httpx.Client, method: str, path: str, body: dict | None = None
           ) -> list[SSEEvent]:
    with client.stream(method, path, json=body, timeout=60) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"{path} answered {response.status_code}: {response.text}")
        return list(sse_events(response))


def ask(client: httpx.Client, cid: str, query: str, **extra: object) -> list[SSEEvent]:
    return stream(client, "POST", "/api/chat", {"conversation_id": cid, "query": query, **extra})


def history(client: httpx.Client, cid: str) -> list[dict]:
    response = client.get(f"/api/conversations/{cid}/messages")
    assert response.status_code == 200, response.text
    return list(response.json())


def png() -> bytes:
    import base64

    return base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")


def test_regenerate_replaces_the_last_answer_and_keeps_the_question_and_image(
    client: httpx.Client, rule: ServiceRule, stub: StubServer
) -> None:
    cid = new_conversation(client)
    upload = client.post("/api/files", files={"file": ("dot.png", io.BytesIO(png()), "image/png")})
    assert upload.status_code == 201, upload.text
    file_id = upload.json()["id"]
    rule.answer = "First answer."
    assert ask(client, cid, "Describe the picture.", file_ids=[file_id])[-1].event == "done"
    before = history(client, cid)
    assert [m["role"] for m in before] == ["user", "assistant"]
    rule.answer = "Second answer."
    seen: list[str] = []
    decide = rule.decide

    def recording(request: object) -> object:
        seen.extend(m.text for m in request.messages)  # type: ignore[attr-defined]
        seen.extend("[image]" for m in request.messages  # type: ignore[attr-defined]
                    for p in (m.content if isinstance(m.content, list) else [])
                    if getattr(p, "type", "") == "image_url")
        return decide(request)

    rule.decide = recording  # type: ignore[method-assign]
    events = stream(client, "POST", f"/api/conversations/{cid}/regenerate", {})
    assert events[-1].event == "done", events
    after = history(client, cid)
    # one question (the same row, its image kept), one answer: the new one
    assert [m["role"] for m in after] == ["user", "assistant"]
    assert after[0]["id"] == before[0]["id"]
    assert after[0]["images"] == before[0]["images"] == [
        {"file_id": file_id, "mime_type": "image/png"}]
    assert after[1]["seq"] > before[1]["seq"]
    assert "Second answer." in after[1]["content"]
    # The model saw the question and its image again, never the replaced answer.
    assert "Describe the picture." in seen
    assert "[image]" in seen
    assert not any("First answer." in text for text in seen)


def test_edit_replaces_the_question_and_what_followed(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    assert ask(client, cid, "Question one?")[-1].event == "done"
    assert ask(client, cid, "Question two?")[-1].event == "done"
    first_two = history(client, cid)
    assert len(first_two) == 4
    target = first_two[0]["id"]
    events = stream(client, "POST", f"/api/conversations/{cid}/messages/{target}/edit",
                    {"query": "Question one, edited?"})
    assert events[-1].event == "done"
    rows = history(client, cid)
    assert [(m["role"], m["content"]) for m in rows][:1] == [("user", "Question one, edited?")]
    assert len(rows) == 2  # question two and its answer were replaced too


def test_edit_refuses_an_answer_and_a_foreign_or_missing_message(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    assert ask(client, cid, "Hello?")[-1].event == "done"
    answer = history(client, cid)[1]["id"]
    r = client.post(f"/api/conversations/{cid}/messages/{answer}/edit", json={"query": "x"})
    assert r.status_code == 400
    assert "not a question" in r.json()["detail"]
    r = client.post(f"/api/conversations/{cid}/messages/99999999/edit", json={"query": "x"})
    assert r.status_code == 404
    assert r.json()["detail"]
    r = client.post("/api/conversations/" + "0" * 32 + "/regenerate", json={})
    assert r.status_code == 404
    empty = new_conversation(client)
    r = client.post(f"/api/conversations/{empty}/regenerate", json={})
    assert r.status_code == 400
    assert "no question" in r.json()["detail"]


def test_compact_now_preview_then_run_and_edit_invalidates_the_summary(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    rule.answer = "Short answer."
    for i in range(4):
        assert ask(client, cid, f"Question {i}?")[-1].event == "done"
    preview = client.get(f"/api/conversations/{cid}/compact-preview")
    assert preview.status_code == 200, preview.text
    p = preview.json()
    assert p["messages"] == 4
    assert p["kept_messages"] == 4
    assert p["first_seq"] == 1
    assert p["tokens_before"] > 0
    assert p["estimated_saving"] > 0
    assert p["estimated_tokens_after"] < p["tokens_before"]
    assert p["has_summary"] is False
    assert client.get(f"/api/conversations/{cid}/compactions").json() == []
    run = client.post(f"/api/conversations/{cid}/compact")
    assert run.status_code == 200, run.text
    done = run.json()
    assert done["compact"]["last_seq"] == p["last_seq"]
    assert done["compact"]["summarized_messages"] == 4
    listed = client.get(f"/api/conversations/{cid}/compactions").json()
    assert [c["last_seq"] for c in listed] == [p["last_seq"]]
    # Editing a question the summary covers drops the summary.
    first = history(client, cid)[0]["id"]
    events = stream(client, "POST", f"/api/conversations/{cid}/messages/{first}/edit",
                    {"query": "A new start?"})
    assert events[-1].event == "done"
    assert client.get(f"/api/conversations/{cid}/compactions").json() == []
    # Nothing to summarise in a short conversation: 400 with the house's shape.
    r = client.post(f"/api/conversations/{cid}/compact")
    assert r.status_code == 400
    assert "nothing to summarise" in r.json()["detail"]


def test_a_load_compaction_is_bracketed_by_summarising_events(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    rule.answer = LONG
    names: list[str] = []
    for i in range(10):
        events = ask(client, cid, f"Tell me more, part {i}.")
        assert events[-1].event == "done"
        names = [e.event for e in events]
        if "compact" in names:
            break
    assert "compact_start" in names, names
    assert "compact_end" in names, names
    assert names.index("compact_start") < names.index("compact_end") < names.index("compact")
    spec = client.get("/openapi.json").json()["components"]["schemas"]
    assert "CompactStartData" in spec
    assert "CompactEndData" in spec


def test_busy_conversation_answers_409_to_regenerate_edit_and_compact(
    client: httpx.Client, rule: ServiceRule
) -> None:
    cid = new_conversation(client)
    assert ask(client, cid, "Hi?")[-1].event == "done"
    first = history(client, cid)[0]["id"]
    rule.tool_delay = 2.0
    with client.stream("POST", "/api/chat", json={"conversation_id": cid, "query": "Slow?"},
                       timeout=30) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        next(lines)
        for path, body in ((f"/api/conversations/{cid}/regenerate", {}),
                           (f"/api/conversations/{cid}/messages/{first}/edit", {"query": "x"}),
                           (f"/api/conversations/{cid}/compact", None)):
            r = client.post(path, json=body)
            assert r.status_code == 409, (path, r.text)
            assert r.json()["detail"]
        for _ in lines:
            pass


def test_each_user_reaches_only_their_conversations(tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    """Regenerate, edit, compact (preview and run), resume and stop answer 404 to a user
    who does not own the conversation — the same answer as for one that does not exist —
    and change nothing."""
    from tests.service_support import run_cli

    env = {"CTXSTACK_DEMO_DELAY": "0", "CTXSTACK_DEMO_CHUNK_DELAY": "0"}
    with running_server(tmp_path_factory.mktemp("owners"), env, auth=True) as proc:
        clients = []
        for name in ("alice", "mallory"):
            made = run_cli("user", "create", name, env=proc.env)
            assert made.returncode == 0, made.stderr
            clients.append(httpx.Client(base_url=proc.url, timeout=30, headers={
                "Authorization": f"Bearer {made.stdout.strip()}"}))
        alice, mallory = clients
        try:
            cid = new_conversation(alice)
            assert ask(alice, cid, "Mine?")[-1].event == "done"
            before = history(alice, cid)
            qid = before[0]["id"]
            calls = [("POST", f"/api/conversations/{cid}/regenerate", {}),
                     ("POST", f"/api/conversations/{cid}/messages/{qid}/edit", {"query": "x"}),
                     ("GET", f"/api/conversations/{cid}/compact-preview", None),
                     ("POST", f"/api/conversations/{cid}/compact", None),
                     ("GET", f"/api/conversations/{cid}/stream", None),
                     ("POST", f"/api/conversations/{cid}/stop", None)]
            for method, path, body in calls:
                r = mallory.request(method, path, json=body)
                assert r.status_code == 404, (path, r.status_code, r.text)
                assert r.json()["detail"], path
            assert history(alice, cid) == before
            assert alice.get(f"/api/conversations/{cid}/stream").status_code == 204
            anonymous = httpx.post(f"{proc.url}/api/conversations/{cid}/regenerate", json={})
            assert anonymous.status_code == 401
        finally:
            for c in clients:
                c.close()
