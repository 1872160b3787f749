"""Proxy checkpoints: shared by proxy instances through the database (SQLite, PostgreSQL),
bounded in number, expiring, recognised by message prefix whatever the client echoes back.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from ctxstack.proxy import ProxySettings, create_app, parse_compaction_header
from ctxstack.proxy.checkpoints import PrefixHasher, fingerprint
from ctxstack.store import create_engine_from_url, session_factory, upgrade
from ctxstack.store.proxy_checkpoints import (
    ProxyCheckpointRecord,
    count_proxy_checkpoints,
    find_proxy_checkpoints,
    save_proxy_checkpoint,
)
from tests.proxy_support import ConversationRule, chat_requests, is_summary_request
from tests.store.dbkit import Backend

FILLER = "The quarterly plan: 3.2% growth, order #A-1042, ship by 2026-03-14, budget 41,500 EUR. "


def _settings(backend: Backend, upstream: str) -> ProxySettings:
    return ProxySettings(upstream=upstream, database_url=backend.url,
                         database_schema=backend.schema,
                         budget_env={"LLM_CONTEXT_SIZE": "5000",
                                     "LLM_MAX_OUTPUT_TOKENS": "1000"})


async def _client(stack: AsyncExitStack, settings: ProxySettings) -> httpx.AsyncClient:
    """One proxy app instance (its own engine, pools and caches) behind an ASGI client."""
    app = create_app(settings)
    await stack.enter_async_context(app.router.lifespan_context(app))
    return await stack.enter_async_context(httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30))


def _conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You plan."}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Q{i}: {FILLER * 2}"},
                     {"role": "assistant", "content": f"A{i}: {FILLER * 2}",
                      "refusal": None}]
    return messages


async def test_two_proxy_instances_share_checkpoints(backend: Backend, stub: StubServer) -> None:
    stub.rule = ConversationRule()
    engine = backend.engine()
    await upgrade(engine)
    await engine.dispose()
    settings = _settings(backend, stub.base_url)
    async with AsyncExitStack() as stack:
        first, second = [await _client(stack, settings) for _ in range(2)]
        messages = [*_conversation(60), {"role": "user", "content": "What is the budget?"}]
        a = await first.post("/v1/chat/completions",
                             json={"model": "stub-model", "messages": messages})
        assert a.status_code == 200, a.text
        assert parse_compaction_header(a.headers["x-ctxstack-compaction"])["method"] == "llm"
        # The client echoes the answer back without the null fields, and asks on: the
        # other instance recognises the conversation and reuses the summary.
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        messages += [{"role": "assistant", "content": "41,500 EUR."},
                     {"role": "user", "content": "And the ship date?"}]
        b = await second.post("/v1/chat/completions",
                              json={"model": "stub-model", "messages": messages})
        assert b.status_code == 200, b.text
        header = parse_compaction_header(b.headers["x-ctxstack-compaction"])
        assert header["method"] == "checkpoint"
        assert int(header["summarized"]) > 0
    summaries = [r for r in stub.requests if is_summary_request(r)]
    assert len(summaries) == 1
    last = chat_requests(stub.requests)[-1].body["messages"]
    assert last[-1] == messages[-1]
    assert last[0] == messages[0]


async def test_another_caller_does_not_share_a_checkpoint(tmp_path: Path, stub: StubServer) -> None:
    factory = session_factory(create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"))
    await upgrade(factory.kw["bind"])
    from ctxstack.proxy.checkpoints import CheckpointStore

    store = CheckpointStore(factory, max_rows=10, ttl_seconds=3600)
    messages = _conversation(5)
    assert await store.save(messages, 1, "user:1", covered=7, summary="S", token_count=3,
                            model="m")
    assert (await store.find([*messages, {"role": "user", "content": "x"}], 1, "user:1")
            ) is not None
    assert await store.find([*messages, {"role": "user", "content": "x"}], 1, "user:2") is None
    changed = [dict(m) for m in messages]
    changed[3]["content"] = "edited history"
    assert await store.find(changed, 1, "user:1") is None  # the prefix no longer matches
    await factory.kw["bind"].dispose()


async def test_checkpoints_are_bounded_and_expire(tmp_path: Path) -> None:
    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    await upgrade(engine)
    factory = session_factory(engine)

    def record(i: int) -> ProxyCheckpointRecord:
        return ProxyCheckpointRecord(prefix_hash=f"p{i}", root_hash="root", covered=i + 2,
                                     model="m", summary=f"summary {i}", token_count=5)

    for i in range(5):
        assert await save_proxy_checkpoint(factory, record(i), max_rows=3)
    assert await count_proxy_checkpoints(factory) == 3
    found = await find_proxy_checkpoints(factory, "root", 100)
    assert [r.prefix_hash for r in found] == ["p4", "p3", "p2"]  # the newest kept
    assert [r.covered for r in await find_proxy_checkpoints(factory, "root", 5)] == [5, 4]
    # The same prefix saved twice (two workers, one overflow) keeps the first.
    assert not await save_proxy_checkpoint(factory, record(4), max_rows=3)
    await asyncio.sleep(0.05)
    assert await find_proxy_checkpoints(factory, "root", 100, ttl=timedelta(seconds=0.01)) == []
    await save_proxy_checkpoint(factory, record(9), max_rows=3, ttl=timedelta(seconds=0.01))
    assert await count_proxy_checkpoints(factory) == 1  # expired rows pruned on save
    await engine.dispose()


def test_fingerprint_ignores_fields_clients_add_when_echoing() -> None:
    sdk_echo = {"role": "assistant", "content": "hi", "refusal": None, "annotations": [],
                "audio": None, "function_call": None}
    assert fingerprint(sdk_echo) == fingerprint({"role": "assistant", "content": "hi"})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert fingerprint({"role": "assistant", "content": None, "tool_calls": [call]}) != \
        fingerprint({"role": "assistant", "content": None})
    assert fingerprint({"role": "user", "content": "a"}) != \
        fingerprint({"role": "assistant", "content": "a"})


def test_prefix_hashes_chain_and_depend_on_the_salt() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(5)]
    a = PrefixHasher(messages, "s")
    first = [a.at(k) for k in range(1, 6)]
    assert len(set(first)) == 5
    assert PrefixHasher(messages[:3], "s").at(3) == first[2]
    assert PrefixHasher(messages, "other").at(3) != first[2]
    with pytest.raises(ValueError, match="growing order"):
        a.at(2)


async def test_budget_per_model_name_comes_from_model_configs(tmp_path: Path,
                                                              stub: StubServer) -> None:
    from ctxstack.store.model_configs import set_model_config

    stub.rule = ConversationRule()
    backend = Backend("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'budget.db'}")
    engine = backend.engine()
    await upgrade(engine)
    await set_model_config(session_factory(engine), "main", "tiny-model",
                           context_size=5_000, max_output_tokens=1_000)
    await engine.dispose()
    settings = ProxySettings(upstream=stub.base_url, database_url=backend.url)  # env: 64k
    messages = [*_conversation(60), {"role": "user", "content": "What is the budget?"}]
    async with AsyncExitStack() as stack:
        client = await _client(stack, settings)
        tiny = await client.post("/v1/chat/completions",
                                 json={"model": "tiny-model", "messages": messages})
        big = await client.post("/v1/chat/completions",
                                json={"model": "stub-model", "messages": messages})
    assert parse_compaction_header(tiny.headers["x-ctxstack-compaction"])["method"] == "llm"
    assert int(tiny.headers["x-ctxstack-input-tokens-estimated"]) <= 4_000
    assert parse_compaction_header(big.headers["x-ctxstack-compaction"])["method"] == "none"
    assert chat_requests(stub.requests)[-1].body["messages"] == messages


async def test_a_used_checkpoint_lives_on_and_its_use_is_written_rarely(
        backend: Backend) -> None:
    from ctxstack.store.models import utcnow
    from ctxstack.store.proxy_checkpoints import prune_proxy_checkpoints, touch_proxy_checkpoint

    engine = backend.engine()
    await upgrade(engine)
    factory = session_factory(engine)
    ttl, every = timedelta(hours=10), timedelta(hours=1)

    def record(name: str) -> ProxyCheckpointRecord:
        return ProxyCheckpointRecord(prefix_hash=name, root_hash=f"root-{name}", covered=3,
                                     model="m", summary="s", token_count=1)

    for name in ("used", "idle"):
        await save_proxy_checkpoint(factory, record(name), ttl=ttl)
    start = utcnow()
    at = [start + timedelta(hours=h) for h in range(25)]
    # Within the interval of its creation a use writes nothing; after it, one write.
    assert not await touch_proxy_checkpoint(factory, "used", every=every, now=at[0])
    for hour in (6, 12):
        assert await touch_proxy_checkpoint(factory, "used", every=every, now=at[hour])
        assert not await touch_proxy_checkpoint(factory, "used", every=every,
                                                now=at[hour] + timedelta(minutes=30))
    # Hour 20: created 20 hours ago, used 8 hours ago → still alive; the idle one expired.
    assert [r.prefix_hash for r in await find_proxy_checkpoints(
        factory, "root-used", 10, ttl=ttl, now=at[20])] == ["used"]
    assert await find_proxy_checkpoints(factory, "root-idle", 10, ttl=ttl, now=at[20]) == []
    await prune_proxy_checkpoints(factory, ttl=ttl, now=at[20])
    assert await count_proxy_checkpoints(factory) == 1  # the idle one is deleted
    # Hour 23: 11 hours since its last use → expired too.
    assert await find_proxy_checkpoints(factory, "root-used", 10, ttl=ttl, now=at[23]) == []
    await engine.dispose()


async def test_surplus_checkpoints_go_least_recently_used_first(tmp_path: Path) -> None:
    from ctxstack.store.models import utcnow
    from ctxstack.store.proxy_checkpoints import touch_proxy_checkpoint

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'lru.db'}")
    await upgrade(engine)
    factory = session_factory(engine)
    for i in range(3):
        await save_proxy_checkpoint(factory, ProxyCheckpointRecord(
            prefix_hash=f"p{i}", root_hash="root", covered=i + 2, model="m", summary="s",
            token_count=1), max_rows=3)
    # The oldest is in use: a fourth checkpoint pushes out the least recently used one.
    assert await touch_proxy_checkpoint(factory, "p0", every=timedelta(0),
                                        now=utcnow() + timedelta(seconds=1))
    await save_proxy_checkpoint(factory, ProxyCheckpointRecord(
        prefix_hash="p3", root_hash="root", covered=9, model="m", summary="s",
        token_count=1), max_rows=3)
    found = await find_proxy_checkpoints(factory, "root", 100)
    assert sorted(r.prefix_hash for r in found) == ["p0", "p2", "p3"]
    await engine.dispose()


async def test_the_proxy_extends_a_checkpoint_it_reuses(tmp_path: Path) -> None:
    """Through :class:`CheckpointStore`: a reuse after the touch interval writes ``used_at``
    (a short ttl stands in for days; nothing here depends on timing but the ordering)."""
    from ctxstack.proxy.checkpoints import CheckpointStore

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'use.db'}")
    await upgrade(engine)
    factory = session_factory(engine)
    store = CheckpointStore(factory, max_rows=10, ttl_seconds=3600)
    messages = _conversation(5)
    asked = [*messages, {"role": "user", "content": "x"}]
    assert await store.save(messages, 1, "salt", covered=7, summary="S", token_count=3,
                            model="m")
    first = await store.find(asked, 1, "salt")
    assert first is not None
    assert first.used_at is None
    store.touch_every = timedelta(0)  # as if the interval had passed
    await asyncio.sleep(0.01)
    await store.find(asked, 1, "salt")
    again = await store.find(asked, 1, "salt")
    assert again is not None
    assert again.used_at is not None
    assert first.created_at is not None
    assert again.used_at > first.created_at
    await engine.dispose()


async def test_the_stateless_fitter_reuses_its_checkpoint_as_the_conversation_grows(
        tmp_path: Path) -> None:
    """The fit the proxy falls back on when a session is busy past its wait or its view
    cannot be recomputed: with no session view, the first overflow is summarised and its
    checkpoint stored; the grown conversation's next fits reuse it — the client's system
    prompt, the stored summary, the rest verbatim, no summariser call — and a caller
    with another salt never sees it."""
    from ctxstack.proxy.checkpoints import CheckpointStore
    from ctxstack.proxy.fitting import Fitter
    from ctxstack.proxy.request import parse_request
    from ctxstack.testing import ScriptedLLM
    from ctxstack.tokens import DEFAULT_COUNTER

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'f.db'}")
    await upgrade(engine)
    fitter = Fitter(DEFAULT_COUNTER, CheckpointStore(session_factory(engine), max_rows=10,
                                                     ttl_seconds=3600), summary_timeout=5)
    summarizer = ScriptedLLM(["Summary: orders A-1000 to A-1029 shipped."] * 5)

    def body(turns: int) -> bytes:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
        for i in range(turns):
            messages += [{"role": "user", "content": f"Turn {i}: status of #A-{1000 + i}? "
                          + "detail " * 30},
                         {"role": "assistant", "content": f"#A-{1000 + i} shipped. "
                          + "note " * 30}]
        messages.append({"role": "user", "content": "And now?"})
        return json.dumps({"model": "m", "messages": messages}).encode()

    try:
        first = await fitter.fit(parse_request(body(30)), 2_000, salt="k1", summarizer=summarizer)
        assert first.method == "llm"
        assert first.checkpoint_saved
        calls = len(summarizer.calls)
        methods = []
        for turns in (31, 32, 33):
            request = parse_request(body(turns))
            fit = await fitter.fit(request, 2_000, salt="k1", summarizer=summarizer)
            methods.append(fit.method)
            assert fit.messages is not None
            assert fit.messages[0] == {"role": "system", "content": "You are terse."}
            assert "Summary: orders A-1000" in fit.messages[1]["content"]
            assert fit.messages[-1] == request.body["messages"][-1]
            assert fit.tokens <= 2_000
        assert methods == ["checkpoint"] * 3
        assert len(summarizer.calls) == calls  # reused: no summariser call
        other = await fitter.fit(parse_request(body(31)), 2_000, salt="k2", summarizer=summarizer)
        assert other.method == "llm"  # another caller's salt: summarised afresh
    finally:
        await engine.dispose()
