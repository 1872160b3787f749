"""Per-iteration overhead of ContextGuard.check_and_compact under budget.

A ReAct run calls the guard before every LLM call, so its common case — the conversation
fits — must cost next to nothing. Two scenarios, each a conversation that gains one tool
round (an assistant tool call and its result) before every timed call, the two new
messages seen for the first time, as in a real run:

* **growing** (the original rows, kept for comparison with earlier reports): a 96K-token
  budget and a conversation growing from 4 to 222 messages with ~2,000-character results;
  every call after the first is a sample.
* **500 messages, ~127K tokens** (issue 13's target, ≤ 0.1 ms): 498 messages already seen
  by the guard plus a fresh round before each call. The tool results' length is chosen
  once, by the default counter, so that the 500 messages total ~127K tokens (the row
  names the actual total); the budget is 200K so that the total stays under it with the
  default counter's margin (the under-budget path does not depend on the budget's value,
  only on staying under it).

Baseline, measured in the same run: the library itself with its caches off — the same
``ContextGuard.check_and_compact`` code, given a counter that never caches a message's
estimate (:class:`UncachedCounter`: the heuristic counter's own arithmetic, which also
keeps the guard's list memo out of the count) and with the guard's "already vetted for
size" marks and its memo of the last list cleared before each call, so every message's
text is scanned and counted again, as a guard without caching would on every iteration.
Each timed pair is checked to agree: both guards return the list unchanged and both
counters give the identical token count (an ``AssertionError`` otherwise), so the ratio
measures the caches and nothing else.

A second measurement sweeps the conversation length (10 to 500 messages, the
``guard_overhead`` plot): at each length the conversation's older messages have already
been seen by the guard and a fresh tool round (two new messages) is appended before each
timed call, which is the steady state of a long run. The sweep uses a 200K-token budget so
that 500 messages (~173K tokens with the ~1,900-character results) still fit.

In both the target scenario and the sweep, the guard's previous call (untimed) saw
exactly the older messages, as in the ReAct loop, where each call's list is the previous
call's result plus the new messages: the guard remembers the last list it counted and
counts only what extends it (``ContextGuard``'s module doc). Before that memo existed the
previous call here saw the older messages plus another fresh round; that order would now
measure a full recount (the memo reuses a total only for a list that extends the last
one), which is not what a run does.

Run: ``python benchmarks/bench_guard.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root / "src"), str(_root)]

from benchmarks.common import BenchRow, no_gc, print_table
from ctxstack.guard import ContextGuard
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC, HeuristicCounter

BUDGET = 96_000  # 110 tool rounds stay under it with the default counter's 10% margin
MAX_CHARS = 50_000
TARGET_MS = 0.1
SWEEP_BUDGET = 200_000
TARGET_SIZE = 500  # issue 13: "≤ 0.1 ms on a 500-message, ~127K-token conversation"
TARGET_TOKENS = 127_000
SWEEP_SIZES = (10, 50, 100, 250, 500)
SMOKE_SWEEP_SIZES = (10, 50)
SMOKE_ENV = "CTXSTACK_BENCH_SMOKE"  # set by benchmarks/run --smoke: tiniest sizes
GUARD_SERIES = "ContextGuard (cached)"
BASELINE_SERIES = "ContextGuard, caches off (baseline)"


@dataclass(frozen=True)
class Sweep:
    """Median ms per call at each conversation length: the guard and the baseline."""

    sizes: tuple[int, ...]
    guard_ms: tuple[float, ...]
    baseline_ms: tuple[float, ...]


_LAST: dict[str, Sweep] = {}
"""The sweep of the latest ``run()``, for ``plot_data`` / ``report_markdown``."""


def _smoke() -> bool:
    return os.environ.get(SMOKE_ENV, "") not in ("", "0")


def _round(i: int, chars: int | None = None) -> list[ChatMessage]:
    """Tool round ``i``: a call and its result, rows of figures: 50 rows (~1,900
    characters, the original scenario) or, given ``chars``, exactly that many characters."""
    call = ToolCall(id=f"call_{i}", name="fetch_page", arguments={"url": f"https://ex.com/{i}"})
    rows = 50 if chars is None else chars // 30 + 2
    body = f"page {i}\n" + "".join(f"row {j}: value {i * j} units; status ok\n"
                                   for j in range(rows))
    return [
        ChatMessage.assistant(f"Fetching page {i}.", tool_calls=[call]),
        ChatMessage.tool(f"call_{i}", body[:2_000] if chars is None else body[:chars]),
    ]


class UncachedCounter(HeuristicCounter):
    """The library's heuristic counter with its per-message cache off.

    Same arithmetic (the base class's ``_content_tokens`` and overhead), but nothing is
    read from or written to the messages' caches, so every call counts every message.
    """

    @property
    def cache_key(self) -> str:
        return "heuristic-uncached"

    def count_message(self, message: ChatMessage) -> int:
        return self.message_overhead + self._content_tokens(message)

    def count_messages(self, messages: Iterable[ChatMessage]) -> int:
        return sum(self.count_message(m) for m in messages)


UNCACHED = UncachedCounter()


def uncached_guard(budget: int) -> ContextGuard:
    """The baseline: a real ContextGuard with the uncached counter."""
    return ContextGuard(default_budget=budget, max_message_chars=MAX_CHARS, counter=UNCACHED)


def forget_vetting(guard: ContextGuard, messages: Sequence[ChatMessage]) -> None:
    """Clear the guard's "checked for size" marks and its memo of the last list, so its
    next call scans every text again.

    The guard stores the marks in each message's private per-message cache (see
    ``ContextGuard._vet_from``) and remembers the last list it vetted and counted
    (``_vetted``, ``_memo``); clearing both turns those caches off for one call.
    """
    key = guard._vetted_key
    for m in messages:
        private = m.__pydantic_private__
        if private is not None:
            private["_token_cache"].pop(key, None)
    guard._vetted = (guard.max_message_chars, ())
    guard._memo.clear()


async def timed_pair(
    cached: ContextGuard, baseline: ContextGuard, messages: list[ChatMessage], where: str
) -> tuple[float, float]:
    """Seconds of one cached check and one uncached check of ``messages``, verified equal."""
    t0 = time.perf_counter()
    out = await cached.check_and_compact(messages, hint="react_iteration")
    t1 = time.perf_counter()
    forget_vetting(baseline, messages)
    t2 = time.perf_counter()
    base_out = await baseline.check_and_compact(messages, hint="react_iteration")
    t3 = time.perf_counter()
    if out is not messages or base_out is not messages:
        raise AssertionError(f"{where}: the conversation left the under-budget path")
    cached_count, uncached_count = HEURISTIC.count_messages(messages), UNCACHED.count_messages(
        messages)
    if cached_count != uncached_count:
        raise AssertionError(f"{where}: cached count {cached_count} != uncached "
                             f"{uncached_count}: the baseline is not the same computation")
    return t1 - t0, t3 - t2


async def _measure(iterations: int) -> tuple[list[float], list[float], int]:
    guard = ContextGuard(default_budget=BUDGET, max_message_chars=MAX_CHARS)
    baseline_guard = uncached_guard(BUDGET)
    messages: list[ChatMessage] = [
        ChatMessage.system("You are a research agent. " * 40),
        ChatMessage.user("Summarise the pages.", pinned=True, metadata={"kind": "query"}),
    ]
    guarded: list[float] = []
    baseline: list[float] = []
    for i in range(iterations):
        messages.extend(_round(i))
        g, b = await timed_pair(guard, baseline_guard, messages, f"iteration {i}")
        guarded.append(g)
        baseline.append(b)
    return guarded, baseline, len(messages)


def _conversation(size: int, chars: int | None = None) -> list[ChatMessage]:
    """A system prompt, the pinned query and tool rounds: ``size`` messages (even, >= 4)."""
    if size < 4 or size % 2:
        raise ValueError(f"conversation size must be even and at least 4, got {size}")
    messages = [
        ChatMessage.system("You are a research agent. " * 40),
        ChatMessage.user("Summarise the pages.", pinned=True, metadata={"kind": "query"}),
    ]
    for i in range((size - 2) // 2):
        messages.extend(_round(i, chars))
    return messages


def chars_for(size: int, tokens: int) -> int:
    """The tool-result length (characters) that makes ``_conversation(size)`` total about
    ``tokens`` by the default counter (the smallest length reaching it: a bisection)."""
    lo, hi = 0, 20_000
    while lo < hi:
        mid = (lo + hi) // 2
        if HEURISTIC.count_messages(_conversation(size, mid)) < tokens:
            lo = mid + 1
        else:
            hi = mid
    return lo


async def _measure_at(size: int, samples: int, chars: int | None = None
                      ) -> tuple[list[float], list[float]]:
    """Seconds per call at ``size`` messages, each sample: the guard's, the baseline's.

    Before each timed call the guard checks the first ``size - 2`` messages (untimed: its
    previous iteration); the timed call gets that list plus a fresh round it has never
    seen, so every sample is a "call after the first" at exactly ``size`` messages.
    """
    guard = ContextGuard(default_budget=SWEEP_BUDGET, max_message_chars=MAX_CHARS)
    baseline_guard = uncached_guard(SWEEP_BUDGET)
    prefix = _conversation(size, chars)[:-2]
    first = (size - 2) // 2
    guarded: list[float] = []
    baseline: list[float] = []
    for k in range(samples):
        previous = list(prefix)
        await guard.check_and_compact(previous, hint="react_iteration")
        messages = previous + _round(first + k, chars)
        g, b = await timed_pair(guard, baseline_guard, messages, f"{size} messages")
        guarded.append(g)
        baseline.append(b)
    return guarded, baseline


def sweep(sizes: Sequence[int], samples: int) -> Sweep:
    """Median ms per under-budget call (guard and baseline) at each conversation length."""
    guard_ms: list[float] = []
    base_ms: list[float] = []
    for size in sizes:
        with no_gc():
            g, b = asyncio.run(_measure_at(size, samples))
        guard_ms.append(statistics.median(g) * 1e3)
        base_ms.append(statistics.median(b) * 1e3)
    return Sweep(tuple(sizes), tuple(guard_ms), tuple(base_ms))


def _target_rows(median_name: str, p95_name: str, guarded: list[float],
                 baseline: list[float]) -> list[BenchRow]:
    """The median and p95 rows (ms, target < TARGET_MS) of one scenario's samples."""
    med, base = statistics.median(guarded) * 1e3, statistics.median(baseline) * 1e3
    p95 = statistics.quantiles(guarded, n=20)[-1] * 1e3
    base95 = statistics.quantiles(baseline, n=20)[-1] * 1e3
    return [
        BenchRow(name=median_name, value=med, unit="ms", baseline=base, ratio=base / med,
                 target=f"< {TARGET_MS} ms", met=med < TARGET_MS),
        BenchRow(name=p95_name, value=p95, unit="ms", baseline=base95, ratio=base95 / p95,
                 target=f"< {TARGET_MS} ms", met=p95 < TARGET_MS),
    ]


def target_scenario(samples: int, repeats: int) -> list[BenchRow]:
    """Issue 13's figure: 500 messages, ~127K tokens, a fresh round before each call."""
    size = SMOKE_SWEEP_SIZES[-1] if _smoke() else TARGET_SIZE
    tokens = TARGET_TOKENS * size // TARGET_SIZE
    chars = chars_for(size, tokens)
    total = HEURISTIC.count_messages(_conversation(size, chars))
    guarded: list[float] = []
    baseline: list[float] = []
    for _ in range(repeats):
        with no_gc():
            g, b = asyncio.run(_measure_at(size, samples, chars))
        guarded.extend(g)
        baseline.extend(b)
    # Named apart from the growing scenario's "…, median (N msgs)" row, which the README's
    # headline figures quote by that prefix (tests/test_readme_figures.py).
    where = f"at {size} msgs ({total / 1000:.0f}K tokens)"
    return _target_rows(f"check_and_compact under budget {where}, median",
                        f"check_and_compact under budget {where}, p95", guarded, baseline)


def run(quick: bool) -> list[BenchRow]:
    """Measure and return the table rows (see the module docstring)."""
    smoke = _smoke()
    iterations = 10 if smoke else 40 if quick else 110
    repeats = 1 if smoke else 3 if quick else 7
    guarded: list[float] = []
    baseline: list[float] = []
    size = 0
    for _ in range(repeats):
        with no_gc():
            g, b, size = asyncio.run(_measure(iterations))
        guarded.extend(g[1:])  # "per call after the first"
        baseline.extend(b[1:])
    growing = _target_rows(f"check_and_compact under budget, median ({size} msgs)",
                           "check_and_compact under budget, p95", guarded, baseline)
    samples = 5 if smoke else 41 if quick else 201
    target = target_scenario(samples, repeats)
    swept = sweep(SMOKE_SWEEP_SIZES if smoke else SWEEP_SIZES, samples)
    _LAST["sweep"] = swept
    largest, g_ms, b_ms = swept.sizes[-1], swept.guard_ms[-1], swept.baseline_ms[-1]
    return [
        *growing,
        *target,
        BenchRow(
            name=f"check_and_compact under budget, median at {largest} msgs (sweep)",
            value=g_ms, unit="ms", baseline=b_ms, ratio=b_ms / g_ms,
        ),
    ]


def plot_data(quick: bool) -> dict[str, dict[str, Any]]:
    """The sweep ``run`` measured, as the ``guard_overhead`` plot (nothing before a run)."""
    swept = _LAST.get("sweep")
    if swept is None:
        return {}
    return {"guard_overhead": {
        "kind": "line",
        "x": list(swept.sizes),
        "series": {GUARD_SERIES: list(swept.guard_ms),
                   BASELINE_SERIES: list(swept.baseline_ms)},
        "logx": True,
        "ymin": 0.0,
    }}


def report_markdown(quick: bool) -> str:
    """The sweep as a table: ms per call and the ratio at each conversation length."""
    swept = _LAST.get("sweep")
    if swept is None:
        return ""
    lines = [
        f"Conversation-length sweep (budget {SWEEP_BUDGET:,} tokens; median ms per "
        "under-budget call, a fresh tool round before each):",
        "",
        "| messages | ContextGuard | caches off (baseline) | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for n, g, b in zip(swept.sizes, swept.guard_ms, swept.baseline_ms, strict=True):
        lines.append(f"| {n:,} | {g:.4f} ms | {b:.4f} ms | {b / g:.1f}× |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, "ContextGuard per-iteration overhead"
                + (" (quick)" if args.quick else "")
                + " — baseline: the same guard with its caches off")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
