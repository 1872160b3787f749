"""The input budget of each requested model, and the summariser that serves it.

Budget sources, first that has a number wins (DESIGN §3 layer 5, per model name): the
active database model config whose ``model`` is the requested name (the ``main`` row
before the ``fast`` one), then ``LLM_CONTEXT_SIZE`` / ``LLM_MAX_OUTPUT_TOKENS``, then the
defaults. Answers are cached for a few seconds per model, so an admin's change reaches
every worker quickly while a request costs no query: after the first request of a model,
an expired answer is still used while a background task reads the new one (no request
waits for the database); a database failure falls back to the environment (logged), never
fails the request.

The summariser is ``FAST_LLM_*`` when configured, else the upstream itself asked with the
request's own model (and budget). With ``--forward-auth`` and no ``LLM_API_KEY`` the
client's ``Authorization`` is used for summary calls too: it is the only key there is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from sqlalchemy import case, select

from ctxstack import ModelBudget, resolve_budget
from ctxstack.errors import ConfigError
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.retry import RetryPolicy
from ctxstack.proxy.settings import ProxySettings
from ctxstack.store import SessionFactory
from ctxstack.store.db import reading
from ctxstack.store.errors import StorageError
from ctxstack.store.models import ModelConfig

log = logging.getLogger("ctxstack.proxy")

CACHE_SECONDS = 5.0
MAX_CACHED = 256


class ModelBudgets:
    """``await budgets.get(model)`` → the model's :class:`~ctxstack.ModelBudget`."""

    def __init__(self, factory: SessionFactory | None, env: Mapping[str, str], *,
                 ttl: float = CACHE_SECONDS) -> None:
        self.factory = factory
        self.env = dict(env)
        self.ttl = ttl
        self._cache: dict[str, tuple[float, ModelBudget]] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}

    async def get(self, model: str) -> ModelBudget:
        hit = self._cache.get(model)
        if hit is None:
            return await self._load(model)
        if hit[0] <= time.monotonic() and model not in self._refreshing:
            task = asyncio.get_running_loop().create_task(self._refresh(model))
            self._refreshing[model] = task
        return hit[1]

    async def _load(self, model: str) -> ModelBudget:
        budget = await self._resolve(model)
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[model] = (time.monotonic() + self.ttl, budget)
        return budget

    async def _refresh(self, model: str) -> None:
        try:
            await self._load(model)
        except Exception:  # keep serving the cached budget; the next request retries
            log.warning("proxy: re-reading the budget of %r failed", model, exc_info=True)
        finally:
            self._refreshing.pop(model, None)

    async def aclose(self) -> None:
        """Wait for refreshes in flight (they use the database the app is closing)."""
        if self._refreshing:
            await asyncio.gather(*self._refreshing.values(), return_exceptions=True)

    async def _resolve(self, model: str) -> ModelBudget:
        row: ModelConfig | None = None
        if self.factory is not None:
            stmt = (select(ModelConfig)
                    .where(ModelConfig.model == model, ModelConfig.active.is_(True))
                    .order_by(case((ModelConfig.role == "main", 0), else_=1))
                    .limit(1))
            try:
                async with reading(self.factory, f"loading the budget of {model!r}") as s:
                    row = await s.scalar(stmt)
            except StorageError as exc:
                log.warning("proxy: model configs unavailable, using the environment: %s", exc)
        try:
            return resolve_budget("main", model_config=row, env=self.env)
        except ConfigError as exc:
            log.warning("proxy: bad budget for %r (%s); using the defaults", model, exc)
            return resolve_budget("main", env={})


class Summarizers:
    """The summariser LLM per model (one pooled client each, closed with the app)."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self._by_model: dict[str, OpenAICompatibleLLM] = {}

    def get(self, model: str, budget: ModelBudget,
            client_auth: str | None = None) -> tuple[OpenAICompatibleLLM, bool]:
        """The summariser for a request of ``model``; the flag says the caller must close
        it (a per-request client carrying the client's own key)."""
        s = self.settings
        base = s.summarizer_base_url or s.upstream
        name = s.summarizer_model or model
        key = s.summarizer_api_key
        own = key is None and s.forward_auth and client_auth is not None
        if not own:
            found = self._by_model.get(name)
            if found is not None:
                return found, False
        options = {"extra_headers": {"Authorization": client_auth}} if own else None
        llm = OpenAICompatibleLLM(
            base_url=base, api_key=key or "unused", model=name,
            budget=budget if not s.summarizer_configured else resolve_budget(
                "fast", env=s.budget_env),
            timeout=s.summary_timeout,
            retry_policy=RetryPolicy(max_attempts=2, base_delay=0.2, max_delay=1.0,
                                     max_total_time=s.summary_timeout),
            default_options=options,
        )
        if own:
            return llm, True
        self._by_model[name] = llm
        return llm, False

    async def aclose(self) -> None:
        for llm in self._by_model.values():
            await llm.aclose()
        self._by_model.clear()
