"""The Responses wire behind the proxy's tokens (``--auth``): HTTP and WebSocket refuse a
caller without a token before any upstream call, the upstream gets its own key, and one
caller's ``previous_response_id`` chain is never expanded for another."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from websockets.sync.client import connect as ws_connect

from ctxstack.llm.stub import StubServer
from tests.proxy_support import ProxyProcess, running_proxy
from tests.service_support import clean_env, run_cli

UPSTREAM_KEY = "upstream-secret-key"


def _token(workdir: Path, name: str) -> str:
    env = clean_env({"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'proxy.db'}"})
    done = run_cli("user", "create", name, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("responses-auth")


@pytest.fixture(scope="module")
def tokens(workdir: Path) -> tuple[str, str]:
    return _token(workdir, "alice"), _token(workdir, "bob")


@pytest.fixture(scope="module")
def guarded(stub_server: StubServer, workdir: Path, tokens: tuple[str, str],
            ) -> Iterator[ProxyProcess]:
    with running_proxy(workdir, stub_server.base_url, {"LLM_API_KEY": UPSTREAM_KEY},
                       args=("--auth",)) as proxy:
        yield proxy


def test_no_token_no_upstream_call_over_http_or_websocket(
        guarded: ProxyProcess, stub: StubServer) -> None:
    refused = httpx.post(f"{guarded.base_url}/responses",
                         json={"model": "m", "input": "hi"})
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    with ws_connect(guarded.base_url.replace("http://", "ws://") + "/responses") as ws:
        frame = json.loads(ws.recv(timeout=10))
        assert frame["type"] == "error"
        assert frame["status"] == 401
    assert stub.requests == []


def test_chains_are_never_expanded_for_another_caller(
        guarded: ProxyProcess, stub: StubServer, tokens: tuple[str, str]) -> None:
    stub.rule = lambda r: "noted"
    alice_token, bob_token = tokens
    alice = openai.OpenAI(base_url=guarded.base_url, api_key=alice_token, max_retries=0)
    bob = openai.OpenAI(base_url=guarded.base_url, api_key=bob_token, max_retries=0)
    first = alice.responses.create(model="m", input="Alice's secret: 4711")
    assert stub.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    alice.responses.create(model="m", input="and?", previous_response_id=first.id)
    assert "4711" in json.dumps(stub.requests[-1].body)  # expanded for its owner
    bob.responses.create(model="m", input="and?", previous_response_id=first.id)
    seen = stub.requests[-1].body
    assert "4711" not in json.dumps(seen)  # not for anyone else: forwarded as sent
    assert seen["previous_response_id"] == first.id
    alice.close()
    bob.close()
