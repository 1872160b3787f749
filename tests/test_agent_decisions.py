"""The agent's pure decisions: cycles, the final-answer policy, message assembly, parsing."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.agent import ToolOutcome, ToolTraceEntry
from ctxstack.agent import _decisions as decisions
from ctxstack.agent._prompts import CHECKLIST_PROMPT
from ctxstack.messages import ChatMessage, ToolCall


def calls(*specs: tuple[str, dict[str, object]]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(specs)]


# ----------------------------------------------------------------- cycles


def test_cycle_detected_on_the_third_identical_call() -> None:
    seq = calls(("s", {"q": 1}), ("s", {"q": 1}))
    assert decisions.detect_cycle(seq, 1, 3) is None
    seq += calls(("s", {"q": 1}))
    hit = decisions.detect_cycle(seq, 1, 3)
    assert hit is not None
    assert (hit.tool, hit.arguments, hit.repeats) == ("s", {"q": 1}, 3)


def test_argument_order_does_not_matter_but_values_do() -> None:
    seq = calls(("s", {"a": 1, "b": 2}), ("s", {"b": 2, "a": 1}), ("s", {"a": 1, "b": 2}))
    assert decisions.detect_cycle(seq, 1, 3) is not None
    seq = calls(("s", {"a": 1}), ("s", {"a": 1}), ("s", {"a": 2}))
    assert decisions.detect_cycle(seq, 1, 3) is None


def test_interrupted_streak_does_not_count() -> None:
    seq = calls(("s", {}), ("s", {}), ("t", {}), ("s", {}), ("s", {}))
    assert decisions.detect_cycle(seq, 1, 3) is None


def test_cycle_within_one_parallel_turn_is_detected() -> None:
    seq = calls(("s", {}), ("s", {}), ("s", {}))
    assert decisions.detect_cycle(seq, 3, 3) is not None


def test_an_old_streak_is_not_reported_again() -> None:
    seq = calls(("s", {}), ("s", {}), ("s", {}), ("t", {}))
    assert decisions.detect_cycle(seq, 1, 3) is None


def test_disabled_or_meaningless_thresholds() -> None:
    seq = calls(("s", {}), ("s", {}), ("s", {}))
    assert decisions.detect_cycle(seq, 1, None) is None
    assert decisions.detect_cycle(seq, 1, 1) is None
    assert decisions.detect_cycle(seq, 0, 3) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=12), st.integers(2, 4))
def test_warning_exactly_when_the_trailing_streak_is_a_multiple(names: list[str],
                                                                threshold: int) -> None:
    seq = calls(*[(n, {}) for n in names])
    streak = 1
    while streak < len(names) and names[-streak - 1] == names[-1]:
        streak += 1
    hit = decisions.detect_cycle(seq, 1, threshold)
    assert (hit is not None) == (streak % threshold == 0)
    if hit is not None:
        assert hit.repeats == streak


def test_cycle_warning_message_is_a_warning_kind_user_message() -> None:
    msg = decisions.cycle_warning_message(decisions.CycleHit(tool="s", arguments={"q": "x"},
                                                             repeats=3))
    assert msg.role == "user"
    assert msg.kind == "warning"
    assert not msg.pinned
    assert "'s'" in msg.text
    assert '{"q": "x"}' in msg.text
    assert "3 times" in msg.text


# ----------------------------------------------------------------- final answer policy


def decide(**kw: object) -> str:
    args: dict[str, object] = dict(pending_injections=False, tool_calls_run=0,
                                   checklist_threshold=3, checklist_done=False,
                                   iterations_left=5)
    args.update(kw)
    return decisions.on_final_answer(**args)  # type: ignore[arg-type]


def test_final_answer_policy() -> None:
    assert decide() == "finish"
    assert decide(tool_calls_run=2) == "finish"
    assert decide(tool_calls_run=3) == "checklist"
    assert decide(tool_calls_run=9, checklist_done=True) == "finish"
    assert decide(tool_calls_run=9, checklist_threshold=None) == "finish"
    assert decide(pending_injections=True) == "defer_for_inject"
    assert decide(pending_injections=True, tool_calls_run=5) == "defer_for_inject"
    # no iteration left: never hold an answer back
    assert decide(pending_injections=True, tool_calls_run=5, iterations_left=0) == "finish"


# ----------------------------------------------------------------- messages


def test_initial_messages_pin_only_the_current_query() -> None:
    stale = ChatMessage.user("old question", pinned=True, metadata={"kind": "query", "x": 1})
    summary = ChatMessage.system("[Conversation summary] s", metadata={"kind": "summary"})
    out = decisions.initial_messages("sys", [summary, stale], "new question")
    assert [m.text for m in out] == ["sys", summary.text, "old question", "new question"]
    assert out[1] is summary
    assert not out[2].pinned
    assert out[2].kind is None
    assert out[2].metadata == {"x": 1}
    assert out[3].pinned
    assert out[3].kind == "query"
    assert decisions.initial_messages("", [], "q")[0].kind == "query"


def test_a_history_passed_through_context_message_ahead_gives_the_same_context() -> None:
    """The chat service applies ``context_message`` to its history before the agent
    (keeping the copies between turns): the context is the one ``initial_messages``
    builds from the raw history, and the copies it was given are used as they are."""
    history = [
        ChatMessage(role="user", content="old question", pinned=True,
                    metadata={"kind": "query", "seq": 1, "mode": "react"}),
        ChatMessage.assistant("answer", metadata={"seq": 2}),
        ChatMessage.user("plain", metadata={"seq": 3}),
    ]
    ahead = [decisions.context_message(m) for m in history]
    assert ahead[1] is history[1]
    assert ahead[2] is history[2]
    assert ahead[0].metadata == {"seq": 1, "mode": "react"}
    assert not ahead[0].pinned
    assert [decisions.context_message(m) for m in ahead] == ahead
    raw = decisions.initial_messages("sys", history, "q")
    done = decisions.initial_messages("sys", ahead, "q")
    assert done == raw
    assert done[1] is ahead[0]


def test_tool_turn_messages_follow_call_order() -> None:
    turn = ChatMessage.assistant(None, tool_calls=calls(("a", {}), ("b", {})))
    outcomes = [ToolOutcome(call_id="c1", tool="b", arguments={}, content="B"),
                ToolOutcome(call_id="c0", tool="a", arguments={}, content="A")]
    out = decisions.tool_turn_messages(turn, outcomes)
    assert out[0] is turn
    assert [(m.role, m.tool_call_id, m.name, m.text) for m in out[1:]] == [
        ("tool", "c0", "a", "A"), ("tool", "c1", "b", "B")]


def test_checklist_and_inject_messages() -> None:
    c = decisions.checklist_message()
    assert (c.role, c.kind, c.text, c.pinned) == ("user", "checklist", CHECKLIST_PROMPT, False)
    i = decisions.inject_message("also this")
    assert (i.role, i.kind, i.text, i.pinned) == ("user", "inject", "also this", True)


def entry(tool: str, preview: str, error: str | None = None) -> ToolTraceEntry:
    return ToolTraceEntry(iteration=1, call_id="c", tool=tool, arguments={"k": 1},
                          result_preview=preview, duration_s=0.1, error=error)


def test_partial_answer_is_honest_and_lists_what_was_done() -> None:
    text = decisions.partial_answer(7, [entry("search", "found A"), entry("fetch", "", "timeout")],
                                    "I was about to compare A and B.")
    assert text.startswith("I stopped after 7 steps")
    assert "incomplete" in text
    assert 'search({"k": 1}): found A' in text
    assert "fetch" in text
    assert "failed (timeout)" in text
    assert "about to compare A and B" in text
    many = decisions.partial_answer(3, [entry("t", str(i)) for i in range(15)], None)
    assert "and 5 earlier tool calls" in many


def test_synthesis_messages_carry_query_followups_trace_and_answer() -> None:
    msgs = decisions.synthesis_messages("What?", ["and why?"], [entry("s", "x"),
                                        entry("f", "", "timeout")], "Because.", partial=True)
    assert msgs[0].role == "system"
    body = msgs[1].text
    assert msgs[1].pinned
    assert msgs[1].kind == "query"
    for part in ("Request:\nWhat?", "- and why?", '1. s({"k": 1}) -> x',
                 "2. f", "ERROR (timeout)", "partial", "Because."):
        assert part in body


def test_parse_tool_selection() -> None:
    avail = ["a", "b", "c"]
    assert decisions.parse_tool_selection('["b", "a", "b"]', avail) == ["b", "a"]
    assert decisions.parse_tool_selection('```json\n["c", "zz"]\n```', avail) == ["c"]
    assert decisions.parse_tool_selection("none", avail) is None
    assert decisions.parse_tool_selection("[]", avail) is None
    assert decisions.parse_tool_selection("[broken", avail) is None
    assert decisions.parse_tool_selection('["zz"]', avail) is None
    assert decisions.parse_tool_selection(json.dumps([1, "a"]), avail) == ["a"]
