"""What every request of one service process shares: settings, database, files, injects,
the model clients, and the turns running here.

Built once per process by the app's lifespan (:func:`open_state`) and closed with it; a
route reaches it through :func:`service_state`. Nothing here is per-user: ownership is
checked by the store functions each route calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, cast

from starlette.requests import Request

from ctxstack.budget import ModelBudget
from ctxstack.errors import ConfigError, CtxstackError
from ctxstack.protocol import LLM
from ctxstack.server.demo_model import DEMO_MODEL_NAME, build_demo_llm, demo_budget
from ctxstack.server.identity import CurrentUser, ensure_local_user
from ctxstack.server.inject_dispatch import InjectDispatcher
from ctxstack.server.injects import DbInjectQueue, InjectQueue, RedisInjectQueue
from ctxstack.server.settings import Settings
from ctxstack.server.streams import StreamHub
from ctxstack.store.calibration import load_calibration, save_calibration
from ctxstack.store.db import SessionFactory, create_engine_from_url, engine_of, session_factory
from ctxstack.store.files import FileStore
from ctxstack.store.history_messages import HistoryMessageCache
from ctxstack.store.model_configs import ModelConfigRecord, load_turn_models
from ctxstack.tokens import (
    CalibratingCounter,
    MeteredLLM,
    TokenCounter,
    TokenizerJsonCounter,
    UsageMeter,
    counter_for_model,
)

log = logging.getLogger(__name__)


Role = Literal["main", "fast"]
CounterKey = tuple[str | None, str | None]
"""(model name, ``tokenizer.json`` path) a role's counter was built for."""
CALIBRATION_SAVE_INTERVAL = 1.0
"""Seconds between two saves of a role's token calibration (see
:meth:`LLMProvider.persist_calibration`)."""


def calibration_key(role: Role, key: CounterKey) -> str:
    """The name a role's calibration is saved under: its model's name (``role:<role>``
    when unknown), plus a digest of the tokenizer path when one is set — a correction
    learned against one counting rule does not carry over to another."""
    model, path = key
    name = model or f"role:{role}"
    if path is None:
        return name
    return f"{name[:170]}#tokenizer:{hashlib.sha256(path.encode()).hexdigest()[:16]}"


def counter_name(counter: TokenCounter) -> str:
    """A counter's rule without file paths (``tokenizer.json``, ``tiktoken:o200k_base``,
    ``bpe-heuristic`` …): what ``GET /api/info`` reports per role."""
    return "tokenizer.json" if isinstance(counter, TokenizerJsonCounter) else counter.cache_key


class LLMProvider:
    """The model clients: the configured endpoint, or a fresh demo model per turn.

    Real clients are created once per process (their HTTP connection pools are shared by
    all turns); each turn wraps them in its own meter. The demo model is cheap and keeps a
    record of its calls, so each turn gets its own instance.

    Calibration (``CTXSTACK_CALIBRATE``, on by default): one
    :class:`~ctxstack.tokens.CalibratingCounter` per role lives as long as the
    process; every turn's metered models feed it the ``input_tokens`` the provider
    reports, and the turn's guard and memory count with it (:meth:`counter`), so the
    budget checks follow the real tokenizer after a few calls. Each worker process learns
    on its own. The service's counters only ever correct **upward** (``min_factor=1``):
    the guard must not believe a prompt fits when the provider would reject it, while an
    over-count only costs some unused window; and a model that bills less than the
    heuristic (the offline demo model bills exactly the heuristic for the messages and
    nothing for the tool specs) leaves the counts unchanged.
    """

    def __init__(
        self, settings: Settings, *, main: LLM | None = None, fast: LLM | None = None
    ) -> None:
        """``main``/``fast``: ready clients to use instead of the configured endpoint (an
        embedding application's own, or a test's); both or neither."""
        if (main is None) != (fast is None):
            raise ConfigError("LLMProvider: pass both main and fast clients, or neither")
        self.settings = settings
        self.save_interval = CALIBRATION_SAVE_INTERVAL
        self._main: LLM | None = main
        self._fast: LLM | None = fast
        if main is None and not settings.demo_model:
            from ctxstack.llm.openai import OpenAICompatibleLLM

            # A call may take at most LLM_TIMEOUT / FAST_LLM_TIMEOUT seconds in all: each
            # attempt is bounded by it, and no retry starts once that much time is spent.
            main_s, fast_s = settings.llm_timeout, settings.fast_timeout
            self._main = OpenAICompatibleLLM.from_env("main", timeout=main_s,
                                                      max_retry_time=main_s)
            self._fast = OpenAICompatibleLLM.from_env("fast", timeout=fast_s,
                                                      max_retry_time=fast_s)
        # Each role counts with its model's own tokenizer when it is available offline
        # (ctxstack.tokens._exact: a tokenizer.json from LLM_TOKENIZER / an admin model
        # config, else tiktoken by model name), else the heuristic with matching weights.
        self._factory: SessionFactory | None = None
        self._saves: set[asyncio.Task[None]] = set()
        self._follow_lock = asyncio.Lock()
        self._keys: dict[Role, CounterKey] = {}
        self._counters: dict[Role, CalibratingCounter] = {}
        if settings.calibrate:
            for role in ("main", "fast"):
                self._keys[role] = self._env_key(role)
                self._counters[role] = CalibratingCounter(
                    counter_for_model(*self._keys[role]), model=role, min_factor=1.0)

    async def persist_calibration(self, factory: SessionFactory) -> None:
        """Start each role's counter from what was saved for its model (by any worker, any
        earlier run), and save it again after accepted samples (one save in flight per role,
        at most one per ``save_interval`` seconds, the latest state always saved last; a
        failed save is logged, never raised into a turn). Counters built later by
        :meth:`follow` are persisted the same way."""
        self._factory = factory
        for role, counter in self._counters.items():
            await self._attach(role, counter, self._keys[role])

    async def _attach(self, role: Role, counter: CalibratingCounter, key: CounterKey) -> None:
        factory = self._factory
        if factory is None:
            return
        name = calibration_key(role, key)
        try:
            saved = await load_calibration(factory, name)
        except CtxstackError:
            log.warning("token calibration for %s not loaded", name, exc_info=True)
            saved = None
        if saved is not None:
            counter.load_state(saved)
        counter.listeners.append(self._saver(factory, name))

    def _env_key(self, role: Role) -> CounterKey:
        path = self.settings.llm_tokenizer if role == "main" else self.settings.fast_llm_tokenizer
        return self._model_of(role), path

    def _key_for(self, role: Role, row: ModelConfigRecord | None) -> CounterKey:
        """(model, tokenizer path) a role should count with: the active admin config's,
        else the environment's. A config without a path keeps the environment's tokenizer
        only when it names the environment's model."""
        env_model, env_path = self._env_key(role)
        if row is None:
            return env_model, env_path
        return row.model, row.tokenizer_path or (env_path if row.model == env_model else None)

    async def follow(self, main: ModelConfigRecord | None, fast: ModelConfigRecord | None) -> None:
        """Make each role's counter follow its active model config (read every turn).

        A role's counter is replaced only when its (model, tokenizer path) changed: the new
        one starts from the calibration saved for that pair and is persisted like the
        first. Turns already running keep the counter they started with. Building never
        fails: an unavailable tokenizer logs a warning and counts with the heuristic.
        """
        for role, row in (("main", main), ("fast", fast)):
            role = cast(Role, role)
            if role not in self._counters or self._key_for(role, row) == self._keys[role]:
                continue
            async with self._follow_lock:
                key = self._key_for(role, row)
                if key == self._keys[role]:
                    continue
                base = await asyncio.to_thread(counter_for_model, *key)
                counter = CalibratingCounter(base, model=role, min_factor=1.0)
                await self._attach(role, counter, key)
                self._counters[role], self._keys[role] = counter, key
                log.info("%s model counter: %s for %s", role, counter_name(base), key[0])

    def counter_names(self) -> dict[str, str]:
        """The counting rule of each role's counter (:func:`counter_name`)."""
        return {role: counter_name(c.base) for role, c in self._counters.items()}

    def _saver(self, factory: SessionFactory, key: str) -> Callable[[CalibratingCounter], None]:
        busy: dict[str, bool] = {"running": False, "dirty": False}

        async def save(counter: CalibratingCounter) -> None:
            try:
                while True:
                    busy["dirty"] = False
                    await save_calibration(factory, key, counter.export_state())
                    # At most one write per interval: under load every model call is a
                    # sample, and a write per call would compete with the turns' own.
                    await asyncio.sleep(self.save_interval)
                    if not busy["dirty"]:
                        return
            except CtxstackError:
                log.warning("token calibration for %s not saved", key, exc_info=True)
            finally:
                busy["running"] = False

        def listener(counter: CalibratingCounter) -> None:
            busy["dirty"] = True
            if busy["running"]:
                return
            busy["running"] = True
            task = asyncio.get_running_loop().create_task(save(counter))
            self._saves.add(task)
            task.add_done_callback(self._saves.discard)

        return listener

    def _model_of(self, role: Role) -> str | None:
        client = self._main if role == "main" else self._fast
        name = getattr(client, "model", None)
        if role == "main" and self.settings.llm_model:
            return self.settings.llm_model
        return name if isinstance(name, str) else None

    @property
    def is_demo(self) -> bool:
        """True when the offline demo model answers (no endpoint, no injected clients)."""
        return self._main is None

    @property
    def model_name(self) -> str:
        if self._main is None:
            return DEMO_MODEL_NAME
        return self.settings.llm_model or str(getattr(self._main, "model", "unknown"))

    def counter(self, role: Role) -> CalibratingCounter | None:
        """The process-wide calibrating counter of ``role`` (None when disabled)."""
        return self._counters.get(role)

    def for_turn(
        self, main: ModelBudget, fast: ModelBudget, meter: UsageMeter
    ) -> tuple[LLM, LLM]:
        """Metered (main, fast) models for one turn, sized to the resolved budgets; they
        feed the roles' calibrating counters."""
        if self._main is None or self._fast is None:
            delay, chunk_delay = self.settings.demo_delay, self.settings.demo_chunk_delay
            main_llm: LLM = build_demo_llm(delay=delay, chunk_delay=chunk_delay,
                                           context_size=main.context_size,
                                           max_output_tokens=main.max_output_tokens)
            fast_llm: LLM = build_demo_llm(delay=delay, chunk_delay=chunk_delay,
                                           context_size=fast.context_size,
                                           max_output_tokens=fast.max_output_tokens)
        else:
            main_llm, fast_llm = self._main, self._fast
        return (MeteredLLM(main_llm, meter, calibrate=self.counter("main")),
                MeteredLLM(fast_llm, meter, calibrate=self.counter("fast")))

    async def aclose(self) -> None:
        saves = list(self._saves)
        if saves:
            await asyncio.wait(saves, timeout=5.0)
        for client in {id(c): c for c in (self._main, self._fast) if c is not None}.values():
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()


@dataclass
class ServiceState:
    """The per-process service state (see the module docstring)."""

    settings: Settings
    factory: SessionFactory
    files: FileStore
    injects: InjectQueue
    llms: LLMProvider
    local_user: CurrentUser
    turns: set[asyncio.Task[None]] = field(default_factory=set)
    history_cache: HistoryMessageCache = field(default_factory=HistoryMessageCache)
    """The history messages the last loads built, reused by the next turn's load when
    their rows are unchanged (:class:`~ctxstack.store.memory.DbMemory`'s
    ``message_cache``)."""
    inject_poller: InjectDispatcher = field(init=False)
    """The worker's one poller of :attr:`injects` for all its running turns."""
    streams: StreamHub = field(init=False)
    """The turns' recorded SSE streams (:mod:`ctxstack.server.streams`)."""

    def __post_init__(self) -> None:
        self.inject_poller = InjectDispatcher(self.injects)
        self.streams = StreamHub.open(self.settings, self.factory)

    async def budgets(self) -> tuple[ModelBudget, ModelBudget]:
        """(main, fast) budgets: admin model configs first, then env, then defaults (the
        demo model's declared 8K window replaces the defaults when it answers). The roles'
        counters follow the active configs (:meth:`LLMProvider.follow`)."""
        env = self.settings.budget_env
        models = await load_turn_models(self.factory, env=env)
        await self.llms.follow(models.main_config, models.fast_config)
        main, fast = models.main, models.fast
        if self.llms.is_demo:  # the demo model declares its own small window
            return demo_budget(main), demo_budget(fast)
        return main, fast

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep a running turn referenced until it ends (it outlives its HTTP response
        when the client disconnects, to save what it produced)."""
        self.turns.add(task)
        task.add_done_callback(self.turns.discard)


def service_state(request: Request) -> ServiceState:
    """The state of the app serving ``request``."""
    state: ServiceState = request.app.state.ctxstack
    return state


async def open_state(settings: Settings, *, factory: SessionFactory | None = None) -> ServiceState:
    """Connect everything a process needs (the database must already be migrated)."""
    if factory is None:
        engine = create_engine_from_url(settings.database_url, schema=settings.database_schema,
                                        connect_timeout=settings.db_connect_timeout,
                                        statement_timeout=settings.db_statement_timeout,
                                        pool_size=settings.db_pool_size)
        factory = session_factory(engine)
    files = FileStore(factory, settings.files_dir, max_bytes=settings.max_upload_bytes)
    injects: InjectQueue = (
        RedisInjectQueue(settings.redis_url, stale_after=settings.turn_lease,
                         timeout=settings.redis_timeout)
        if settings.redis_url else DbInjectQueue(factory, stale_after=settings.turn_lease)
    )
    user_id, name = await ensure_local_user(factory, settings.local_user) if (
        settings.auth == "none") else (0, "")
    local = CurrentUser(id=user_id, name=name, is_admin=True)
    llms = LLMProvider(settings)
    await llms.persist_calibration(factory)
    return ServiceState(settings=settings, factory=factory, files=files, injects=injects,
                        llms=llms, local_user=local)


async def close_state(state: ServiceState, *, grace: float = 10.0) -> None:
    """Stop: let running turns save (cancelling them after ``grace`` s), then disconnect."""
    pending = [t for t in state.turns if not t.done()]
    if pending:
        _, late = await asyncio.wait(pending, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=grace)
    await state.inject_poller.close()
    await state.streams.close()
    await state.injects.close()
    await state.llms.aclose()
    await engine_of(state.factory).dispose()
    log.info("ctxstack service stopped")
