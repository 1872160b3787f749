"""The proxy counts each requested model with its own tokenizer when it is known offline.

Budget for every model: 5,000 − 1,000 = 4,000 input tokens. ``gpt-4o`` is counted with
tiktoken's ``o200k_base`` (exact: the whole budget is usable, and what reaches the upstream
fits by that count); a model name with no known tokenizer is counted with the heuristic,
which keeps its margin free; a known model whose vocabulary is not on disk falls back to
the heuristic explicitly (logged), never downloads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.vocab import ensure_offline
from ctxstack import ChatMessage
from ctxstack.llm.stub import StubServer
from ctxstack.proxy import ProxySettings, create_app, parse_compaction_header
from ctxstack.proxy.counting import MemoCounter, ModelCounters
from ctxstack.store import create_engine_from_url, upgrade
from ctxstack.tokens import HEURISTIC, HeuristicCounter, TiktokenCounter
from ctxstack.tokens._counter import effective_budget
from tests.proxy_support import ConversationRule, chat_requests

BUDGET = 4_000
PROSE = ("The committee reviewed the quarterly shipping schedule, the supplier contracts and "
         "the revised staffing plan before agreeing on the priorities for next spring. ")


def o200k() -> TiktokenCounter:
    pytest.importorskip("tiktoken")
    reason = ensure_offline("o200k_base")
    if reason is not None:
        pytest.skip(reason)
    return TiktokenCounter("o200k_base")


def views(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.from_openai(m) for m in messages]


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You plan carefully."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i}: {PROSE * 2}"},
                     {"role": "assistant", "content": f"Answer {i}: {PROSE * 2}"}]
    return [*messages, {"role": "user", "content": "What did we agree on?"}]


@pytest.fixture
async def client(tmp_path: Path, stub: StubServer) -> AsyncIterator[httpx.AsyncClient]:
    stub.rule = ConversationRule()
    url = f"sqlite+aiosqlite:///{tmp_path / 'proxy.db'}"
    engine = create_engine_from_url(url)
    await upgrade(engine)
    await engine.dispose()
    settings = ProxySettings(upstream=stub.base_url, database_url=url,
                             budget_env={"LLM_CONTEXT_SIZE": "5000",
                                         "LLM_MAX_OUTPUT_TOKENS": "1000"})
    app = create_app(settings)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        yield await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30))


def between_margin_and_budget(exact: TiktokenCounter) -> list[dict[str, Any]]:
    """A conversation within the budget by o200k, beyond it less the heuristic's margin."""
    for turns in range(4, 40):
        messages = conversation(turns)
        tokens = exact.count_messages(views(messages))
        if tokens > BUDGET:
            break
        if (tokens > effective_budget(BUDGET, HEURISTIC)
                and HEURISTIC.count_messages(views(messages))
                > effective_budget(BUDGET, HEURISTIC)):
            return messages
    pytest.fail("no conversation size lands between the heuristic's margin and the budget")


async def test_a_known_model_uses_the_whole_budget_by_its_exact_count(
        client: httpx.AsyncClient, stub: StubServer) -> None:
    exact = o200k()
    messages = between_margin_and_budget(exact)
    response = await client.post("/v1/chat/completions",
                                 json={"model": "gpt-4o", "messages": messages})
    assert response.status_code == 200, response.text
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] == "none"
    assert response.headers["x-ctxstack-token-counter"] == "tiktoken:o200k_base"
    assert int(response.headers["x-ctxstack-input-tokens-estimated"]) == \
        exact.count_messages(views(messages))
    assert chat_requests(stub.requests)[-1].body["messages"] == messages
    # The same request for a model without a known tokenizer keeps the heuristic's margin.
    other = await client.post("/v1/chat/completions",
                              json={"model": "local-llama-3", "messages": messages})
    assert parse_compaction_header(other.headers["x-ctxstack-compaction"])["method"] != "none"
    assert other.headers["x-ctxstack-token-counter"] == "bpe-heuristic"
    forwarded = chat_requests(stub.requests)[-1].body["messages"]
    assert HEURISTIC.count_messages(views(forwarded)) <= effective_budget(BUDGET, HEURISTIC)
    assert forwarded[-1] == messages[-1]


async def test_an_over_budget_request_fits_by_the_exact_count_upstream(
        client: httpx.AsyncClient, stub: StubServer) -> None:
    exact = o200k()
    tools = [{"type": "function", "function": {
        "name": "lookup", "description": "Find a record by its number. " * 20,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    messages = conversation(120)
    assert exact.count_messages(views(messages)) > 3 * BUDGET
    response = await client.post("/v1/chat/completions",
                                 json={"model": "gpt-4o-2024-08-06", "messages": messages,
                                       "tools": tools})
    assert response.status_code == 200, response.text
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header["method"] == "llm"
    body = chat_requests(stub.requests)[-1].body
    sent = exact.count_messages(views(body["messages"])) + exact.count_text(
        json.dumps(body["tools"], ensure_ascii=False, separators=(",", ":")))
    assert sent <= BUDGET
    assert int(response.headers["x-ctxstack-input-tokens-estimated"]) == sent
    assert body["messages"][-1] == messages[-1]


async def test_a_missing_vocabulary_falls_back_to_the_heuristic_and_says_so(
        client: httpx.AsyncClient, stub: StubServer, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exact = o200k()
    messages = between_margin_and_budget(exact)
    import tiktoken.registry

    from ctxstack.tokens import _exact as model_counters

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))  # nothing offline
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(model_counters, "_built", {})
    with caplog.at_level(logging.WARNING, logger="ctxstack.proxy"):
        response = await client.post("/v1/chat/completions",
                                     json={"model": "gpt-4o", "messages": messages})
    assert response.status_code == 200, response.text
    assert "not available offline" in caplog.text
    assert response.headers["x-ctxstack-token-counter"] == "bpe-heuristic"
    # Counted by the heuristic, margin kept: the request that fits by o200k is compacted.
    assert parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"] != "none"
    forwarded = chat_requests(stub.requests)[-1].body["messages"]
    assert HEURISTIC.count_messages(views(forwarded)) <= effective_budget(BUDGET, HEURISTIC)


async def test_counters_are_chosen_per_model_name_and_bounded() -> None:
    o200k()
    counters = ModelCounters()
    four_o = await counters.aget("gpt-4o")  # the first of a family: built in a thread
    assert isinstance(four_o, MemoCounter)
    assert four_o.cache_key == "tiktoken:o200k_base"
    assert four_o.margin == 0
    assert counters.get("openai/gpt-4o-mini") is four_o  # one counter per tokenizer
    assert await counters.aget("gpt-4o-2024-08-06") is four_o
    assert counters.get("gpt-3.5-turbo").cache_key == "tiktoken:cl100k_base"
    unknown = counters.get("mistral-large")
    assert isinstance(unknown, MemoCounter)
    assert isinstance(unknown.inner, HeuristicCounter)
    assert unknown.cache_key == "bpe-heuristic"
    assert unknown.margin == unknown.inner.margin > 0
    for i in range(3_000):  # names come from clients: the map stays bounded
        counters.get(f"client-model-{i}")
    assert len(counters._by_name) <= 1_024
    assert len(counters._by_family) == 3


def test_memoised_exact_counts_equal_the_tokenizer_and_stay_bounded() -> None:
    exact = o200k()
    memo = MemoCounter(exact, max_chars=2_000)
    texts = [f"{i}: {PROSE}" for i in range(40)] + ["short", "", "日本語のテキストです。" * 30]
    assert [memo.count_text(t) for t in texts] == [exact.count_text(t) for t in texts]
    assert [memo.count_text(t) for t in texts] == [exact.count_text(t) for t in texts]
    assert memo._chars <= 2_000
    assert memo.count_messages(views(conversation(3))) == exact.count_messages(
        views(conversation(3)))
