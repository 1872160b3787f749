"""ReAct agent: loop overhead per iteration, and tokens sent with the guard vs without.

Scenario: a 50-iteration run in which every iteration calls a tool whose observation grows
(page ``i`` returns ``OBS_BASE + OBS_GROWTH * i`` characters), then answers. The model is
the offline ``ScriptedLLM`` and the tool is async and instant, so what is left of the wall
time after subtracting the time spent inside LLM calls (the agent's *and* the guard's
summariser) and inside tools is the agent loop's own overhead: context assembly, the
guard's estimate / truncation, trace and events.

Baseline, measured in the same run: a bare no-guard loop that appends every observation and
sends the full history on every call — the cheapest possible loop, and the token cost the
guard exists to avoid. Its *timing* is a real baseline; its *token* figures are not a
contest: a loop with no bound sends more than a bounded one by construction, so the
"tokens sent" and "largest prompt" rows are invariants (the guard kept every prompt within
the budget), not wins.

The ``tokens_per_iteration`` plot shows, per iteration, the input tokens of that
iteration's call to the main model; for the LLM-compaction guard a summariser call is
counted in the iteration whose context it compacted (so each series sums to the run's
"tokens sent" figure).

Run: ``python -m benchmarks.bench_agent`` (``--quick`` for one repetition); the exit
status is non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.common import BenchRow, print_table
from ctxstack.agent import ReActAgent, tool
from ctxstack.guard import ContextGuard, GuardCheck
from ctxstack.llm import ScriptedLLM, Usage
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC, UsageMeter

ITERATIONS = 50
OBS_BASE = 1_000
OBS_GROWTH = 300
BUDGET = 16_000
OVERHEAD_TARGET_MS = 2.0
AGENT_ONLY_TARGET_MS = 0.5


class CallLog(UsageMeter):
    """A :class:`~ctxstack.tokens.UsageMeter` that also keeps each call's input tokens.

    The meter's ``llm_seconds`` is the time spent inside the calls (excluded from the
    overhead). ``sent`` holds each call's input tokens. With ``follows`` (the main model's
    log, when this one is the guard's summariser's), ``at`` holds for each call the 0-based
    iteration it belongs to: the number of calls the main model had made when it happened
    (the guard compacts just before the main model's next call).
    """

    def __init__(self, follows: CallLog | None = None) -> None:
        super().__init__()
        self.follows = follows
        self.sent: list[int] = []
        self.at: list[int] = []

    def add(self, usage: Usage) -> None:
        super().add(usage)
        self.sent.append(usage.input_tokens)
        self.at.append(len(self.follows.sent) if self.follows else len(self.sent) - 1)


def observation(page: int) -> str:
    line = f"page {page}: measurement row with value {page * 17} and status ok. "
    size = OBS_BASE + OBS_GROWTH * page
    return (line * (size // len(line) + 1))[:size]


@tool
async def fetch(page: int) -> str:
    """Fetch one page of the report."""
    return observation(page)


def scripted_model() -> ScriptedLLM:
    step = {"n": 0}

    def reply(messages: Sequence[ChatMessage], tools: Any) -> ChatMessage | str:
        step["n"] += 1
        if step["n"] >= ITERATIONS:
            return "All pages read; the report is consistent."
        return ScriptedLLM.tool_call("fetch", {"page": step["n"]})

    return ScriptedLLM(handler=reply)


def summariser() -> ScriptedLLM:
    return ScriptedLLM(handler=lambda m, t: (
        "## Goal\nRead every page of the report.\n## Key data\nPages read so far; values "
        "17 per page index.\n## Next step\nFetch the next page."))


@dataclass(frozen=True)
class Measure:
    overhead_s: float  # wall - LLM time - tool time
    agent_only_s: float  # overhead minus the guard's own CPU time
    iterations: int
    sent: int  # input tokens of every call, compaction included
    largest: int  # the largest prompt the main model received
    per_iteration: tuple[int, ...]  # input tokens sent in each iteration (sums to ``sent``)


class TimedGuard(ContextGuard):
    """The real guard, timing its calls (LLM time inside is subtracted separately)."""

    seconds = 0.0

    async def check(self, messages: Sequence[ChatMessage], budget: Any = None,
                    hint: Any = "general") -> GuardCheck:
        started = time.perf_counter()
        try:
            return await super().check(messages, budget, hint)
        finally:
            self.seconds += time.perf_counter() - started


async def guarded_run(compaction: bool) -> Measure:
    llm = CallLog()
    compact = CallLog(follows=llm) if compaction else None
    guard = TimedGuard(compact_llm=compact.wrap(summariser()) if compact else None,
                       default_budget=BUDGET)
    agent = ReActAgent(llm.wrap(scripted_model()), [fetch], guard, budget=BUDGET,
                       max_iterations=ITERATIONS,
                       checklist_threshold=None, cycle_threshold=None)
    started = time.perf_counter()
    result = await agent.run("Read the whole report and tell me if it is consistent.")
    wall = time.perf_counter() - started
    assert result.iterations == ITERATIONS, result.iterations
    tool_time = sum(e.duration_s for e in result.trace)
    compact_time = compact.llm_seconds if compact else 0.0
    overhead = wall - llm.llm_seconds - compact_time - tool_time
    guard_cpu = guard.seconds - compact_time
    per_iteration = list(llm.sent)
    if compact:
        for index, tokens in zip(compact.at, compact.sent, strict=True):
            per_iteration[index] += tokens
    assert sum(per_iteration) == result.usage.input_tokens, (
        sum(per_iteration), result.usage.input_tokens)
    return Measure(overhead, overhead - guard_cpu, result.iterations,
                   result.usage.input_tokens, max(llm.sent), tuple(per_iteration))


async def baseline_run() -> Measure:
    """The no-guard loop: full history every call."""
    log = CallLog()
    model = scripted_model()
    llm = log.wrap(model)
    messages = [ChatMessage.system("You are an agent."),
                ChatMessage.user("Read the whole report and tell me if it is consistent.")]
    specs = [fetch.spec()]
    tool_time = 0.0
    started = time.perf_counter()
    for _ in range(ITERATIONS):
        reply = await llm.chat(messages, tools=specs)
        messages.append(reply.message)
        if not reply.message.tool_calls:
            break
        for call in reply.message.tool_calls:
            t = time.perf_counter()
            out = await fetch.call(call.arguments)
            tool_time += time.perf_counter() - t
            messages.append(ChatMessage.tool(call.id, out))
    wall = time.perf_counter() - started
    total = sum(log.sent)
    assert total == sum(HEURISTIC.count_messages(c.messages) for c in model.calls)
    overhead = wall - log.llm_seconds - tool_time
    return Measure(overhead, overhead, ITERATIONS, total, max(log.sent), tuple(log.sent))


def _median(runs: list[Measure]) -> Measure:
    return Measure(statistics.median(r.overhead_s for r in runs),
                   statistics.median(r.agent_only_s for r in runs),
                   runs[0].iterations, runs[0].sent, runs[0].largest, runs[0].per_iteration)


SERIES = {"base": "no guard (full history)", "trunc": "with ContextGuard (truncate)",
          "llm": "with ContextGuard (LLM compaction)"}

_LAST: dict[str, Measure] = {}
"""The median measures of the latest ``run()`` by variant, for ``plot_data``."""


def run(quick: bool) -> list[BenchRow]:
    repeats = 1 if quick else 5

    async def measure() -> dict[str, Measure]:
        out: dict[str, list[Measure]] = {"base": [], "trunc": [], "llm": []}
        for _ in range(repeats):
            out["base"].append(await baseline_run())
            out["trunc"].append(await guarded_run(compaction=False))
            out["llm"].append(await guarded_run(compaction=True))
        return {k: _median(v) for k, v in out.items()}

    m = asyncio.run(measure())
    _LAST.clear()
    _LAST.update(m)
    base = m["base"]
    base_ms = base.overhead_s / base.iterations * 1000
    rows: list[BenchRow] = []
    for key, label in (("trunc", "truncate guard"), ("llm", "LLM-compaction guard")):
        r = m[key]
        ms = r.overhead_s / r.iterations * 1000
        rows.append(BenchRow(
            name=f"loop overhead per iteration, {label} (ratio: x bare loop)", value=ms,
            unit="ms", baseline=base_ms, ratio=ms / base_ms if base_ms else None,
            target=f"<= {OVERHEAD_TARGET_MS:g} ms", met=ms <= OVERHEAD_TARGET_MS))
        agent_ms = r.agent_only_s / r.iterations * 1000
        rows.append(BenchRow(
            name=f"  of which the agent itself (guard excluded), {label}", value=agent_ms,
            unit="ms", baseline=base_ms, ratio=agent_ms / base_ms if base_ms else None,
            target=f"<= {AGENT_ONLY_TARGET_MS:g} ms", met=agent_ms <= AGENT_ONLY_TARGET_MS))
        # Both rows below hold by construction: the baseline loop has no bound at all, and
        # the guard enforces the budget before every call. They check that it did.
        rows.append(BenchRow(
            name=f"tokens sent in {ITERATIONS} iterations, {label} (ratio: x fewer)",
            value=float(r.sent), unit="tok", baseline=float(base.sent),
            ratio=base.sent / r.sent, target="fewer than the unbounded loop",
            met=r.sent < base.sent, invariant=True))
        rows.append(BenchRow(
            name=f"largest prompt, {label} (ratio: x smaller)", value=float(r.largest),
            unit="tok", baseline=float(base.largest), ratio=base.largest / r.largest,
            target=f"<= budget {BUDGET:,}", met=r.largest <= BUDGET, invariant=True))
    return rows


def plot_data(quick: bool) -> dict[str, dict[str, Any]]:
    """Tokens sent per iteration in the runs ``run`` measured (nothing before a run)."""
    if not _LAST:
        return {}
    longest = max(len(m.per_iteration) for m in _LAST.values())
    series: dict[str, list[float | None]] = {}
    for key in ("trunc", "llm", "base"):
        values: list[float | None] = [float(v) for v in _LAST[key].per_iteration]
        series[SERIES[key]] = values + [None] * (longest - len(values))
    return {"tokens_per_iteration": {
        "kind": "line",
        "x": list(range(1, longest + 1)),
        "series": series,
        "ymin": 0.0,
    }}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition instead of five")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, f"ReAct agent, {ITERATIONS} iterations with growing observations"
                + (" (quick)" if args.quick else "")
                + " — baseline: bare loop sending the full history")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
