"""smart_truncate fills the budget: the turn that does not fit is cut to fit, not skipped.

The walk used to stop at the first unit that did not fit, so a tool loop with one large
output left most of the budget empty (issue 29: a median fill of 4% on tool-heavy
conversations cut to 8K). These tests pin the new contract: the result fills the budget
up to one turn's shortest form whenever a fill is possible, by the heuristic and by the
exact tokenizer, never over it; order, tool pairs, the opening user turn, the question
and the system prompt hold; only tool outputs are ever cut, and every other message is
the caller's object, unchanged.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxstack import ContextGuard
from ctxstack.compaction import CompactionOptions, CompactUtils
from ctxstack.compaction._groups import fixed_tokens
from ctxstack.compaction._options import watermark
from ctxstack.compaction._truncate import MIN_CUT_TOKENS
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC, TokenCounter
from ctxstack.tokens._counter import effective_budget
from tests.conversations import assert_opens_with_user, assert_subsequence, assert_tool_pairing
from tests.exact_tokens import exact

SYSTEM = ChatMessage.system("You are an operations assistant. Answer from the tool output.")
WORDS = ["deploy", "ORD-77812", "latency", "p95", "eu-central", "42.7", "error", "row",
         "数据", "注文", "ok", "/srv/app/log.txt"]
SLACK = 2 * MIN_CUT_TOKENS
"""Tokens a filled result may leave unused beyond one turn's shortest form: a cut lands
at or under its target (the cut length is searched in characters, not tokens)."""

words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)
big_output = st.integers(50, 1200).map(lambda n: " ".join(WORDS[i % len(WORDS)]
                                                          for i in range(n)))


@st.composite
def tool_turn(draw: st.DrawFn, number: int) -> list[ChatMessage]:
    """A user request, one to three tool rounds (large outputs), maybe an answer."""
    out = [ChatMessage.user(draw(words))]
    for r in range(draw(st.integers(1, 3))):
        calls = [ToolCall(id=f"c{number}_{r}_{k}", name="read", arguments={"page": k})
                 for k in range(draw(st.integers(1, 2)))]
        out.append(ChatMessage.assistant(None, tool_calls=calls))
        out.extend(ChatMessage.tool(c.id, draw(big_output)) for c in calls)
    if draw(st.booleans()):
        out.append(ChatMessage.assistant(draw(words)))
    return out


@st.composite
def tool_heavy(draw: st.DrawFn) -> tuple[list[ChatMessage], int]:
    """A system prompt, one to six tool turns, a new question (pinned or not); a budget."""
    msgs = [SYSTEM]
    for n in range(draw(st.integers(1, 6))):
        msgs.extend(draw(tool_turn(n)))
    pinned = draw(st.booleans())
    msgs.append(ChatMessage.user("And what changed since yesterday?", pinned=pinned,
                                 metadata={"kind": "query"} if pinned else {}))
    return msgs, draw(st.integers(300, 6000))


def shortest_turn(msgs: list[ChatMessage], counter: TokenCounter) -> int:
    """The most any one turn (user message to the next) costs in its shortest form: its
    user and assistant messages whole, its tool outputs cut to ``MIN_CUT_TOKENS``."""
    worst = current = 0
    for m in msgs[1:-1]:
        if m.role == "user":
            current = 0
        cost = counter.count_message(m)
        current += min(cost, MIN_CUT_TOKENS) if m.role == "tool" else cost
        worst = max(worst, current)
    return worst


def check(out: list[ChatMessage], msgs: list[ChatMessage], limit: int,
          counter: TokenCounter) -> None:
    """The invariants every result keeps, filled or not."""
    assert counter.count_messages(out) <= limit, "over budget"
    assert out[0] is SYSTEM
    assert out[-1] is msgs[-1], "the question was lost"
    assert_subsequence(out, msgs)
    assert_tool_pairing(out)
    assert_opens_with_user(out)
    originals = {id(m) for m in msgs}
    for m in out:
        if id(m) not in originals:  # only tool outputs are cut, and say so
            assert m.role == "tool"
            assert m.metadata["truncated_chars"] > 0
            assert not m.text or "characters removed" in m.text  # cut to nothing: empty


SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case=tool_heavy())
def test_a_tool_heavy_conversation_is_cut_to_a_full_valid_window(
    case: tuple[list[ChatMessage], int],
) -> None:
    msgs, budget = case
    limit = effective_budget(budget, HEURISTIC)
    assume(HEURISTIC.count_messages(msgs) > limit)
    out = CompactUtils.smart_truncate(msgs, budget)
    check(out, msgs, limit, HEURISTIC)
    plain = CompactUtils.smart_truncate(msgs, budget, fill=0)
    check(plain, msgs, limit, HEURISTIC)
    # Filling never keeps less than the plain walk (up to a cut's rounding: the plain
    # walk may keep the newest unit cut to fit, the fill refits it with its opener).
    assert HEURISTIC.count_messages(out) >= HEURISTIC.count_messages(plain) - SLACK
    fixed = HEURISTIC.count_messages([SYSTEM, msgs[-1]])
    floor = shortest_turn(msgs, HEURISTIC)
    if limit - fixed >= floor:  # a fill is possible: what stays unused is under one turn
        unused = limit - HEURISTIC.count_messages(out)
        assert unused <= floor + SLACK, "budget left unused"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tool_heavy(), share=st.floats(0.0, 1.0))
def test_a_partial_fill_stops_at_its_share(
    case: tuple[list[ChatMessage], int], share: float,
) -> None:
    """``fill`` caps what the boundary turn may bring the result up to (the whole units
    the plain walk keeps are kept anyway), and fills up to that cap."""
    msgs, budget = case
    limit = effective_budget(budget, HEURISTIC)
    assume(HEURISTIC.count_messages(msgs) > limit)
    out = CompactUtils.smart_truncate(msgs, budget, fill=share)
    check(out, msgs, limit, HEURISTIC)
    plain = HEURISTIC.count_messages(CompactUtils.smart_truncate(msgs, budget, fill=0))
    cap = watermark(limit, fixed_tokens(msgs, HEURISTIC), share)  # a share of the history's room
    assert HEURISTIC.count_messages(out) <= max(plain, cap)
    floor = shortest_turn(msgs, HEURISTIC)
    assert HEURISTIC.count_messages(out) >= min(plain, cap - floor - SLACK)


def test_the_exact_tokenizer_is_filled_and_never_exceeded() -> None:
    """With an exact counter there is no margin: the result fills the budget by the
    tokenizer's own count and is never over it."""
    o200k = exact("o200k_base")

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=tool_heavy())
    def run(case: tuple[list[ChatMessage], int]) -> None:
        msgs, budget = case
        assume(o200k.count_messages(msgs) > budget)
        out = CompactUtils.smart_truncate(msgs, budget, counter=o200k)
        check(out, msgs, budget, o200k)
        floor = shortest_turn(msgs, o200k)
        if budget - o200k.count_messages([SYSTEM, msgs[-1]]) >= floor:
            assert budget - o200k.count_messages(out) <= floor + SLACK

    run()


LOG = "\n".join(f"line {i} status=ok latency={i % 97}ms" for i in range(4000))


def incident() -> list[ChatMessage]:
    """Issue 29's case: a tool loop whose newest output alone exceeds the budget, then
    the final answer and a new question."""
    calls = [ToolCall(id=f"c{i}", name="read_file", arguments={"path": f"app{i}.log"})
             for i in range(3)]
    return [SYSTEM, ChatMessage.user("Why is the service slow? Ticket INC-4471."),
            ChatMessage.assistant(None, tool_calls=[calls[0]]), ChatMessage.tool("c0", LOG),
            ChatMessage.assistant("Checking the other two.", tool_calls=calls[1:]),
            ChatMessage.tool("c1", LOG), ChatMessage.tool("c2", LOG),
            ChatMessage.assistant("The log shows latency spikes every 97 lines."),
            ChatMessage.user("What about the last hour?")]


def test_the_newest_tool_loop_is_kept_cut_instead_of_leaving_only_the_question() -> None:
    msgs = incident()
    budget = 2_000
    limit = effective_budget(budget, HEURISTIC)
    # the plain walk keeps the question alone: the loop's last group does not fit
    assert CompactUtils.smart_truncate(msgs, budget, fill=0) == [SYSTEM, msgs[-1]]
    out = CompactUtils.smart_truncate(msgs, budget)
    # the first step gives way whole (cut, it would keep nothing); the parallel calls'
    # outputs are cut head+tail, the older one first and to its floor
    assert [m.role for m in out] == ["system", "user", "assistant", "tool", "tool",
                                     "assistant", "user"]
    assert out[1] is msgs[1]
    assert out[2] is msgs[4]
    assert out[-2] is msgs[-2]
    first, second = out[3], out[4]
    assert (first.tool_call_id, second.tool_call_id) == ("c1", "c2")
    assert HEURISTIC.count_message(first) <= MIN_CUT_TOKENS < HEURISTIC.count_message(second)
    assert second.text.startswith("line 0 ")
    assert second.text.endswith("line 3999 status=ok latency=22ms")
    assert limit - SLACK <= HEURISTIC.count_messages(out) <= limit


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_loops_opening_request_is_kept_whole_and_its_tool_output_cut(share: float) -> None:
    """Found by the property above: when only the newest loop's opening user message and a
    cut of its output fit, the plain walk (``fill=0``) promised the opener a quarter of the
    budget and cut it by a few characters — the user's own request — beside the output.
    An opener of at most half the budget is kept whole; the tool output gives way."""
    opener = ChatMessage.user("deploy " * 17 + "ORD-77812 ORD-77812 " + "/srv/app/log.txt " * 4
                              + "ORD-77812")
    call = ChatMessage.assistant(None, tool_calls=[ToolCall(id="c0", name="read",
                                                            arguments={"page": 0})])
    output = ChatMessage.tool("c0", (" ".join(WORDS) + " ") * 7)
    question = ChatMessage.user("And what changed since yesterday?", pinned=True)
    msgs = [SYSTEM, opener, call, output, question]
    limit = effective_budget(300, HEURISTIC)
    assert HEURISTIC.count_messages(msgs) > limit
    assert HEURISTIC.count_messages([SYSTEM, opener, call, question]) < limit // 2
    out = CompactUtils.smart_truncate(msgs, 300, fill=share)
    check(out, msgs, limit, HEURISTIC)
    assert out[:3] == [SYSTEM, opener, call]
    assert out[1] is opener  # the caller's object: not cut
    assert out[3].metadata["truncated_chars"] > 0


def test_messages_the_walk_keeps_whole_stay_the_callers_objects() -> None:
    """The newest units keep their identity; a masked placeholder is never cut."""
    msgs = incident()
    placeholder = msgs[3].replace(content="[tool output cleared: read_file(...)]",
                                  metadata={"masked": True})
    msgs[3] = placeholder
    out = CompactUtils.smart_truncate(msgs, 2_500)
    assert placeholder in out or all(m.tool_call_id != "c0" for m in out)
    kept = [m for m in out if m.role != "tool"]
    assert all(any(m is o for o in msgs) for m in kept)


async def test_the_guards_truncation_leaves_the_low_watermark_free() -> None:
    """In the compaction pipeline the fill stops at ``target_fill``: a truncation filled
    to the brim would be undone by the very next message."""
    msgs = incident()
    budget = 3_000
    events = []
    guard = ContextGuard(default_budget=budget, on_compact=events.append,
                         options=CompactionOptions(mask=False, target_fill=0.5))
    out = await guard.check_and_compact(msgs)
    limit = effective_budget(budget, HEURISTIC)
    plain = HEURISTIC.count_messages(CompactUtils.smart_truncate(msgs, budget, fill=0))
    assert [e.method for e in events] == ["truncate"]
    assert plain < HEURISTIC.count_messages(out) <= watermark(
        limit, fixed_tokens(msgs, HEURISTIC), 0.5)
    assert out[-1] is msgs[-1]


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "1"])
def test_a_fill_share_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="fill"):
        CompactUtils.smart_truncate(incident(), 500, fill=bad)  # type: ignore[arg-type]
