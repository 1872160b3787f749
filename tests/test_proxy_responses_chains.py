"""The conversations behind ``previous_response_id``: shared by workers through the
database (SQLite and PostgreSQL), ``store: false`` never written, never shared across
callers, bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ctxstack.proxy.responses_chains import ChainStore, owner_key
from ctxstack.store import SessionFactory, session_factory, upgrade
from ctxstack.store.proxy_responses import count_proxy_responses, prune_proxy_responses
from tests.store.dbkit import Backend, postgres_backend


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def factory(request: pytest.FixtureRequest, tmp_path: Path,
                  ) -> AsyncIterator[SessionFactory]:
    if request.param == "sqlite":
        backend = Backend("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'chains.db'}")
        engine = backend.engine()
        await upgrade(engine)
        yield session_factory(engine)
        await engine.dispose()
        return
    async for pg in postgres_backend():
        engine = pg.engine()
        await upgrade(engine)
        yield session_factory(engine)
        await engine.dispose()


def _turn(n: int) -> list[dict[str, object]]:
    return [{"role": "user", "content": f"question {n}"},
            {"type": "message", "role": "assistant", "id": f"msg_{n}",
             "content": [{"type": "output_text", "text": f"answer {n}"}]}]


async def test_a_chain_is_found_by_another_worker_in_order(factory: SessionFactory) -> None:
    one = ChainStore(factory, ttl_seconds=3600)
    other = ChainStore(factory, ttl_seconds=3600)
    owner = owner_key("anonymous", {"authorization": "Bearer a"})
    parent = None
    for n in range(5):
        await one.remember(owner, f"resp_{n}", parent, "m", _turn(n), persist=True)
        parent = f"resp_{n}"
    found = await other.conversation(owner, "resp_4")
    assert found == [item for n in range(5) for item in _turn(n)]
    assert await other.conversation(owner, "resp_2") == found[:6]
    # Another caller (another key) never sees it.
    stranger = owner_key("anonymous", {"authorization": "Bearer b"})
    assert await other.conversation(stranger, "resp_4") is None


async def test_store_false_lives_only_in_the_worker_that_relayed_it(
        factory: SessionFactory) -> None:
    one = ChainStore(factory, ttl_seconds=3600)
    other = ChainStore(factory, ttl_seconds=3600)
    owner = owner_key("anonymous", {})
    await one.remember(owner, "resp_a", None, "m", _turn(0), persist=False)
    await one.remember(owner, "resp_b", "resp_a", "m", _turn(1), persist=False)
    assert await one.conversation(owner, "resp_b") == [*_turn(0), *_turn(1)]
    assert await other.conversation(owner, "resp_b") is None
    assert await count_proxy_responses(factory) == 0


async def test_a_chain_whose_start_is_unknown_is_none_and_memory_is_bounded(
        factory: SessionFactory) -> None:
    store = ChainStore(factory, ttl_seconds=3600, memory_chars=400)
    owner = owner_key("anonymous", {})
    await store.remember(owner, "resp_2", "resp_1", "m", _turn(2), persist=False)
    assert await store.conversation(owner, "resp_2") is None  # resp_1 never seen
    for n in range(10):
        await store.remember(owner, f"r{n}", None, "m", _turn(n), persist=False)
    assert await store.conversation(owner, "r0") is None  # dropped for room
    assert await store.conversation(owner, "r9") == _turn(9)


async def test_rows_are_pruned_to_the_newest(factory: SessionFactory) -> None:
    store = ChainStore(factory, ttl_seconds=3600)
    owner = owner_key("anonymous", {})
    for n in range(6):
        await store.remember(owner, f"resp_{n}", None, "m", _turn(n), persist=True)
    await prune_proxy_responses(factory, max_rows=2)
    assert await count_proxy_responses(factory) == 2
    fresh = ChainStore(factory, ttl_seconds=3600)
    assert await fresh.conversation(owner, "resp_5") == _turn(5)
    assert await fresh.conversation(owner, "resp_0") is None
