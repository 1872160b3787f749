"""Do no harm on the Anthropic wire: a fitting failure forwards the client's request as is.

The proxy app runs in process (its lifespan included) with a token counter that raises on
one marker word — a stand-in for any bug in fitting — in front of the stub over real HTTP,
driven over HTTP through the app's ASGI interface.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from ctxstack.proxy import ProxySettings, create_app
from ctxstack.proxy.stats import ProxyStats
from ctxstack.tokens import HeuristicCounter

MODEL = "claude-stub-4"
MARKER = "EXPLODE"


class ExplodingCounter(HeuristicCounter):
    """The default heuristic, except that counting a text holding :data:`MARKER` raises."""

    def count_text(self, text: str) -> int:
        if MARKER in text:
            raise RuntimeError("a bug in counting")
        return super().count_text(text)


@pytest.fixture
async def proxied(stub: StubServer, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    stub.rule = lambda r: f"You said: {r.last_user_text[:20]}"
    settings = ProxySettings(upstream=stub.base_url, anthropic_upstream=stub.url,
                             database_url=f"sqlite+aiosqlite:///{tmp_path / 'p.db'}",
                             budget_env={"LLM_CONTEXT_SIZE": "3000",
                                         "LLM_MAX_OUTPUT_TOKENS": "500"})
    app = create_app(settings, migrate=True, counter=ExplodingCounter())
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        yield await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30))


async def test_a_fitting_failure_forwards_the_original_request(
        proxied: httpx.AsyncClient, stub: StubServer) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": f"Message {i}: " + "the quarterly figures and the plan " * 40}
                for i in range(20)]
    messages[-2]["content"] += MARKER
    body = {"model": MODEL, "max_tokens": 64, "messages": messages}
    made = await proxied.post("/v1/messages", json=body, headers={"x-api-key": "sk-ant-k"})
    assert made.status_code == 200, made.text
    assert made.json()["content"][0]["text"].startswith("You said")
    assert made.headers["x-ctxstack-compaction"].startswith("method=none")
    [sent] = [r for r in stub.requests if r.path == "/v1/messages"]
    assert json.dumps(sent.body["messages"]) == json.dumps(messages)
    stats = ProxyStats.model_validate((await proxied.get("/ctxstack/stats")).json())
    assert stats.fit_failures == 1
