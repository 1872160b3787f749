"""``GET /ctxstack/stats`` reports every proxy worker sharing the database (SQLite,
PostgreSQL), not only the one that answers; without the database, its own totals, marked.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import httpx

from ctxstack.llm.stub import StubServer
from ctxstack.proxy import ProxySettings, ProxyStats, create_app
from ctxstack.proxy.stats import SharedStats, StatsRecorder
from ctxstack.store import create_engine_from_url, session_factory, upgrade
from ctxstack.store.proxy_stats import add_proxy_stats, load_proxy_stats
from tests.store.dbkit import Backend


async def _client(stack: AsyncExitStack, settings: ProxySettings) -> httpx.AsyncClient:
    app = create_app(settings)
    await stack.enter_async_context(app.router.lifespan_context(app))
    return await stack.enter_async_context(httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30))


async def test_stats_add_up_every_worker(backend: Backend, stub: StubServer) -> None:
    stub.rule = lambda r: "ok"
    engine = backend.engine()
    await upgrade(engine)
    await engine.dispose()
    # A long flush interval: only the stats requests themselves write, so the test does
    # not depend on timing.
    settings = ProxySettings(upstream=stub.base_url, database_url=backend.url,
                             database_schema=backend.schema, stats_flush_interval=3600)
    hi = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
    async with AsyncExitStack() as stack:
        first, second = [await _client(stack, settings) for _ in range(2)]
        before = ProxyStats.model_validate((await first.get("/ctxstack/stats")).json())
        for _ in range(3):
            assert (await first.post("/v1/chat/completions", json=hi)).status_code == 200
        for _ in range(2):
            assert (await second.post("/v1/chat/completions", json=hi)).status_code == 200
        assert (await second.post("/v1/chat/completions", content=b"{")).status_code == 400
        # The first worker has not seen the second's counts yet (not flushed): its own
        # are always included.
        own = ProxyStats.model_validate((await first.get("/ctxstack/stats")).json())
        assert own.requests - before.requests == 3
        # A stats request on the second writes its counts; now either answers for both.
        both = [ProxyStats.model_validate((await c.get("/ctxstack/stats")).json())
                for c in (second, first)]
    for stats in both:
        assert stats.scope == "all"
        assert stats.requests - before.requests == 6
        assert stats.bad_requests - before.bad_requests == 1
        assert stats.compactions["none"] - before.compactions["none"] == 5
        assert stats.forwarded - before.forwarded == 5
    # Closing a worker writes what it had left: the stored totals match.
    engine = backend.engine()
    stored = ProxyStats.from_flat(await load_proxy_stats(session_factory(engine)))
    await engine.dispose()
    assert stored.requests - before.requests == 6


async def test_increments_from_concurrent_writers_are_never_lost(tmp_path: Path) -> None:
    import asyncio

    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'add.db'}")
    await upgrade(engine)
    factory = session_factory(engine)
    await asyncio.gather(*(add_proxy_stats(factory, {"requests": 1, "compactions.llm": 2})
                           for _ in range(20)))
    totals = await load_proxy_stats(factory)
    assert totals == {"requests": 20, "compactions.llm": 40}
    await engine.dispose()


async def test_without_the_database_a_worker_reports_its_own_and_keeps_its_counts(
        tmp_path: Path) -> None:
    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'none.db'}")  # no tables
    factory = session_factory(engine)
    recorder = StatsRecorder()
    shared = SharedStats(recorder, factory, interval=3600)
    recorder.bump("requests", 4)
    recorder.upstream_error(429)
    stats = await shared.totals()
    assert stats.scope == "worker"
    assert stats.requests == 4
    assert stats.upstream_errors == {"429": 1}
    # Once the table exists, the counts kept are written with the next flush.
    await upgrade(engine)
    assert await shared.flush()
    assert await load_proxy_stats(factory) == {"requests": 4, "upstream_errors.429": 1}
    await engine.dispose()


async def test_a_request_within_budget_never_waits_for_the_database(
        tmp_path: Path, stub: StubServer) -> None:
    """No query on the within-budget path (checkpoints are looked up only to compact), and
    an expired budget is re-read in the background while the request goes on."""
    import asyncio

    from sqlalchemy import event

    from ctxstack.store.db import engine_of

    stub.rule = lambda r: "ok"
    url = f"sqlite+aiosqlite:///{tmp_path / 'fast.db'}"
    settings = ProxySettings(upstream=stub.base_url, database_url=url,
                             stats_flush_interval=3600)
    hi = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
    app = create_app(settings, migrate=True)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        client = await stack.enter_async_context(httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30))
        assert (await client.post("/v1/chat/completions", json=hi)).status_code == 200
        state = app.state.proxy
        statements: list[str] = []
        event.listen(engine_of(state.factory).sync_engine, "before_cursor_execute",
                     lambda *args: statements.append(args[2]))
        for _ in range(5):
            assert (await client.post("/v1/chat/completions", json=hi)).status_code == 200
        assert statements == []
        # The budget's cache expires and the database hangs: requests are not held up.
        release = asyncio.Event()
        reads = 0

        async def hanging(model: str) -> object:
            nonlocal reads
            reads += 1
            await release.wait()
            raise RuntimeError("the database went away")

        state.budgets.ttl = 0
        state.budgets._cache = {k: (0.0, v[1]) for k, v in state.budgets._cache.items()}
        state.budgets._resolve = hanging
        try:
            for _ in range(3):
                response = await asyncio.wait_for(
                    client.post("/v1/chat/completions", json=hi), timeout=20)
                assert response.status_code == 200
            assert reads == 1  # one background re-read in flight, not one per request
        finally:
            release.set()


def test_usage_per_wire_and_model_has_one_shape_and_older_keys_still_count() -> None:
    """``by_model[wire][model]`` carries every per-model figure of every wire (the only
    per-model object in the answer); a database written by an older proxy (``by_wire.*`` keys, ``cache_tokens.*`` keys written beside ``by_model``
    ones) adds up without counting anything twice."""
    from ctxstack.proxy.recall import UpstreamUsage

    recorder = StatsRecorder()
    recorder.wire("responses", "gpt-x", requests=1, forwarded=1, input_tokens=10)
    recorder.wire("responses", "gpt-x", cache_read_tokens=7)
    recorder.usage("anthropic", "claude-x", UpstreamUsage(5, 2, 3, 4, 2), rounds=1)
    older = {"by_wire.responses.gpt-x.requests": 2,
             "cache_tokens.anthropic:claude-x:cache_read_tokens": 3,
             "by_model|anthropic|claude-x|cache_read_tokens": 3}
    stats = ProxyStats.from_flat({**older, **{
        k: v + older.get(k, 0) for k, v in recorder.pending().items()}})
    gpt, claude = stats.by_model["responses"]["gpt-x"], stats.by_model["anthropic"]["claude-x"]
    assert (gpt.requests, gpt.forwarded, gpt.input_tokens, gpt.cache_read_tokens) == (3, 1, 10, 7)
    assert (claude.responses, claude.input_tokens, claude.output_tokens, claude.recall_rounds,
            claude.cache_read_tokens, claude.cache_write_tokens) == (2, 5, 2, 1, 6, 4)
    assert set(stats.model_dump()) & {"cache_tokens", "by_wire"} == set()
