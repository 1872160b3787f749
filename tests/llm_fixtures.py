"""Shared fixtures for tests that talk to an LLM over real loopback HTTP.

Register with ``pytest_plugins = ["tests.llm_fixtures"]`` (module or root conftest).

* ``stub_server`` — one :class:`~ctxstack.llm.stub.StubServer` per session (uvicorn in a
  background thread with its own event loop, so it outlives per-test event loops);
* ``stub`` — that server, reset (empty queue, no rule/fault/delay, no recorded requests)
  before and after each test;
* ``upstream`` — that server as a proxy's upstream: it answers "Noted." to everything
  and its request log starts empty;
* ``stub_client`` — an :class:`~ctxstack.llm.openai.OpenAICompatibleLLM` pointed at the
  stub with fast retries (10 ms backoff, 3 attempts) and a default budget, closed after
  the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from ctxstack.budget import ModelBudget
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.retry import RetryPolicy
from ctxstack.llm.stub import StubServer

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, max_total_time=10.0)
"""Retries that keep tests fast: three attempts, 10-50 ms apart."""


@pytest.fixture(scope="session")
def stub_server() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def stub(stub_server: StubServer) -> Iterator[StubServer]:
    stub_server.reset()
    yield stub_server
    stub_server.reset()


@pytest.fixture
def upstream(stub: StubServer) -> StubServer:
    stub.rule = lambda r: "Noted."
    httpx.delete(f"{stub.url}/_stub/requests")
    return stub


@pytest.fixture
async def stub_client(stub: StubServer) -> AsyncIterator[OpenAICompatibleLLM]:
    llm = stub.client(retry_policy=FAST_RETRY, timeout=10.0, budget=ModelBudget())
    yield llm
    await llm.aclose()
