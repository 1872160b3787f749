"""Proxy security: ``ctxstack user create`` tokens, the upstream key, ``--forward-auth``.

Real ``ctxstack proxy`` processes with ``--auth`` on loopback (the same code path a
non-loopback bind forces), tokens created with the real CLI in the proxy's database.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ctxstack.llm.stub import StubServer
from ctxstack.proxy import is_loopback
from tests.proxy_support import ProxyProcess, running_proxy
from tests.service_support import clean_env, run_cli

UPSTREAM_KEY = "upstream-secret-key"
MESSAGES = [{"role": "user", "content": "hello"}]


def _token(workdir: Path, name: str) -> str:
    env = clean_env({"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'proxy.db'}"})
    done = run_cli("user", "create", name, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-auth")


@pytest.fixture(scope="module")
def token(workdir: Path) -> str:
    return _token(workdir, "alice")


@pytest.fixture(scope="module")
def guarded(stub_server: StubServer, workdir: Path, token: str) -> Iterator[ProxyProcess]:
    with running_proxy(workdir, stub_server.base_url, {"LLM_API_KEY": UPSTREAM_KEY},
                       args=("--auth",)) as proxy:
        yield proxy


@pytest.fixture
def echo(stub: StubServer) -> StubServer:
    stub.rule = lambda r: f"You said: {r.last_user_text}"
    return stub


def test_requests_without_a_valid_token_are_refused_before_the_upstream(
        guarded: ProxyProcess, echo: StubServer) -> None:
    for headers in ({}, {"Authorization": "Bearer ctx_not-a-real-token-at-all"},
                    {"Authorization": f"Basic {UPSTREAM_KEY}"}):
        for method, path, body in (("POST", "/v1/chat/completions",
                                    {"model": "m", "messages": MESSAGES}),
                                   ("GET", "/v1/models", None),
                                   ("GET", "/ctxstack/stats", None)):
            response = httpx.request(method, f"{guarded.url}{path}", json=body, headers=headers)
            assert response.status_code == 401, (headers, path)
            error = response.json()["error"]
            assert error["type"] == "authentication_error"
            assert "ctxstack user create" in error["message"]
    assert echo.requests == []


def test_a_valid_token_is_replaced_by_the_upstream_key(
        guarded: ProxyProcess, echo: StubServer, token: str) -> None:
    client = openai.OpenAI(base_url=guarded.base_url, api_key=token, max_retries=0)
    answer = client.chat.completions.create(model="stub-model", messages=MESSAGES)
    assert answer.choices[0].message.content == "You said: hello"
    assert client.models.list().data[0].id == "stub-model"
    client.close()
    seen = echo.last_request.headers
    assert seen["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert token not in str(seen)
    stats = httpx.get(f"{guarded.url}/ctxstack/stats",
                      headers={"Authorization": f"Bearer {token}"})
    assert stats.status_code == 200
    assert stats.json()["requests"] >= 1


def test_forward_auth_sends_the_clients_key_and_takes_the_token_elsewhere(
        stub_server: StubServer, echo: StubServer, workdir: Path, token: str) -> None:
    with running_proxy(workdir, stub_server.base_url, {"LLM_API_KEY": UPSTREAM_KEY},
                       args=("--auth", "--forward-auth")) as proxy:
        client = openai.OpenAI(base_url=proxy.base_url, api_key="client-own-provider-key",
                               default_headers={"x-ctxstack-api-key": token}, max_retries=0)
        answer = client.chat.completions.create(model="stub-model", messages=MESSAGES)
        assert answer.choices[0].message.content == "You said: hello"
        seen = echo.last_request.headers
        assert seen["authorization"] == "Bearer client-own-provider-key"
        assert "x-ctxstack-api-key" not in seen
        # Without the proxy token the client's provider key alone is not enough.
        bare = openai.OpenAI(base_url=proxy.base_url, api_key="client-own-provider-key",
                             max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bare.chat.completions.create(model="stub-model", messages=MESSAGES)
        client.close()
        bare.close()


def test_no_auth_on_a_non_loopback_address_refuses_to_start(tmp_path: Path) -> None:
    env = clean_env({"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'p.db'}"})
    launch = "import ctxstack.cli.proxy\nfrom ctxstack.cli import main\nmain()\n"
    done = subprocess.run(
        [sys.executable, "-c", launch, "proxy", "--upstream", "http://127.0.0.1:9/v1",
         "--host", "0.0.0.0", "--no-auth"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "API tokens are required" in done.stderr


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.5", False), ("10.0.0.1", False),
    ("127.0.0.1.example.com", False), ("localhost.example.com", False), ("myhost", False),
    ("", False),
])
def test_is_loopback_parses_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
