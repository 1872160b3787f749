"""A model's ``tokenizer.json`` from the environment or an admin model config: the
service, the proxy and the CLI count with it; a missing file falls back with a warning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("tokenizers")
from tokenizers import Tokenizer

from ctxstack.cli.chat import model_counter
from ctxstack.errors import InputError
from ctxstack.llm.config import tokenizer_path
from ctxstack.llm.stub.server import StubServer
from ctxstack.proxy.counting import ModelCounters
from ctxstack.server.app import create_app
from ctxstack.server.settings import Settings
from ctxstack.store import session_factory, upgrade
from ctxstack.store.db import create_engine_from_url
from ctxstack.store.model_configs import list_model_configs, set_model_config
from ctxstack.tokens import HEURISTIC, TokenizerJsonCounter, counter_for_model
from tests.tokenizer_support import build_tokenizer

TEXT = "Tokens before every call: the guard folds old messages. Unseen words like zebra."


def exact(path: Path, text: str = TEXT) -> int:
    return len(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)


@pytest.fixture
def tok(tmp_path: Path) -> Path:
    return build_tokenizer(tmp_path / "model-a" / "tokenizer.json")


@pytest.fixture
def tok_b(tmp_path: Path) -> Path:
    return build_tokenizer(tmp_path / "model-b" / "tokenizer.json", vocab_size=60)


def test_counter_for_model_counts_like_the_tokenizers_library(tok: Path, tok_b: Path) -> None:
    counter = counter_for_model("my-model", tok)
    assert isinstance(counter, TokenizerJsonCounter)
    assert counter.count_text(TEXT) == exact(tok)
    assert counter_for_model("my-model", tok_b).count_text(TEXT) == exact(tok_b)
    assert exact(tok) != exact(tok_b) != HEURISTIC.count_text(TEXT)  # the test can tell


def test_missing_tokenizer_falls_back_to_the_heuristic_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxstack.tokens._exact"):
        counter = counter_for_model("my-model", tmp_path / "nowhere" / "tokenizer.json")
    assert not isinstance(counter, TokenizerJsonCounter)
    assert counter.count_text(TEXT) == HEURISTIC.count_text(TEXT)
    assert "unavailable" in caplog.text
    assert "nowhere" in caplog.text


def test_environment_tokenizer_per_role() -> None:
    env = {"LLM_MODEL": "m", "LLM_TOKENIZER": " /t/main.json "}
    assert tokenizer_path("main", env) == "/t/main.json"
    assert tokenizer_path("fast", env) == "/t/main.json"  # the fast model is the main one
    assert tokenizer_path("fast", {**env, "FAST_LLM_MODEL": "m"}) == "/t/main.json"
    assert tokenizer_path("fast", {**env, "FAST_LLM_MODEL": "small"}) is None
    assert tokenizer_path("fast", {**env, "FAST_LLM_MODEL": "small",
                                   "FAST_LLM_TOKENIZER": "/t/fast.json"}) == "/t/fast.json"
    assert tokenizer_path("main", {}) is None
    settings = Settings.from_env({**env, "FAST_LLM_MODEL": "small"})
    assert (settings.llm_tokenizer, settings.fast_llm_tokenizer) == ("/t/main.json", None)


def test_cli_and_proxy_count_the_configured_model_with_its_tokenizer(
    tok: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_TOKENIZER", str(tok))

    class Named:
        model = "stub-model"

    assert model_counter(Named()).count_text(TEXT) == exact(tok)  # type: ignore[arg-type]
    counters = ModelCounters(tokenizer=("stub-model", str(tok)))
    assert counters.get("stub-model").count_text(TEXT) == exact(tok)
    assert asyncio.run(counters.aget("stub-model")).count_text(TEXT) == exact(tok)
    # Another model name is not counted with that model's tokenizer.
    assert counters.get("other-model").count_text(TEXT) == HEURISTIC.count_text(TEXT)


async def test_store_keeps_and_validates_the_tokenizer_path(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    await upgrade(url)
    engine = create_engine_from_url(url)
    factory = session_factory(engine)
    try:
        row = await set_model_config(factory, "main", "m", tokenizer_path=" /t/a.json ")
        assert row.tokenizer_path == "/t/a.json"
        for bad in ("", "  ", "a\x00b", "x" * 1001):
            with pytest.raises(InputError, match="tokenizer_path"):
                await set_model_config(factory, "main", "m", tokenizer_path=bad)
        assert [r.tokenizer_path for r in await list_model_configs(factory)] == ["/t/a.json"]
    finally:
        await engine.dispose()


# ---------------------------------------------------------------------------- service
@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@contextlib.asynccontextmanager
async def service(tmp_path: Path, env: dict[str, str],
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'svc.db'}"
    await upgrade(url)
    for name in ("LLM_TOKENIZER", "FAST_LLM_TOKENIZER", "FAST_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"CTXSTACK_DATABASE_URL": url, "CTXSTACK_FILES_DIR": str(tmp_path / "f"),
                        "CTXSTACK_AUTH": "none", **env}.items():
        monkeypatch.setenv(name, value)
    app = create_app(Settings.from_env())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield client, app


def stub_env(stub: StubServer, **extra: str) -> dict[str, str]:
    return {"LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "k", "LLM_MODEL": "stub-model", **extra}


def main_counter(app: Any) -> Any:
    counter = app.state.ctxstack.llms.counter("main")
    assert counter is not None
    return counter.base


async def test_service_counts_with_llm_tokenizer(
    tmp_path: Path, tok: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with service(tmp_path, stub_env(stub, LLM_TOKENIZER=str(tok)), monkeypatch) as (c, app):
        info = (await c.get("/api/info")).json()
        assert info["token_counters"] == {"main": "tokenizer.json", "fast": "tokenizer.json"}
        assert str(tok) not in str(info)  # a public endpoint names no server path
        assert main_counter(app).count_text(TEXT) == exact(tok)


async def test_admin_tokenizer_path_switches_the_main_counter_next_turn(
    tmp_path: Path, tok: Path, tok_b: Path, stub: StubServer,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async with service(tmp_path, stub_env(stub), monkeypatch) as (c, app):
        assert (await c.get("/api/info")).json()["token_counters"]["main"] == "bpe-heuristic"
        first = app.state.ctxstack.llms.counter("main")
        put = await c.put("/api/admin/model-configs/main", json={
            "model": "stub-model", "tokenizer_path": str(tok_b)})
        assert put.status_code == 200, put.text
        assert put.json()["tokenizer_path"] == str(tok_b)
        # The next turn's budget resolution (GET /api/info runs the same) follows it.
        info = (await c.get("/api/info")).json()
        assert info["token_counters"] == {"main": "tokenizer.json", "fast": "bpe-heuristic"}
        assert main_counter(app).count_text(TEXT) == exact(tok_b)
        switched = app.state.ctxstack.llms.counter("main")
        assert switched is not first
        await c.get("/api/info")  # unchanged config: the same counter (calibration kept)
        assert app.state.ctxstack.llms.counter("main") is switched
        listed = (await c.get("/api/admin/model-configs")).json()
        assert [r["tokenizer_path"] for r in listed] == [str(tok_b), None]

        # Invalid paths are refused; a missing file is accepted, warned about, and the
        # role counts with the heuristic — the turn is not failed.
        for bad in ("x" * 1001, "a\x00b", ""):
            response = await c.put("/api/admin/model-configs/main",
                                   json={"model": "stub-model", "tokenizer_path": bad})
            assert response.status_code == 422, bad
        missing = str(tmp_path / "gone" / "tokenizer.json")
        with caplog.at_level(logging.WARNING, logger="ctxstack.tokens._exact"):
            put = await c.put("/api/admin/model-configs/main",
                              json={"model": "stub-model", "tokenizer_path": missing})
            assert put.status_code == 200, put.text
            info = (await c.get("/api/info")).json()
        assert info["token_counters"]["main"] == "bpe-heuristic"
        assert "gone" in caplog.text
        assert main_counter(app).count_text(TEXT) == HEURISTIC.count_text(TEXT)


async def test_missing_llm_tokenizer_does_not_stop_the_service(
    tmp_path: Path, stub: StubServer, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = str(tmp_path / "absent" / "tokenizer.json")
    with caplog.at_level(logging.WARNING, logger="ctxstack.tokens._exact"):
        async with service(tmp_path, stub_env(stub, LLM_TOKENIZER=missing), monkeypatch) as (
                c, _app):
            response = await c.get("/api/info")
    assert response.status_code == 200
    assert response.json()["token_counters"]["main"] == "bpe-heuristic"
    assert "absent" in caplog.text
