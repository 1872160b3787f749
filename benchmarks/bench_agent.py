"""ReAct agent: loop overhead per iteration, and tokens sent with the guard vs without.

Scenario: a 50-iteration run in which every iteration calls a tool whose observation grows
(page ``i`` returns ``OBS_BASE + OBS_GROWTH * i`` characters), then answers. The model is
the offline ``ScriptedLLM`` and the tool is async and instant, so what is left of the wall
time after subtracting the time spent inside LLM calls (the agent's *and* the guard's
summariser) and inside tools is the agent loop's own overhead: context assembly, the
guard's estimate / truncation, trace and events.

Baseline, measured in the same run: a bare no-guard loop that appends every observation and
sends the full history on every call — the cheapest possible loop, and the token cost the
guard exists to avoid.

Run: ``python -m benchmarks.bench_agent`` (``--quick`` for one repetition).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from ctxstack.guard import ContextGuard

from ctxstack.agent import ReActAgent, tool
from ctxstack.llm import LLMResult, ScriptedLLM, ToolSpec
from ctxstack.llm.base import ChatStream
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC

try:
    from benchmarks.common import BenchRow, print_table
except ImportError:  # pragma: no cover - until benchmarks/common.py lands
    from dataclasses import dataclass

    @dataclass
    class BenchRow:  # type: ignore[no-redef]
        name: str
        value: float
        unit: str
        baseline: float | None = None
        ratio: float | None = None
        target: str = ""
        met: bool | None = None

    def print_table(rows: Sequence[BenchRow], title: str = "") -> None:  # type: ignore[misc]
        print(title)
        for r in rows:
            print(f"{r.name:<48} {r.value:>12.3f} {r.unit:<10} base={r.baseline} "
                  f"ratio={r.ratio} target={r.target} met={r.met}")


ITERATIONS = 50
OBS_BASE = 400
OBS_GROWTH = 160
BUDGET = 16_000
OVERHEAD_TARGET_MS = 2.0
TOKEN_RATIO_TARGET = 0.5


class TimedLLM:
    """Wraps a ScriptedLLM and records the time spent inside its calls (excluded)."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.sent: list[int] = []

    @property
    def context_size(self) -> int:
        return self.inner.context_size

    @property
    def max_output_tokens(self) -> int:
        return self.inner.max_output_tokens

    async def chat(self, messages: Sequence[ChatMessage], *, tools: Sequence[ToolSpec] | None = None,
                   **opts: Any) -> LLMResult:
        started = time.perf_counter()
        try:
            result = await self.inner.chat(messages, tools=tools, **opts)
            self.sent.append(result.usage.input_tokens)
            return result
        finally:
            self.seconds += time.perf_counter() - started

    def stream_chat(self, messages: Sequence[ChatMessage], **opts: Any) -> ChatStream:
        return self.inner.stream_chat(messages, **opts)


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


async def guarded_run(compaction: bool) -> tuple[float, float, int, int]:
    """(overhead seconds, iterations, tokens sent incl. compaction, largest prompt)."""
    llm = TimedLLM(scripted_model())
    compact = TimedLLM(summariser()) if compaction else None
    guard = ContextGuard(compact_llm=compact, default_budget=BUDGET)
    agent = ReActAgent(llm, [fetch], guard, budget=BUDGET, max_iterations=ITERATIONS,
                       checklist_threshold=None, cycle_threshold=None)
    started = time.perf_counter()
    result = await agent.run("Read the whole report and tell me if it is consistent.")
    wall = time.perf_counter() - started
    tool_time = sum(e.duration_s for e in result.trace)
    llm_time = llm.seconds + (compact.seconds if compact else 0.0)
    assert result.iterations == ITERATIONS, result.iterations
    sent = result.usage.input_tokens
    return wall - llm_time - tool_time, result.iterations, sent, max(llm.sent)


async def baseline_run() -> tuple[float, float, int, int]:
    """The no-guard loop: full history every call."""
    llm = TimedLLM(scripted_model())
    messages = [ChatMessage.system("You are an agent."),
                ChatMessage.user("Read the whole report and tell me if it is consistent.")]
    specs = [fetch.spec()]
    tool_time = 0.0
    started = time.perf_counter()
    for _ in range(ITERATIONS):
        reply = await llm.chat(messages, tools=specs)
        if not reply.message.tool_calls:
            messages.append(reply.message)
            break
        messages.append(reply.message)
        for call in reply.message.tool_calls:
            t = time.perf_counter()
            out = await fetch.call(call.arguments)
            tool_time += time.perf_counter() - t
            messages.append(ChatMessage.tool(call.id, out))
    wall = time.perf_counter() - started
    total = sum(llm.sent)
    assert total == sum(HEURISTIC.count_messages(c.messages) for c in llm.inner.calls)
    return wall - llm.seconds - tool_time, ITERATIONS, total, max(llm.sent)


def _median(runs: list[tuple[float, float, int, int]]) -> tuple[float, float, int, int]:
    return (statistics.median(r[0] for r in runs), runs[0][1], runs[0][2], runs[0][3])


def run(quick: bool) -> list[BenchRow]:
    repeats = 1 if quick else 5

    async def measure() -> dict[str, tuple[float, float, int, int]]:
        out: dict[str, list[tuple[float, float, int, int]]] = {"base": [], "trunc": [], "llm": []}
        for _ in range(repeats):
            out["base"].append(await baseline_run())
            out["trunc"].append(await guarded_run(compaction=False))
            out["llm"].append(await guarded_run(compaction=True))
        return {k: _median(v) for k, v in out.items()}

    m = asyncio.run(measure())
    base_ms = m["base"][0] / m["base"][1] * 1000
    rows: list[BenchRow] = []
    for key, label in (("trunc", "truncate guard"), ("llm", "LLM-compaction guard")):
        overhead, iterations, sent, largest = m[key]
        ms = overhead / iterations * 1000
        rows.append(BenchRow(
            name=f"agent loop overhead, {label}", value=ms, unit="ms/iter",
            baseline=base_ms, ratio=ms / base_ms if base_ms else None,
            target=f"<= {OVERHEAD_TARGET_MS} ms/iter", met=ms <= OVERHEAD_TARGET_MS))
        ratio = sent / m["base"][2]
        rows.append(BenchRow(
            name=f"tokens sent over {ITERATIONS} iterations, {label}", value=float(sent),
            unit="tokens", baseline=float(m["base"][2]), ratio=ratio,
            target=f"ratio <= {TOKEN_RATIO_TARGET}", met=ratio <= TOKEN_RATIO_TARGET))
        rows.append(BenchRow(
            name=f"largest prompt, {label}", value=float(largest), unit="tokens",
            baseline=float(m["base"][3]), ratio=largest / m["base"][3],
            target=f"<= budget {BUDGET}", met=largest <= BUDGET))
    return rows


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]), title="ReAct agent")
