"""Overhead of the OpenAI Agents SDK and LlamaIndex adapters per model call, at 200 messages.

An adapter runs before every model call (the Agents SDK's ``call_model_input_filter``) or
every memory read (LlamaIndex's ``GuardedMemory.aget``), so its common case — the history
fits — must stay cheap *including* the conversion from the framework's message form.
Scenario: a 200-item (Agents: Responses-API items — user, reasoning, function call,
function output, assistant message) or 200-message (LlamaIndex: user, assistant with a
``ToolCallBlock``, tool result, assistant answer) history under a 200K-token budget; each
timed call sees the same older items (whole rounds) and one new whole round, the steady
state of a run. The history is valid, as a framework's own history is: every tool call
answered.

Baseline, in the same run: ``ContextGuard.check_and_compact`` alone on the same history
already in ctxstack's form (the same fresh round per call). The ratio is baseline /
adapter: below 1 is the conversion's cost. Also reported:

- the first call on a fresh 200-item history (nothing cached: a run's first call);
- a broken history (the older items end in a tool call that is never answered, then the
  next question): the guard repairs it on every call, so the adapter converts the
  repaired list back each time — the price of a bad log, reported without a target.
  (Until issue 14's tool-turn checks, this benchmark's history was broken this way by
  accident — 198 older items cut a round in two — and the guard passed it through.)
- LlamaIndex's own trimming helper, ``ChatMemoryBuffer.get``, on the same messages: its
  time under budget, and over budget (truncation at 25 budgets from 1K to 25K tokens) its
  time and how often its output is valid for a provider — every tool result preceded by
  its tool call, every tool call answered — against ``GuardedMemory`` doing the same trim.
  ChatMemoryBuffer counts with tiktoken (made available offline by ``benchmarks.vocab``).

The OpenAI Agents SDK ships no client-side trimming helper (its compaction session calls
the OpenAI server), so there is no framework row for it.

Run: ``python -m benchmarks.bench_integrations_b [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root / "src"), str(_root)]

from agents import Agent
from agents.run_config import CallModelData, ModelInputData
from llama_index.core.base.llms.types import ChatMessage as LIMessage
from llama_index.core.base.llms.types import MessageRole, ToolCallBlock
from llama_index.core.memory import ChatMemoryBuffer

from benchmarks.common import BenchRow, no_gc, print_table
from ctxstack import ChatMessage, ContextGuard
from ctxstack.integrations._responses import items_to_messages
from ctxstack.integrations.llamaindex import GuardedMemory, to_ctx
from ctxstack.integrations.openai_agents import input_filter

TITLE = "Framework adapters B (OpenAI Agents SDK, LlamaIndex): overhead per model call"
SIZE = 200
BUDGET = 200_000
TARGET_MS = 0.5
OUTPUT = " ".join(f"row{i}=value-{i * 7}" for i in range(40))


def _smoke() -> bool:
    return os.environ.get("CTXSTACK_BENCH_SMOKE") == "1"


# ---------------------------------------------------------------------- inputs
def agents_items(n: int, tag: str = "") -> list[dict[str, Any]]:
    """``n`` Responses-API items in the shape a tool-using run produces."""
    items: list[dict[str, Any]] = []
    turn = 0
    while len(items) < n:
        turn += 1
        cid = f"call_{tag}{turn}"
        items += [
            {"role": "user", "content": f"Question {turn}: look up shelf {turn} please."},
            {"type": "reasoning", "id": f"rs_{tag}{turn}",
             "summary": [{"type": "summary_text", "text": "Need a lookup."}]},
            {"type": "function_call", "call_id": cid, "name": "lookup",
             "arguments": f'{{"key": "S-{turn}"}}', "id": f"fc_{tag}{turn}"},
            {"type": "function_call_output", "call_id": cid, "output": OUTPUT},
            {"type": "message", "role": "assistant", "id": f"msg_{tag}{turn}",
             "status": "completed",
             "content": [{"type": "output_text", "text": f"Shelf {turn} holds rows.",
                          "annotations": []}]},
        ]
    return items[:n]


def li_messages(n: int, tag: str = "") -> list[LIMessage]:
    """``n`` LlamaIndex messages of tool-using turns (4 per turn)."""
    out: list[LIMessage] = []
    turn = 0
    while len(out) < n:
        turn += 1
        cid = f"call_{tag}{turn}"
        out += [
            LIMessage(role="user", content=f"Question {turn}: look up shelf {turn} please."),
            LIMessage(role="assistant", blocks=[ToolCallBlock(
                tool_call_id=cid, tool_name="lookup", tool_kwargs={"key": f"S-{turn}"})]),
            LIMessage(role="tool", content=OUTPUT, additional_kwargs={"tool_call_id": cid}),
            LIMessage(role="assistant", content=f"Shelf {turn} holds rows."),
        ]
    return out[:n]


def li_valid(messages: list[LIMessage]) -> bool:
    """Provider rules: tool results follow their call, every call is answered."""
    called: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        called |= {b.tool_call_id or "" for b in m.blocks if isinstance(b, ToolCallBlock)}
        if m.role == MessageRole.TOOL:
            if m.additional_kwargs.get("tool_call_id") not in called:
                return False
            answered.add(m.additional_kwargs["tool_call_id"])
    return called <= answered


# ---------------------------------------------------------------------- timing
async def _timed(samples: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    times = []
    for i in range(samples):
        start = time.perf_counter()
        await call(i)
        times.append(time.perf_counter() - start)
    return times[1:]  # the first call warms the caches: it is measured separately


AGENTS_ROUND = 5  # items per round of agents_items
LI_ROUND = 4  # messages per round of li_messages


async def measure_agents(samples: int, broken: bool = False) -> dict[str, float]:
    """The adapter and its baseline, under budget; ``broken``: the older items end in an
    unanswered tool call (see the module docstring)."""
    new = 2 if broken else AGENTS_ROUND
    base = agents_items(SIZE - new)
    fresh = [agents_items(new, tag=f"n{i}-") for i in range(samples)]
    agent = Agent(name="bench", instructions="You are a helpful assistant.")
    filt = input_filter(ContextGuard(), BUDGET)

    async def adapter(i: int) -> object:
        data = ModelInputData(input=[*base, *fresh[i]], instructions=agent.instructions)  # type: ignore[list-item,arg-type]
        return await filt(CallModelData(model_data=data, agent=agent, context=None))

    guard = ContextGuard()
    converted = [ChatMessage.system("You are a helpful assistant."),
                 *items_to_messages(base)]
    fresh_msgs = [items_to_messages(f, start=SIZE - new) for f in fresh]

    async def baseline(i: int) -> object:
        return await guard.check_and_compact([*converted, *fresh_msgs[i]], BUDGET)

    async def cold(i: int) -> object:
        data = ModelInputData(input=agents_items(SIZE, tag=f"c{i}-"), instructions="x")  # type: ignore[arg-type]
        return await input_filter(ContextGuard(), BUDGET)(
            CallModelData(model_data=data, agent=agent, context=None))

    with no_gc():
        a = await _timed(samples, adapter)
        b = await _timed(samples, baseline)
        c = await _timed(max(3, samples // 10), cold)
    return {"adapter": statistics.median(a), "baseline": statistics.median(b),
            "cold": statistics.median(c)}


async def measure_llamaindex(samples: int, broken: bool = False) -> dict[str, float]:
    """As :func:`measure_agents`, for ``GuardedMemory.aget``."""
    new = 2 if broken else LI_ROUND
    base = li_messages(SIZE - new)
    fresh = [li_messages(new, tag=f"n{i}-") for i in range(samples)]
    memory = GuardedMemory.from_defaults(guard=ContextGuard(), budget=BUDGET)

    async def adapter(i: int) -> object:
        memory.set([*base, *fresh[i]])
        return await memory.aget()

    guard = ContextGuard()
    converted = [to_ctx(m, i) for i, m in enumerate(base)]
    fresh_msgs = [[to_ctx(m, SIZE - new + j) for j, m in enumerate(f)] for f in fresh]

    async def baseline(i: int) -> object:
        return await guard.check_and_compact([*converted, *fresh_msgs[i]], BUDGET)

    buffer = ChatMemoryBuffer.from_defaults(token_limit=BUDGET)

    async def framework(i: int) -> object:
        buffer.set([*base, *fresh[i]])
        return buffer.get()

    with no_gc():
        a = await _timed(samples, adapter)
        b = await _timed(samples, baseline)
        f = await _timed(max(3, samples // 4), framework)
    return {"adapter": statistics.median(a), "baseline": statistics.median(b),
            "framework": statistics.median(f)}


async def measure_trim(budgets: list[int]) -> dict[str, float]:
    """Over budget: both trim the same 200 messages to each budget."""
    history = li_messages(SIZE)
    ours: list[float] = []
    theirs: list[float] = []
    ours_valid = theirs_valid = 0
    for budget in budgets:
        memory = GuardedMemory.from_defaults(guard=ContextGuard(), budget=budget,
                                             chat_history=history)
        buffer = ChatMemoryBuffer.from_defaults(token_limit=budget, chat_history=history)
        start = time.perf_counter()
        got = await memory.aget()
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        trimmed = buffer.get()
        theirs.append(time.perf_counter() - start)
        ours_valid += li_valid(got)
        theirs_valid += li_valid(trimmed)
    n = len(budgets)
    return {"ours": statistics.median(ours), "theirs": statistics.median(theirs),
            "ours_valid": ours_valid / n, "theirs_valid": theirs_valid / n}


def run(quick: bool) -> list[BenchRow]:
    """Measure and return the table rows (see the module docstring)."""
    from benchmarks.vocab import ensure_offline

    ensure_offline("cl100k_base")  # ChatMemoryBuffer's default tokenizer
    smoke = _smoke()
    samples = 6 if smoke else 60 if quick else 300
    budgets = [1_000 * k for k in (range(1, 4) if smoke else range(1, 26))]
    ag = asyncio.run(measure_agents(samples))
    li = asyncio.run(measure_llamaindex(samples))
    ag_broken = asyncio.run(measure_agents(samples, broken=True))
    li_broken = asyncio.run(measure_llamaindex(samples, broken=True))
    trim = asyncio.run(measure_trim(budgets))
    ms = 1e3
    return [
        BenchRow(name=f"openai-agents input_filter under budget, {SIZE} items (median)",
                 value=ag["adapter"] * ms, unit="ms", baseline=ag["baseline"] * ms,
                 ratio=ag["baseline"] / ag["adapter"], target=f"<= {TARGET_MS} ms",
                 met=ag["adapter"] * ms <= TARGET_MS),
        BenchRow(name=f"openai-agents input_filter, first call on {SIZE} fresh items",
                 value=ag["cold"] * ms, unit="ms", baseline=ag["baseline"] * ms,
                 ratio=ag["baseline"] / ag["cold"]),
        BenchRow(name=f"llamaindex GuardedMemory.aget under budget, {SIZE} msgs (median)",
                 value=li["adapter"] * ms, unit="ms", baseline=li["baseline"] * ms,
                 ratio=li["baseline"] / li["adapter"], target=f"<= {TARGET_MS} ms",
                 met=li["adapter"] * ms <= TARGET_MS),
        BenchRow(name=f"openai-agents input_filter, broken history repaired every call, "
                      f"{SIZE} items (median; baseline: the bare guard)",
                 value=ag_broken["adapter"] * ms, unit="ms",
                 baseline=ag_broken["baseline"] * ms,
                 ratio=ag_broken["baseline"] / ag_broken["adapter"]),
        BenchRow(name=f"llamaindex GuardedMemory.aget, broken history repaired every call, "
                      f"{SIZE} msgs (median; baseline: the bare guard)",
                 value=li_broken["adapter"] * ms, unit="ms",
                 baseline=li_broken["baseline"] * ms,
                 ratio=li_broken["baseline"] / li_broken["adapter"]),
        BenchRow(name=f"llamaindex ChatMemoryBuffer.get under budget, {SIZE} msgs "
                      "(framework helper; baseline = GuardedMemory)",
                 value=li["framework"] * ms, unit="ms", baseline=li["adapter"] * ms,
                 ratio=li["framework"] / li["adapter"]),
        BenchRow(name=f"trim {SIZE} msgs over budget: GuardedMemory vs ChatMemoryBuffer "
                      "(median of budgets)",
                 value=trim["ours"] * ms, unit="ms", baseline=trim["theirs"] * ms,
                 ratio=trim["theirs"] / trim["ours"]),
        BenchRow(name="trim output valid for a provider: GuardedMemory vs ChatMemoryBuffer",
                 value=trim["ours_valid"] * 100, unit="%",
                 baseline=trim["theirs_valid"] * 100, target="100 %",
                 met=trim["ours_valid"] == 1.0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print_table(run(args.quick), TITLE)


if __name__ == "__main__":
    main()
