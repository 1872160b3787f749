"""smart_truncate fills the budget: a turn that does not fit is squeezed, not skipped.

The walk used to stop at the first unit that did not fit, so a tool loop with one large
output left most of the budget empty (issue 29: a median fill of 4% on tool-heavy
conversations cut to 8K). These tests pin the new contract: the result fills the budget
up to a small slack whenever the newest turns can be cut to fit, by the heuristic and by
the exact tokenizer, and every other invariant (order, pairing, opener, question, system
prompt) still holds.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxstack.compaction import CompactUtils
from ctxstack.compaction._truncate import MIN_CUT_TOKENS
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC, TokenCounter
from ctxstack.tokens._counter import effective_budget
from tests.conversations import (
    assert_opens_with_user,
    assert_subsequence,
    assert_tool_pairing,
)
from tests.exact_tokens import exact

SYSTEM = ChatMessage.system("You are an operations assistant. Answer from the tool output.")
WORDS = ["deploy", "ORD-77812", "latency", "p95", "eu-central", "42.7", "error", "row",
         "数据", "注文", "ok", "/srv/app/log.txt"]
SLACK = 2 * MIN_CUT_TOKENS
"""Tokens a filled result may leave unused: one message's rounding in the squeeze plus a
whole unit smaller than the cut threshold."""

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
    msgs = [SYSTEM]
    for n in range(draw(st.integers(1, 6))):
        msgs.extend(draw(tool_turn(n)))
    pinned = draw(st.booleans())
    msgs.append(ChatMessage.user("And what changed since yesterday?", pinned=pinned,
                                 metadata={"kind": "query"} if pinned else {}))
    return msgs, draw(st.integers(400, 6000))


def _floor(msgs: list[ChatMessage], counter: TokenCounter) -> int:
    """An upper bound of what any one turn costs squeezed as far as it goes (each message
    cut to at most ``SLACK``; calls are short here)."""
    worst = current = 0
    for m in msgs[1:]:
        if m.role == "user":
            current = 0
        current += min(counter.count_message(m), SLACK)
        worst = max(worst, current)
    return worst


def _check(out: list[ChatMessage], msgs: list[ChatMessage], limit: int,
           counter: TokenCounter) -> None:
    assert out[0] is SYSTEM
    assert out[-1] is msgs[-1], "the question was lost"
    assert_subsequence(out, msgs)
    assert_tool_pairing(out)
    assert_opens_with_user(out)
    assert counter.count_messages(out) <= limit


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(case=tool_heavy())
def test_a_truncated_tool_heavy_conversation_fills_the_budget(
    case: tuple[list[ChatMessage], int],
) -> None:
    msgs, budget = case
    limit = effective_budget(budget, HEURISTIC)
    assume(HEURISTIC.count_messages(msgs) > limit)
    fixed = HEURISTIC.count_messages([SYSTEM, msgs[-1]])
    assume(limit - fixed >= _floor(msgs[:-1], HEURISTIC))  # a fill is possible
    out = CompactUtils.smart_truncate(msgs, budget)
    _check(out, msgs, limit, HEURISTIC)
    # What stays unused is less than one turn squeezed as far as it goes (the turn at
    # the boundary did not fit even then), or the rounding slack.
    unused = limit - HEURISTIC.count_messages(out)
    assert unused <= max(SLACK, _floor(msgs[:-1], HEURISTIC)), "budget left unused"


def test_the_exact_tokenizer_is_filled_and_never_exceeded() -> None:
    """With an exact counter there is no margin: the result fills the budget by the
    tokenizer's own count, never over it."""
    o200k = exact("o200k_base")

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=tool_heavy())
    def check(case: tuple[list[ChatMessage], int]) -> None:
        msgs, budget = case
        assume(o200k.count_messages(msgs) > budget)
        assume(budget - o200k.count_messages([SYSTEM, msgs[-1]]) >= _floor(msgs[:-1], o200k))
        out = CompactUtils.smart_truncate(msgs, budget, counter=o200k)
        _check(out, msgs, budget, o200k)
        unused = budget - o200k.count_messages(out)
        assert unused <= max(SLACK, _floor(msgs[:-1], o200k))

    check()


def test_one_large_output_behind_the_question_no_longer_empties_the_window() -> None:
    """Issue 29's case: the newest tool loop holds an output larger than the budget; the
    old walk kept only the question. Now the loop's turn is kept with that output cut
    head+tail and the window is full."""
    call = ToolCall(id="c1", name="read_file", arguments={"path": "app.log"})
    log = "\n".join(f"line {i} status=ok latency={i % 97}ms" for i in range(4000))
    msgs = [SYSTEM, ChatMessage.user("Why is the service slow?"),
            ChatMessage.assistant(None, tool_calls=[call]), ChatMessage.tool("c1", log),
            ChatMessage.assistant("The log shows latency spikes every 97 lines."),
            ChatMessage.user("What about the last hour?", pinned=True,
                             metadata={"kind": "query"})]
    budget = 2_000
    out = CompactUtils.smart_truncate(msgs, budget)
    limit = effective_budget(budget, HEURISTIC)
    assert [m.role for m in out] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert out[1] is msgs[1]
    assert out[4] is msgs[4]
    assert out[5] is msgs[5]
    tool = out[3]
    assert tool.text.startswith("line 0 ")
    assert tool.text.endswith("line 3999 status=ok latency=22ms")
    assert tool.metadata["truncated_chars"] > 0
    assert limit - SLACK <= HEURISTIC.count_messages(out) <= limit
