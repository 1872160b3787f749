"""CalibratingCounter anchoring: a call that extends the last observed one is counted from
what the provider reported for it, plus the calibrated estimate of the new tail."""

from __future__ import annotations

import math
import random

import pytest

from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.protocol import ToolSpec, Usage
from ctxstack.tokens import HEURISTIC, SEED_HEURISTIC, CalibratingCounter, TokenCounter
from ctxstack.tokens._calibration import message_floor
from ctxstack.tokens._model import lower_bound

TOOLS: list[ToolSpec] = [{"type": "function", "function": {
    "name": "search", "description": "Search the archive for a phrase.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def provider(messages: list[ChatMessage]) -> int:
    """A stand-in provider whose tokenizer differs from the heuristic by text and kind."""
    return SEED_HEURISTIC.count_messages(messages) + 3


def conversation(rng: random.Random, turns: int) -> list[ChatMessage]:
    words = ["alpha", "beta", "注文", "ORD-7", '{"k": [1, 2]}', "def f(x):", "the", "会議"]
    msgs = [ChatMessage.system("You are a careful assistant. " * 5)]
    for turn in range(turns):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
        if turn % 3 == 2:
            call = ToolCall(id=f"c{turn}", name="search", arguments={"q": text[:40]})
            msgs += [ChatMessage.assistant(None, tool_calls=[call]),
                     ChatMessage.tool(call.id, '{"hits": [' + text + "]}")]
        else:
            msgs.append(ChatMessage.user(text) if turn % 2 else ChatMessage.assistant(text))
    return msgs


def observed(counter: CalibratingCounter, msgs: list[ChatMessage], reported: int,
             tools: list[ToolSpec] | None = None) -> bool:
    return counter.observe_call(msgs, Usage(input_tokens=reported, calls=1), tools)


def test_without_a_prior_call_the_factors_alone_count() -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(1), 6)
    assert counter.anchor is None
    assert counter.count_messages(msgs) == HEURISTIC.count_messages(msgs)


def test_an_extended_call_is_the_reported_total_plus_the_tail() -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(2), 12)
    head, tail = msgs[:8], msgs[8:]
    assert observed(counter, head, provider(head))
    assert counter.count_messages(head) == provider(head)  # exactly what was billed
    expected = provider(head) + sum(
        counter.kind_factor(kind) * estimate
        for kind, estimate in enumerate(counter.kind_estimates(tail)))
    assert counter.count_messages(msgs) == math.ceil(expected)
    # a generator of the same messages is anchored too
    assert counter.count_messages(m for m in msgs) == math.ceil(expected)


def test_equal_messages_rebuilt_from_storage_still_anchor() -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(3), 9)
    assert observed(counter, msgs, provider(msgs))
    rebuilt = [ChatMessage.model_validate(m.model_dump()) for m in msgs]
    assert rebuilt[0] is not msgs[0]
    assert counter.count_messages(rebuilt) == provider(msgs)


def test_tool_specs_are_taken_out_of_the_anchor() -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(4), 6)
    tools_tokens = counter.tool_specs_tokens(TOOLS)
    assert observed(counter, msgs, provider(msgs) + tools_tokens, TOOLS)
    code = counter.kind_factor(1)
    assert counter.count_messages(msgs) == math.ceil(
        provider(msgs) + tools_tokens - code * tools_tokens)


def test_a_call_that_does_not_extend_the_last_one_falls_back_to_the_factors() -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(5), 10)
    assert observed(counter, msgs, provider(msgs))
    compacted = [msgs[0], ChatMessage.user("summary of the earlier turns"), *msgs[6:]]
    shorter = msgs[:-2]
    plain = CalibratingCounter()
    plain.load_state(counter.export_state())  # same factors, no anchor
    assert plain.anchor is None
    for other in (compacted, shorter):
        assert counter.count_messages(other) == plain.count_messages(other)
    counter.forget_anchor()
    assert counter.count_messages(msgs) == plain.count_messages(msgs)


@pytest.mark.parametrize("reported", [0, -5, 10**9])
def test_absurd_reports_neither_anchor_nor_replace_an_anchor(reported: int) -> None:
    counter = CalibratingCounter()
    msgs = conversation(random.Random(6), 8)
    assert not observed(counter, msgs, reported)
    assert counter.anchor is None
    assert observed(counter, msgs[:5], provider(msgs[:5]))
    before = counter.anchor
    assert not observed(counter, msgs, reported)
    assert counter.anchor is before
    # no input reported is skipped as no evidence; an absurd ratio is counted as rejected
    assert counter.rejected == (2 if reported > 0 else 0)


def test_a_low_report_never_takes_a_count_below_the_lower_bound() -> None:
    counter = CalibratingCounter(min_factor=0.2)  # lets a report of 26% through
    msgs = [ChatMessage.user("x" * 4000)]  # the heuristic says ≥ 500 (its floor)
    base = HEURISTIC.count_messages(msgs)
    assert observed(counter, msgs, math.ceil(base * 0.26))  # within the accepted ratios
    floor = sum(message_floor(m, HEURISTIC) for m in msgs)
    assert floor >= lower_bound(4000)
    longer = [*msgs, ChatMessage.assistant("y" * 800)]
    assert counter.count_messages(msgs) >= floor
    assert counter.count_messages(longer) >= floor + lower_bound(800)
    assert counter.count_text("x" * 4000) >= lower_bound(4000)
    assert counter.count_message(msgs[0]) >= floor


def test_anchoring_cuts_the_per_call_error_of_a_growing_conversation() -> None:
    def errors(counter: TokenCounter, anchor: bool) -> list[float]:
        assert isinstance(counter, CalibratingCounter)
        msgs = conversation(random.Random(7), 40)
        out = []
        for calls, end in enumerate(range(4, len(msgs) + 1, 2)):
            sent = msgs[:end]
            truth = provider(sent)
            if calls >= 5:
                out.append(abs(counter.count_messages(sent) - truth) / truth)
            observed(counter, sent, truth)
            if not anchor:
                counter.forget_anchor()
        return out

    anchored = errors(CalibratingCounter(), anchor=True)
    factors_only = errors(CalibratingCounter(), anchor=False)
    assert max(anchored) < 0.05
    assert sum(anchored) < sum(factors_only) / 2


def test_the_anchor_is_per_counter_object_and_not_persisted() -> None:
    counter = CalibratingCounter(model="gpt-4o")
    msgs = conversation(random.Random(8), 6)
    assert observed(counter, msgs, provider(msgs))
    assert counter.anchor is not None
    assert counter.for_model("gpt-4o").anchor is None
    state = counter.export_state()
    assert "anchor" not in str(state)
    restored = CalibratingCounter(model="gpt-4o")
    restored.load_state(state)
    assert restored.anchor is None
    # observing under another model's name trains that model but anchors nothing here
    other = CalibratingCounter(model="gpt-4o")
    assert other.observe_messages(msgs, provider(msgs), model="gpt-4")
    assert other.anchor is None


def test_an_upward_only_counter_never_anchors_below_the_base_estimate() -> None:
    counter = CalibratingCounter(min_factor=1.0)  # how the service builds its counters
    msgs = conversation(random.Random(9), 8)
    base = HEURISTIC.count_messages(msgs)
    assert observed(counter, msgs, math.ceil(base * 0.7))  # bills less than we estimate
    assert counter.count_messages(msgs) >= base
    assert counter.count_messages([*msgs, ChatMessage.user("and one more")]) >= base
    higher = CalibratingCounter(min_factor=1.0)
    assert observed(higher, msgs, math.ceil(base * 1.3))  # bills more: the anchor holds
    assert higher.count_messages(msgs) == math.ceil(base * 1.3)


@pytest.mark.parametrize("min_factor", [0.5, 1.0])
def test_anchored_counts_follow_the_rule_with_or_without_floors(min_factor: float) -> None:
    """An anchored count is ``max(ceil(bounded total), Σ floors)``; a counter that never
    corrects downward (``min_factor >= 1``) skips the floors, and its counts are the same
    as if it had compared them."""
    rng = random.Random(3)
    msgs = conversation(rng, 20)
    counter = CalibratingCounter(min_factor=min_factor)
    for end in range(4, len(msgs) - 2, 3):
        sent = msgs[:end]
        low = round(HEURISTIC.count_messages(sent) * rng.choice([0.6, 0.8, 1.2]))
        assert observed(counter, sent, low)
        anchor = counter.anchor
        assert anchor is not None
        floors = sum(message_floor(m, HEURISTIC) for m in sent)
        assert anchor.floor == (floors if min_factor < 1 else 0)
        grown = msgs[: end + 2]
        base = HEURISTIC.count_messages(grown)
        total = anchor.tokens + counter._factored(grown[end:])
        total = min(counter.max_factor * base, max(counter.min_factor * base, total))
        everything = sum(message_floor(m, HEURISTIC) for m in grown)
        assert counter.count_messages(grown) == max(math.ceil(total), everything)
