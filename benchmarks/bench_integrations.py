"""Framework adapters (LangChain v1 middleware, pydantic-ai history processor): cost and validity.

**Overhead per model call, under budget, conversion included.** Each adapter runs before
every model call of its framework, so its common case — the conversation fits — must be
cheap. The scenario is the steady state of a long agent run at 200 messages: the adapter
has seen the first 198 messages on the previous call and two new ones (an assistant tool
call and its ~1,000-character result, fresh objects) were appended since. A LangChain call
is ``abefore_model`` plus ``awrap_model_call`` (with a handler that returns at once); a
pydantic-ai call is one run of the history processor. Target ≤ 0.5 ms. Baseline, measured
in the same run: the bare guard on the same conversation already in ctxstack's form (the
ratio shows what conversion adds).

**Cold conversion**: the first call of a resumed thread converts every message (reported).

**LangChain's own ``trim_messages``** on the same inputs: its time per call under budget
(``token_counter=count_tokens_approximately``, ``strategy="last"``, ``include_system``), and,
over a sweep of budgets that force cutting, how often its output is valid by LangChain's
rules (every ``AIMessage`` tool call answered right after it, no orphan ``ToolMessage``,
the latest user message kept), with its defaults and with ``start_on="human"`` — next to
the middleware's validity on the same sweep (which holds by construction: an invariant),
and how much of the budget each valid method keeps (``start_on="human"`` is valid because
it drops every turn before the latest user message, tool results included).

Run: ``python -m benchmarks.bench_integrations [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root / "src"), str(_root)]

from langchain.agents.middleware import ModelRequest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.messages.utils import count_tokens_approximately
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import ModelRequest as PaiRequest

from benchmarks.common import BenchRow, no_gc, print_table
from ctxstack import ContextGuard
from ctxstack.integrations import _langchain_messages as lc_conv
from ctxstack.integrations import _pydantic_ai_messages as pai_conv
from ctxstack.integrations.langchain import ContextGuardMiddleware
from ctxstack.integrations.pydantic_ai import history_processor

TITLE = "Framework adapters: LangChain middleware, pydantic-ai history processor"
SIZE = 200
ROOMY = 1_000_000
TARGET_MS = 0.5
SMOKE_ENV = "CTXSTACK_BENCH_SMOKE"
SYSTEM = "You are a research agent. Cite every figure. " * 6
DEFAULT_GUARD = ContextGuard()


def _smoke() -> bool:
    return os.environ.get(SMOKE_ENV, "") not in ("", "0")


# ---------------------------------------------------------------------- conversations
def _lc_round(i: int) -> list[BaseMessage]:
    body = "".join(f"row {j}: value {i * j} units; ok\n" for j in range(40))[:1_000]
    return [AIMessage(f"Fetching page {i}.", id=f"a{i}",
                      tool_calls=[{"name": "fetch", "args": {"page": i}, "id": f"c{i}"}]),
            ToolMessage(body, tool_call_id=f"c{i}", id=f"t{i}")]


def _lc_conversation(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage("Fetch every page and total the values.", id="h0")]
    i = 0
    while len(out) + 2 <= n:  # whole rounds only: a tool call always has its result
        out += _lc_round(i)
        i += 1
    return out


def _pai_round(i: int) -> list[ModelMessage]:
    body = "".join(f"row {j}: value {i * j} units; ok\n" for j in range(40))[:1_000]
    return [ModelResponse(parts=[TextPart(f"Fetching page {i}."),
                                 ToolCallPart("fetch", {"page": i}, f"c{i}")]),
            PaiRequest(parts=[ToolReturnPart("fetch", body, f"c{i}")])]


def _pai_conversation(n: int) -> list[ModelMessage]:
    out: list[ModelMessage] = [PaiRequest(parts=[SystemPromptPart(SYSTEM),
                                                 UserPromptPart("Fetch every page.")])]
    i = 0
    while len(out) + 2 <= n:
        out += _pai_round(i)
        i += 1
    return out


# ---------------------------------------------------------------------- timing
def _steady(call: Callable[[list[Any]], Awaitable[object]], base: list[Any],
            fresh: Callable[[int], list[Any]], repeats: int) -> float:
    """Median ms of ``call`` on base[:-2] + two fresh messages, after a call on base[:-2]."""
    async def go() -> list[float]:
        times = []
        prefix = base[:-2]
        await call(prefix)  # the adapter has seen the older messages
        for r in range(repeats):
            conversation = [*prefix, *fresh(10_000 + r)]
            start = time.perf_counter()
            await call(conversation)
            times.append((time.perf_counter() - start) * 1e3)
            await call(prefix)
        return times

    with no_gc():
        return statistics.median(asyncio.run(go()))


def _timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    with no_gc():
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# ---------------------------------------------------------------------- LangChain
def _langchain_rows(repeats: int, budgets: Sequence[int]) -> list[BenchRow]:
    guard = ContextGuard()
    middleware = ContextGuardMiddleware(guard, ROOMY)
    model = GenericFakeChatModel(messages=iter(()))
    system = SystemMessage(SYSTEM)
    sentinel = object()

    async def handler(request: ModelRequest[Any]) -> Any:
        return sentinel

    async def per_call(messages: list[BaseMessage]) -> object:
        update = await middleware.abefore_model({"messages": messages}, None)  # type: ignore[arg-type]
        assert update is None  # under budget: the state is left alone
        request = ModelRequest(model=model, messages=messages, system_message=system)
        return await middleware.awrap_model_call(request, handler)

    base = _lc_conversation(SIZE - 1)  # + the system prompt = SIZE messages per call
    mw_ms = _steady(per_call, base, _lc_round, repeats)
    bare_cms = [lc_conv.to_chat_message(m) for m in [system, *base]]

    async def bare(cms: list[Any]) -> object:
        return await guard.check_and_compact(cms, ROOMY)

    bare_ms = _steady(bare, bare_cms, lambda i: lc_conv.to_chat_messages(_lc_round(i)), repeats)
    cold_ms = _timed(lambda: lc_conv.to_chat_messages([system, *base]), max(3, repeats // 10))
    trim_ms = _timed(lambda: trim_messages([system, *base], max_tokens=ROOMY, strategy="last",
                                           token_counter=count_tokens_approximately,
                                           include_system=True), max(5, repeats // 4))
    valid = _validity(base, system, budgets)
    n = len(budgets)
    return [
        BenchRow(f"LangChain middleware per model call, {SIZE} msgs, under budget",
                 mw_ms, "ms", baseline=bare_ms, ratio=mw_ms / bare_ms if bare_ms else None,
                 target=f"≤ {TARGET_MS} ms (baseline: bare guard, no conversion)",
                 met=mw_ms <= TARGET_MS),
        BenchRow(f"LangChain trim_messages per call, same {SIZE} msgs (reference)",
                 trim_ms, "ms", baseline=mw_ms, ratio=trim_ms / mw_ms if mw_ms else None,
                 target="reported (ratio: trim_messages / middleware)"),
        BenchRow(f"LangChain cold conversion of {SIZE} msgs (first call of a thread)",
                 cold_ms, "ms", target="reported"),
        BenchRow(f"valid outputs over {n} cutting budgets: middleware (invariant)",
                 valid["middleware"], "%", target="100%", met=valid["middleware"] == 100.0),
        BenchRow(f"valid outputs over {n} cutting budgets: trim_messages defaults",
                 valid["trim"], "%", baseline=valid["middleware"], target="reported"),
        BenchRow(f"valid outputs over {n} cutting budgets: trim_messages start_on='human'",
                 valid["trim_human"], "%", baseline=valid["middleware"], target="reported"),
        BenchRow("share of the budget kept (mean, ctxstack's count): middleware",
                 valid["fill_middleware"], "%", baseline=valid["fill_trim_human"],
                 ratio=(valid["fill_middleware"] / valid["fill_trim_human"]
                        if valid["fill_trim_human"] else None),
                 target="reported (baseline: trim_messages start_on='human')"),
    ]


def _validity(base: list[BaseMessage], system: SystemMessage,
              budgets: Sequence[int]) -> dict[str, float]:
    """Share of outputs valid by LangChain's rules, per method, over ``budgets``."""
    conversation = [system, *base, HumanMessage("And the total?", id="hq")]
    ok = {"middleware": 0, "trim": 0, "trim_human": 0}
    fill = {"middleware": 0.0, "trim_human": 0.0}
    for budget in budgets:
        middleware = ContextGuardMiddleware(ContextGuard(), budget)
        update = asyncio.run(middleware.abefore_model({"messages": conversation}, None))  # type: ignore[arg-type]
        fitted = conversation if update is None else update["messages"][1:]
        ok["middleware"] += _valid(fitted)
        common: dict[str, Any] = {"max_tokens": budget, "strategy": "last",
                                  "token_counter": count_tokens_approximately,
                                  "include_system": True}
        ok["trim"] += _valid(trim_messages(conversation, **common))
        human = trim_messages(conversation, start_on="human", **common)
        ok["trim_human"] += _valid(human)
        fill["middleware"] += _tokens(fitted) / budget
        fill["trim_human"] += _tokens(human) / budget
    out = {k: 100.0 * v / len(budgets) for k, v in ok.items()}
    out.update({f"fill_{k}": 100.0 * v / len(budgets) for k, v in fill.items()})
    return out


def _tokens(messages: Sequence[BaseMessage]) -> int:
    return DEFAULT_GUARD.counter.count_messages(lc_conv.to_chat_messages(messages))


def _valid(messages: Sequence[BaseMessage]) -> bool:
    open_ids: set[str] = set()
    for m in messages:
        if isinstance(m, ToolMessage):
            if m.tool_call_id not in open_ids:
                return False
            open_ids.discard(m.tool_call_id)
            continue
        if open_ids:
            return False
        if isinstance(m, AIMessage):
            open_ids = {tc["id"] for tc in m.tool_calls if tc["id"]}
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    return not open_ids and bool(humans) and humans[-1].content == "And the total?"


# ---------------------------------------------------------------------- pydantic-ai
def _pydantic_ai_rows(repeats: int) -> list[BenchRow]:
    guard = ContextGuard()
    processor = history_processor(guard, ROOMY)
    base = _pai_conversation(SIZE)  # the system prompt is in the first request

    async def per_call(messages: list[ModelMessage]) -> object:
        return await processor(messages)

    proc_ms = _steady(per_call, base, _pai_round, repeats)
    bare_cms = pai_conv.to_chat_messages(base)

    async def bare(cms: list[Any]) -> object:
        return await guard.check_and_compact(cms, ROOMY)

    bare_ms = _steady(bare, bare_cms, lambda i: pai_conv.to_chat_messages(_pai_round(i)),
                      repeats)
    cold_ms = _timed(lambda: pai_conv.to_chat_messages(base), max(3, repeats // 10))
    return [
        BenchRow(f"pydantic-ai history processor per model call, {SIZE} msgs, under budget",
                 proc_ms, "ms", baseline=bare_ms, ratio=proc_ms / bare_ms if bare_ms else None,
                 target=f"≤ {TARGET_MS} ms (baseline: bare guard, no conversion)",
                 met=proc_ms <= TARGET_MS),
        BenchRow(f"pydantic-ai cold conversion of {SIZE} msgs (first call of a run)",
                 cold_ms, "ms", target="reported"),
    ]


def run(quick: bool) -> list[BenchRow]:
    """Measure and return the table rows (see the module docstring)."""
    smoke = _smoke()
    repeats = 5 if smoke else 60 if quick else 300
    budgets = [2_000, 9_000] if smoke else list(range(1_500, 30_000, 1_900 if quick else 700))
    return [*_langchain_rows(repeats, budgets), *_pydantic_ai_rows(repeats)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, TITLE + (" (quick)" if args.quick else ""))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
