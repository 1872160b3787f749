"""The bill benchmark (:mod:`benchmarks.bench_bill`): how it replays and prices a run, and
the rule that picks the guard's thresholds on fitting data."""

from __future__ import annotations

import itertools

import pytest

from benchmarks import bench_bill
from benchmarks.bench_bill import DEFAULTS, Outcome, Totals, Trace, choose
from benchmarks.fidelity.heldout import held_out
from benchmarks.pricing import CACHE_READ, CACHE_WRITE
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC


def tiny() -> Trace:
    msgs = [ChatMessage.system("s"), ChatMessage.user("the code is ZX-41 please"),
            ChatMessage.assistant("ok"), ChatMessage.user("next"), ChatMessage.assistant("ok")]
    return Trace("tiny", msgs, ["ZX-41"], budget=10_000)


def test_a_call_before_every_assistant_message_and_one_at_the_end() -> None:
    assert tiny().call_points == [2, 4, 5]


def test_whole_history_reads_what_the_previous_call_sent_and_writes_the_rest() -> None:
    t = tiny()
    sizes = [HEURISTIC.count_message(m) for m in t.messages]
    prefixes = [sum(sizes[:i]) for i in t.call_points]
    expected = CACHE_WRITE * prefixes[0]
    for before, now in itertools.pairwise(prefixes):
        expected += CACHE_READ * before + CACHE_WRITE * (now - before)
    out = bench_bill.run_whole(t)
    assert out.bill == pytest.approx(expected)
    assert (out.calls, out.facts, out.sent) == (3, 1.0, sum(prefixes))


async def test_the_guard_keeps_every_call_within_the_budget_and_prices_its_summaries() -> None:
    conv = held_out(1, turns=60)
    trace = Trace("h", list(conv.messages), [v for v, _ in conv.facts], budget=5_000)
    out = await bench_bill.run_guard(trace, DEFAULTS)
    whole = bench_bill.run_whole(trace)
    assert out.within
    assert out.calls == len(trace.call_points) >= bench_bill.MIN_CALLS
    assert out.summaries > 0  # summariser requests are billed too
    assert out.bill < whole.bill
    # The events' estimate describes the calls right after the compactions.
    estimated, measured = out.writes
    assert measured > 0
    assert estimated == pytest.approx(measured, rel=0.1)


async def test_a_stateless_caller_refits_the_stored_history_and_keeps_a_checkpoint() -> None:
    """The adapters' way of using the guard, priced: within budget on every call, its
    summaries checkpointed (the next calls start from them) and billed, and a bill well
    under both whole history and truncating each call (it was above both before the
    stable windows: every call rewrote the cached prefix)."""
    conv = held_out(1, turns=60)
    trace = Trace("h", list(conv.messages), [v for v, _ in conv.facts], budget=5_000)
    out = await bench_bill.run_stateless(trace, DEFAULTS)
    whole, truncated = bench_bill.run_whole(trace), bench_bill.run_truncate(trace)
    assert out.within
    assert out.calls == len(trace.call_points)
    assert out.summaries > 0
    assert out.bill < 0.8 * whole.bill
    assert out.bill < 0.5 * truncated.bill


def _totals(bill: float, facts: float) -> Totals:
    return Totals.of([Outcome(bill=bill, bill_hour=bill, sent=0, facts=facts, within=True,
                              calls=60)])


def test_choose_never_trades_facts_for_a_lower_bill_and_breaks_ties_toward_the_defaults(
) -> None:
    whole = [_totals(100.0, 1.0)]
    cheaper_but_lossy = (0.3, 0.4, 0.8)
    near = (0.4, 0.5, 0.9)
    far = (0.3, 0.5, 0.9)
    regime = {DEFAULTS: _totals(60.0, 0.5), cheaper_but_lossy: _totals(40.0, 0.4),
              near: _totals(55.0, 0.5), far: _totals(54.9, 0.5)}
    assert choose([regime], whole) == near  # far is cheaper by less than the tie margin
    regime[far] = _totals(50.0, 0.5)
    assert choose([regime], whole) == far
