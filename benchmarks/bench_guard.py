"""Per-iteration overhead of ContextGuard.check_and_compact under budget.

A ReAct run calls the guard before every LLM call, so its common case — the conversation
fits — must cost next to nothing. The scenario: a 64K-token budget and a conversation
that grows by one tool round (an assistant tool call and a ~2,000-character result) per
iteration, staying under budget. Each iteration times one ``check_and_compact`` call
(the two new messages are seen for the first time, as in a real run).

Baseline, measured in the same run: the same check done without caches — an oversize
scan of every message's text and a fresh heuristic estimate of every message, which is
what a guard without per-message caching pays on every iteration.

Run: ``python benchmarks/bench_guard.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root / "src"), str(_root)]

from benchmarks.common import BenchRow, no_gc, print_table
from ctxstack.guard import ContextGuard
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import MESSAGE_OVERHEAD, heuristic_text_tokens

BUDGET = 64_000
MAX_CHARS = 50_000
TARGET_MS = 0.1


def _round(i: int) -> list[ChatMessage]:
    call = ToolCall(id=f"call_{i}", name="fetch_page", arguments={"url": f"https://ex.com/{i}"})
    body = f"page {i}\n" + "".join(f"row {j}: value {i * j} units; status ok\n" for j in range(50))
    return [
        ChatMessage.assistant(f"Fetching page {i}.", tool_calls=[call]),
        ChatMessage.tool(f"call_{i}", body[:2_000]),
    ]


def uncached_check(messages: Sequence[ChatMessage], budget: int) -> bool:
    """The baseline: oversize scan and a from-scratch estimate, no caches."""
    total = 0
    for m in messages:
        text = m.text
        if len(text) > MAX_CHARS:
            raise AssertionError("the benchmark conversation has no oversized message")
        if m.tool_calls:
            text = f"{text} " + " ".join(f"{c.name} {c.arguments_json}" for c in m.tool_calls)
        total += MESSAGE_OVERHEAD + heuristic_text_tokens(text)
    return total <= budget


async def _measure(iterations: int) -> tuple[list[float], list[float], int]:
    guard = ContextGuard(default_budget=BUDGET, max_message_chars=MAX_CHARS)
    messages: list[ChatMessage] = [
        ChatMessage.system("You are a research agent. " * 40),
        ChatMessage.user("Summarise the pages.", pinned=True, metadata={"kind": "query"}),
    ]
    guarded: list[float] = []
    baseline: list[float] = []
    for i in range(iterations):
        messages.extend(_round(i))
        t0 = time.perf_counter()
        out = await guard.check_and_compact(messages, hint="react_iteration")
        t1 = time.perf_counter()
        if out is not messages:
            raise AssertionError(f"iteration {i}: the conversation left the under-budget path")
        fits = uncached_check(messages, BUDGET)
        t2 = time.perf_counter()
        if not fits:
            raise AssertionError(f"iteration {i}: over budget; lower the iteration count")
        guarded.append(t1 - t0)
        baseline.append(t2 - t1)
    return guarded, baseline, len(messages)


def run(quick: bool) -> list[BenchRow]:
    """Measure and return the table rows (see the module docstring)."""
    iterations = 40 if quick else 110
    repeats = 3 if quick else 7
    guarded: list[float] = []
    baseline: list[float] = []
    size = 0
    for _ in range(repeats):
        with no_gc():
            g, b, size = asyncio.run(_measure(iterations))
        guarded.extend(g[1:])  # "per call after the first"
        baseline.extend(b[1:])
    med = statistics.median(guarded) * 1e3
    base = statistics.median(baseline) * 1e3
    p95 = statistics.quantiles(guarded, n=20)[-1] * 1e3
    base95 = statistics.quantiles(baseline, n=20)[-1] * 1e3
    return [
        BenchRow(
            name=f"check_and_compact under budget, median ({size} msgs)",
            value=med, unit="ms", baseline=base, ratio=base / med,
            target=f"< {TARGET_MS} ms", met=med < TARGET_MS,
        ),
        BenchRow(
            name="check_and_compact under budget, p95",
            value=p95, unit="ms", baseline=base95, ratio=base95 / p95,
            target=f"< {TARGET_MS} ms", met=p95 < TARGET_MS,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, "ContextGuard per-iteration overhead"
                + (" (quick)" if args.quick else "")
                + " — baseline: uncached oversize scan + estimate")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
