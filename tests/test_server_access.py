"""Users, tokens, ownership, uploads and input validation, over real HTTP.

One ``ctxstack serve --auth`` process with the demo model; users are created with the real
``ctxstack user create`` command and talk to the API with their bearer tokens.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service_support import ServerProcess, chat, run_cli, running_server

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
MAX_UPLOAD = 4096


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"CTXSTACK_MAX_UPLOAD_BYTES": str(MAX_UPLOAD), "CTXSTACK_ADMIN_USERS": "admin",
           "CTXSTACK_DEMO_DELAY": "0", "CTXSTACK_DEMO_CHUNK_DELAY": "0"}
    with running_server(tmp_path_factory.mktemp("auth"), env, auth=True) as proc:
        yield proc


def make_user(server: ServerProcess, name: str) -> httpx.Client:
    done = run_cli("user", "create", name, env=server.env)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("ctx_")
    assert len(token) > 30
    assert "cannot be shown again" in done.stderr
    return httpx.Client(base_url=server.url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(scope="module")
def alice(server: ServerProcess) -> Iterator[httpx.Client]:
    with make_user(server, "alice") as c:
        yield c


@pytest.fixture(scope="module")
def bob(server: ServerProcess) -> Iterator[httpx.Client]:
    with make_user(server, "bob") as c:
        yield c


def test_requests_without_a_valid_token_are_refused(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url) as anonymous:
        response = anonymous.get("/api/conversations")
        assert response.status_code == 401
        assert "ctxstack user create" in response.json()["detail"]
        assert response.headers["www-authenticate"].startswith("Bearer")
        bad = anonymous.get("/api/conversations", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401
        assert "unknown API token" in bad.json()["detail"]
        info = anonymous.get("/api/info")  # the page needs this before signing in
        assert info.status_code == 200
        assert info.json()["auth_required"] is True
        assert info.json()["demo_model"] is True


def test_a_token_names_its_user(alice: httpx.Client) -> None:
    me = alice.get("/api/me").json()
    assert me["name"] == "alice"
    assert me["is_admin"] is False


def test_duplicate_user_is_refused_clearly(server: ServerProcess, alice: httpx.Client) -> None:
    again = run_cli("user", "create", "alice", env=server.env)
    assert again.returncode != 0
    assert "already exists" in again.stderr


def test_every_route_hides_other_users_data(alice: httpx.Client, bob: httpx.Client) -> None:
    cid = alice.post("/api/conversations", json={"title": "alice's"}).json()["id"]
    events = chat(alice, cid, "What is 2+3?")
    assert events[-1].event == "done"
    upload = alice.post("/api/files", files={"file": ("dot.png", PNG, "image/png")})
    assert upload.status_code == 201
    fid = upload.json()["id"]

    assert cid not in [c["id"] for c in bob.get("/api/conversations").json()]
    bob_cid = bob.post("/api/conversations", json={}).json()["id"]
    attempts = [
        bob.get(f"/api/conversations/{cid}"),
        bob.patch(f"/api/conversations/{cid}", json={"title": "mine now"}),
        bob.get(f"/api/conversations/{cid}/messages"),
        bob.post("/api/chat", json={"conversation_id": cid, "query": "hi"}),
        bob.post("/api/chat/inject", json={"conversation_id": cid, "text": "hi"}),
        bob.get(f"/api/files/{fid}"),
        bob.post("/api/chat", json={"conversation_id": bob_cid, "query": "see this",
                                    "file_ids": [fid]}),
        bob.delete(f"/api/conversations/{cid}"),
    ]
    for response in attempts:
        assert response.status_code == 404, (response.request.method, response.request.url,
                                              response.text)
        assert "not found" in response.json()["detail"]
    # Nothing of alice's changed, and bob's refused turn stored nothing.
    assert alice.get(f"/api/conversations/{cid}").json()["title"] == "alice's"
    assert len(alice.get(f"/api/conversations/{cid}/messages").json()) == 2
    assert alice.get(f"/api/files/{fid}").content == PNG
    assert bob.get(f"/api/conversations/{bob_cid}/messages").json() == []


def test_uploads_are_checked_by_content(alice: httpx.Client) -> None:
    fake = alice.post("/api/files", files={"file": ("cat.png", b"#!/bin/sh\necho hi\n",
                                                    "image/png")})
    assert fake.status_code == 415
    assert "PNG, JPEG, WebP and GIF" in fake.json()["detail"]
    big = alice.post("/api/files", files={"file": ("big.png", PNG + b"\0" * MAX_UPLOAD,
                                                   "image/png")})
    assert big.status_code == 413
    assert "limit" in big.json()["detail"]
    empty = alice.post("/api/files", files={"file": ("e.png", b"", "image/png")})
    assert empty.status_code == 400
    good = alice.post("/api/files", files={"file": ("../../etc/passwd", PNG, "text/plain")})
    assert good.status_code == 201
    assert good.json()["mime_type"] == "image/png"
    fetched = alice.get(f"/api/files/{good.json()['id']}")
    assert fetched.content == PNG
    assert fetched.headers["content-type"] == "image/png"
    assert alice.get("/api/files/..%2F..%2Fetc%2Fpasswd").status_code == 404


def test_an_image_reaches_the_turn(alice: httpx.Client) -> None:
    fid = alice.post("/api/files", files={"file": ("dot.png", PNG, "image/png")}).json()["id"]
    cid = alice.post("/api/conversations", json={}).json()["id"]
    events = chat(alice, cid, "What is in this picture?", file_ids=[fid])
    assert events[-1].event == "done"
    user = alice.get(f"/api/conversations/{cid}/messages").json()[0]
    assert user["images"] == [{"file_id": fid, "mime_type": "image/png"}]


def test_bad_input_gets_a_clear_4xx(alice: httpx.Client) -> None:
    cid = alice.post("/api/conversations", json={}).json()["id"]
    cases = [
        ({"conversation_id": cid, "query": "   "}, "query"),
        ({"conversation_id": cid, "query": "hi", "mode": "loop"}, "mode"),
        ({"conversation_id": cid, "query": "hi", "extra": 1}, "extra"),
        ({"query": "hi"}, "conversation_id"),
        ({"conversation_id": cid, "query": "x" * 100_001}, "query"),
    ]
    for body, field in cases:
        response = alice.post("/api/chat", json=body)
        assert response.status_code == 422, (body, response.text)
        assert field in response.json()["detail"], response.json()
    assert alice.patch(f"/api/conversations/{cid}", json={"title": ""}).status_code == 422
    assert alice.post("/api/chat/inject", json={"conversation_id": cid, "text": ""}
                      ).status_code == 422
    # Nothing was stored by any refused request.
    assert alice.get(f"/api/conversations/{cid}/messages").json() == []


def test_inject_without_a_running_turn_is_409(alice: httpx.Client) -> None:
    cid = alice.post("/api/conversations", json={}).json()["id"]
    response = alice.post("/api/chat/inject", json={"conversation_id": cid, "text": "hello?"})
    assert response.status_code == 409
    assert "no turn is running" in response.json()["detail"]


def test_markup_in_fields_is_stored_as_text(alice: httpx.Client) -> None:
    title = "<script>alert(1)</script> ' OR 1=1; --"
    created = alice.post("/api/conversations", json={"title": title})
    assert created.status_code == 201
    cid = created.json()["id"]
    assert alice.get(f"/api/conversations/{cid}").json()["title"] == title
    assert alice.get("/api/conversations/' OR 1=1 --").status_code == 404


def test_only_admins_change_model_configs(server: ServerProcess, alice: httpx.Client) -> None:
    denied = alice.put("/api/admin/model-configs/main", json={"model": "m", "context_size": 9000})
    assert denied.status_code == 403
    assert "admin" in denied.json()["detail"]
    with make_user(server, "admin") as admin:
        assert admin.get("/api/me").json()["is_admin"] is True
        ok = admin.put("/api/admin/model-configs/fast",
                       json={"model": "small", "context_size": 32000, "max_output_tokens": 8000})
        assert ok.status_code == 200, ok.text
        assert ok.json()["budget"]["usable_input_tokens"] == 24000
        assert ok.json()["budget"]["sources"]["context_size"] == "db"
        bad = admin.put("/api/admin/model-configs/fast", json={"model": "m", "context_size": -1})
        assert bad.status_code == 422
        assert "context_size" in bad.json()["detail"]
        assert admin.put("/api/admin/model-configs/huge", json={"model": "m"}).status_code == 422
        listed = admin.get("/api/admin/model-configs").json()
        assert [c["role"] for c in listed] == ["main", "fast"]
        assert listed[1]["model"] == "small"
    # Reading the admin model configs is admin-only too (issue 15).
    refused = alice.get("/api/admin/model-configs")
    assert refused.status_code == 403, refused.text
    assert "small" not in refused.text


def test_no_auth_is_the_loopback_default(tmp_path: Path) -> None:
    with running_server(tmp_path, {}, auth=None) as local, \
            httpx.Client(base_url=local.url) as c:
        me = c.get("/api/me").json()
        assert me["name"] == "local"
        assert me["is_admin"] is True
        assert c.get("/api/info").json()["auth_required"] is False
