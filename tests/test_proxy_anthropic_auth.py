"""Proxy tokens on the Anthropic wire: ``x-ctxstack-api-key``, the client's key untouched.

A real ``ctxstack proxy --auth`` process (the code path a non-loopback bind forces), a
token created with the real CLI, the stub as the Anthropic upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

from ctxstack.llm.stub import StubServer
from tests.proxy_support import ProxyProcess, running_proxy
from tests.test_proxy_auth import _token

UPSTREAM_KEY = "upstream-openai-key"
BODY = {"model": "claude-stub-4", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-anthropic-auth")


@pytest.fixture(scope="module")
def token(workdir: Path) -> str:
    return _token(workdir, "alice")


@pytest.fixture(scope="module")
def guarded(stub_server: StubServer, workdir: Path, token: str) -> Iterator[ProxyProcess]:
    with running_proxy(workdir, stub_server.base_url, {"LLM_API_KEY": UPSTREAM_KEY},
                       args=("--auth", "--anthropic-upstream", stub_server.url)) as proxy:
        yield proxy


@pytest.fixture
def echo(stub: StubServer) -> StubServer:
    stub.rule = lambda r: f"You said: {r.last_user_text}"
    return stub


def test_without_a_proxy_token_it_is_a_401_in_anthropics_shape(
        guarded: ProxyProcess, echo: StubServer) -> None:
    for headers in ({"x-api-key": "sk-ant-client"},
                    {"authorization": "Bearer ctx_not-a-real-token-at-all"},
                    {"x-ctxstack-api-key": "ctx_not-a-real-token-at-all"}):
        response = httpx.post(f"{guarded.url}/v1/messages", json=BODY, headers=headers)
        assert response.status_code == 401
        assert response.json()["type"] == "error"
        assert response.json()["error"]["type"] == "authentication_error"
    assert echo.requests == []


def test_the_token_stays_at_the_proxy_and_the_clients_key_goes_through(
        guarded: ProxyProcess, echo: StubServer, token: str) -> None:
    with anthropic.Anthropic(base_url=guarded.url, api_key="sk-ant-client", max_retries=0,
                             default_headers={"x-ctxstack-api-key": token}) as client:
        made = client.messages.create(**BODY)  # type: ignore[call-overload]
    assert made.content[0].text == "You said: hello"
    [seen] = echo.requests
    # The SDK sends its key as x-api-key or as a bearer authorization (newer versions):
    # either way it reaches the upstream as sent.
    sent = {k: seen.headers.get(k) for k in ("x-api-key", "authorization")}
    assert sent in ({"x-api-key": "sk-ant-client", "authorization": None},
                    {"x-api-key": None, "authorization": "Bearer sk-ant-client"})
    assert "x-ctxstack-api-key" not in seen.headers
    assert token not in str(seen.headers)
    assert UPSTREAM_KEY not in str(seen.headers)  # the OpenAI wire's key never goes here


def test_other_anthropic_routes_go_to_the_anthropic_upstream_unchanged(
        guarded: ProxyProcess, echo: StubServer, token: str) -> None:
    headers = {"authorization": "Bearer sk-ant-client", "anthropic-version": "2023-06-01",
               "x-ctxstack-api-key": token}
    httpx.delete(f"{echo.url}/_stub/requests")
    models = httpx.get(f"{guarded.url}/v1/models?limit=5", headers=headers)
    batch = httpx.post(f"{guarded.url}/v1/messages/batches", headers=headers,
                       content=b'{"requests": []}')
    assert models.status_code == 200
    assert batch.status_code == 404  # the stub has no batches: its own 404, relayed
    seen = httpx.get(f"{echo.url}/_stub/requests").json()["requests"]
    assert [(r["path"], r["query"]) for r in seen] == [("/v1/models", "limit=5"),
                                                        ("/v1/messages/batches", "")]
    for r in seen:  # the client's key, not LLM_API_KEY; the proxy token never leaves
        assert r["headers"]["authorization"] == "Bearer sk-ant-client"
        assert "x-ctxstack-api-key" not in r["headers"]
    assert seen[1]["body"] == '{"requests": []}'
