"""The proxy's workers keep the objects loaded at start out of the cyclic garbage
collector's full collections (``create_app(freeze_gc=True)``, what ``ctxstack proxy``
workers run through ``app_from_env``); an app embedded in another process leaves that
process's collector alone unless asked."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import AsyncExitStack

import httpx
import pytest

from ctxstack.proxy import ProxySettings
from ctxstack.proxy.app import app_from_env, create_app
from tests.proxy_support import app_client


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _settings(db_url: str) -> ProxySettings:
    return ProxySettings(upstream="http://127.0.0.1:9/v1", database_url=db_url)


async def test_a_worker_app_freezes_what_it_loaded_at_start(proxy_db_url: str,
                                                             unfrozen: None) -> None:
    app = app_from_env({"CTXSTACK_PROXY_UPSTREAM": "http://127.0.0.1:9/v1",
                        "CTXSTACK_DATABASE_URL": proxy_db_url})
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 0


async def test_an_embedded_app_leaves_the_collector_alone(proxy_db_url: str,
                                                          unfrozen: None) -> None:
    async with AsyncExitStack() as stack:
        client = await app_client(stack, _settings(proxy_db_url))
        assert (await client.get("/ctxstack/health")).status_code == 200
        assert gc.get_freeze_count() == 0


async def test_a_frozen_app_serves_requests(proxy_db_url: str, unfrozen: None) -> None:
    app = create_app(_settings(proxy_db_url), freeze_gc=True)
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 0
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://127.0.0.1") as client:
            assert (await client.get("/ctxstack/health")).status_code == 200
