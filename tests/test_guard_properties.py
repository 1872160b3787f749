"""Invariants of ContextGuard over long simulated runs and arbitrary conversations.

Whatever the conversation and whatever the summariser does, the result fits the budget,
keeps the system prompt first and the query pinned, keeps verbatim messages in order,
never splits a tool group, and leaves the input untouched.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxstack.compaction import CompactionOptions
from ctxstack.errors import LLMError
from ctxstack.guard import ContextGuard
from ctxstack.guard._rules import cut_message
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage, TextPart, ToolCall, repair_tool_turns
from ctxstack.protocol import ToolSpec
from ctxstack.tokens import HEURISTIC, HeuristicCounter
from ctxstack.tokens._counter import effective_budget

SYSTEM = ChatMessage.system("You are a research agent. Use tools; answer precisely.")


def _query(text: str = "Find the total of all invoices in /data/invoices.") -> ChatMessage:
    return ChatMessage.user(text, pinned=True, metadata={"kind": "query"})


def check_invariants(out: Sequence[ChatMessage], original: Sequence[ChatMessage],
                     budget: int) -> None:
    assert HEURISTIC.count_messages(out) <= budget
    assert out[0] is original[0]  # the system prompt, first and verbatim
    queries = [m for m in out if m.kind == "query"]
    assert len(queries) == 1
    assert queries[0].pinned
    positions = {id(m): i for i, m in enumerate(original)}
    kept = [positions[id(m)] for m in out if id(m) in positions]
    assert kept == sorted(kept), "verbatim messages out of order"
    assert sum(1 for m in out if m.kind == "summary") <= 1
    open_calls: set[str] = set()
    for m in out:
        if m.role == "tool":
            assert m.tool_call_id in open_calls, "orphan tool result"
            open_calls.discard(m.tool_call_id)  # type: ignore[arg-type]
        else:
            assert not open_calls, "tool group split"
            if m.tool_calls:
                open_calls = {c.id for c in m.tool_calls}
    assert not open_calls


def flaky_summariser(seed: int) -> ScriptedLLM:
    """Answers with a working summary, but one call in three fails in some way."""
    rng = random.Random(seed)
    state = {"n": 0}

    def handler(msgs: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> str:
        state["n"] += 1
        roll = rng.random()
        if roll < 0.12:
            raise LLMError("upstream 502")
        if roll < 0.22:
            return ""
        if roll < 0.33:
            return "<think>only thinking</think>"
        n = state["n"]
        return (
            f"## Goal\nTotal of invoices\n## Key data\n- invoices read: {n * 3}\n"
            f"- running total: ${n * 1234}.00\n## Pending\n- read batch {n + 1}\n"
            f"## Next step\nRead batch {n + 1}\n"
        )

    return ScriptedLLM(handler=handler)


@pytest.mark.parametrize("mode", ["truncate", "llm", "flaky"])
async def test_200_iterations_with_growing_tool_output_never_exceed_the_budget(
    mode: str,
) -> None:
    budget = 6_000
    rng = random.Random(42)
    llm = None if mode == "truncate" else (
        flaky_summariser(7) if mode == "flaky" else ScriptedLLM(
            handler=lambda m, t: "Invoices read so far; running total $12,345.00."
        )
    )
    guard = ContextGuard(llm, default_budget=budget, max_message_chars=6_000,
                         options=CompactionOptions(timeout=1.0))
    msgs: list[ChatMessage] = [SYSTEM, _query()]
    for i in range(200):
        before = list(msgs)
        out = await guard.check_and_compact(msgs, hint="react_iteration")
        assert msgs == before  # never mutated
        check_invariants(out, msgs, budget)
        if HEURISTIC.count_messages(msgs) <= effective_budget(budget, HEURISTIC) \
                and out is not msgs:
            # Only a stage-1 cut may replace a list that fits.
            assert guard.totals.cut_messages > 0
        msgs = list(out)
        call = ToolCall(id=f"c{i}", name="read_invoices", arguments={"batch": i})
        msgs.append(ChatMessage.assistant(f"Reading batch {i}.", tool_calls=[call]))
        size = 100 + i * 40 + rng.randint(0, 400)  # grows to ~8,500 characters
        msgs.append(ChatMessage.tool(f"c{i}", f"batch {i}: " + "inv-0001 $12.50; " * (size // 17)))
        if i % 37 == 36:
            msgs.append(ChatMessage.user(f"Also include credit notes (note {i}).", pinned=True,
                                         metadata={"kind": "inject"}))
    totals = guard.totals
    assert totals.checks == 200
    assert totals.compactions >= 10  # the run really was under pressure
    assert totals.cut_messages > 0  # and the late tool outputs were oversized
    if mode == "flaky":
        assert 0 < totals.fallbacks < totals.compactions
    if mode == "llm":
        assert totals.fallbacks == 0
        # Masking runs first now; a working summariser means nothing is truncated.
        assert totals.llm_compactions + totals.mask_compactions == totals.compactions
        assert totals.llm_compactions > 0


# ---------------------------------------------------------------------------- hypothesis

_text = st.text(alphabet="abcdefghijklmnop qrstuvwxyz0123456789日本語", min_size=0, max_size=60)


@st.composite
def conversations(draw: st.DrawFn) -> list[ChatMessage]:
    msgs = [SYSTEM]
    n_units = draw(st.integers(min_value=2, max_value=25))
    query_at = draw(st.integers(min_value=0, max_value=n_units))
    call_id = 0
    for u in range(n_units + 1):
        if u == query_at:
            msgs.append(_query(draw(_text) + "?"))
            continue
        kind = draw(st.sampled_from(["user", "assistant", "tools", "inject"]))
        size = draw(st.integers(min_value=0, max_value=8_000))
        body = draw(_text) + "w" * size
        if kind == "user":
            msgs.append(ChatMessage.user(body))
        elif kind == "assistant":
            msgs.append(ChatMessage.assistant(body))
        elif kind == "inject":
            msgs.append(ChatMessage.user(body[:800], pinned=True, metadata={"kind": "inject"}))
        else:
            n = draw(st.integers(min_value=1, max_value=3))
            ids = [f"t{call_id + k}" for k in range(n)]
            call_id += n
            msgs.append(ChatMessage.assistant(
                None, tool_calls=[ToolCall(id=i, name="f", arguments={"k": i}) for i in ids]
            ))
            msgs.extend(ChatMessage.tool(i, body) for i in ids)
    return msgs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=conversations(),
    budget=st.integers(min_value=2_500, max_value=8_000),
    use_llm=st.booleans(),
    hint=st.sampled_from(["react_iteration", "planner_input", "step_dependency", "general"]),
)
async def test_any_conversation_fits_and_stays_well_formed(
    msgs: list[ChatMessage], budget: int, use_llm: bool, hint: str
) -> None:
    llm = ScriptedLLM(handler=lambda m, t: "Summary: widgets, invoices, totals.") if use_llm \
        else None
    guard = ContextGuard(llm, default_budget=budget)
    frozen = [m.model_dump() for m in msgs]
    copy = list(msgs)
    out = await guard.check_and_compact(msgs, hint=hint)
    assert msgs == copy
    assert [m.model_dump() for m in msgs] == frozen
    check_invariants(out, msgs, budget)
    if HEURISTIC.count_messages(msgs) <= effective_budget(budget, HEURISTIC):
        event("within budget")
        assert out is msgs
        assert guard.totals.compactions == 0
    else:
        event("compacted")
        assert guard.totals.compactions == 1


# ------------------------------------------------- the prefix memo: exact under list edits
#
# The guard and the counters remember the running totals of the last list they saw (by
# identity of its message objects): a list that extends it has only its new messages counted.
# Whatever a caller does to its list between two calls, the total must be the one a full
# recount gives: here, the counter's own arithmetic with every cache bypassed.

EXACT = HeuristicCounter(margin=0.0)  # margin 0: the guard's limit is the budget itself
MAX_CHARS = 2_000


def full_recount(messages: Sequence[ChatMessage]) -> int:
    """No per-message cache, no memo: every message's text counted again."""
    return sum(EXACT.message_overhead + EXACT._content_tokens(m) for m in messages)


_bodies = st.builds(lambda t, n: t + "z" * n, _text, st.integers(min_value=0, max_value=2_600))


@st.composite
def fresh_messages(draw: st.DrawFn) -> ChatMessage:
    """A new message object: user, assistant (plain or multi-part), or a tool round half."""
    kind = draw(st.sampled_from(["user", "assistant", "parts", "call", "tool"]))
    body = draw(_bodies)
    if kind == "user":
        return ChatMessage.user(body)
    if kind == "assistant":
        return ChatMessage.assistant(body)
    if kind == "parts":
        return ChatMessage.user([TextPart(text=body), TextPart(text=draw(_text))])
    if kind == "call":
        return ChatMessage.assistant(None, tool_calls=[
            ToolCall(id="c", name="search", arguments={"q": body[:3_000]})])
    return ChatMessage.tool("c", body)


_edits = st.one_of(
    st.tuples(st.just("append"), st.lists(fresh_messages(), min_size=1, max_size=4)),
    st.tuples(st.just("replace"), st.integers(min_value=0), fresh_messages()),
    st.tuples(st.just("remove"), st.integers(min_value=0)),
    st.tuples(st.just("insert"), st.integers(min_value=0), fresh_messages()),
    st.tuples(st.just("swap"), st.integers(min_value=0), st.integers(min_value=0)),
    st.tuples(st.just("copy"), st.integers(min_value=0)),  # an equal but new object
    st.tuples(st.just("changed"), st.integers(min_value=0), _text),  # replace(content=…)
    st.tuples(st.just("truncate"), st.integers(min_value=0)),
    # the last messages replaced by more new ones (a retried turn)
    st.tuples(st.just("redo"), st.integers(min_value=1, max_value=3),
              st.lists(fresh_messages(), min_size=2, max_size=5)),
    st.tuples(st.just("same"), st.just(0)),
)


def apply_edit(msgs: list[ChatMessage], edit: tuple[object, ...]) -> None:
    """Edit ``msgs`` in place (the list object the caller keeps passing)."""
    op, *args = edit
    n = len(msgs)
    if op == "append":
        msgs.extend(args[0])  # type: ignore[arg-type]
        return
    if n == 0:
        return
    i = args[0] % n if isinstance(args[0], int) else 0  # type: ignore[operator]
    if op == "replace":
        msgs[i] = args[1]  # type: ignore[assignment]
    elif op == "remove" and n > 1:
        del msgs[i]
    elif op == "insert":
        msgs.insert(i, args[1])  # type: ignore[arg-type]
    elif op == "swap":
        j = args[1] % n  # type: ignore[operator]
        msgs[i], msgs[j] = msgs[j], msgs[i]
    elif op == "copy":
        msgs[i] = msgs[i].model_copy()
    elif op == "changed" and msgs[i].role != "tool":
        msgs[i] = msgs[i].replace(content=f"{msgs[i].text} {args[1]}", tool_calls=None)
    elif op == "truncate":
        del msgs[max(1, i):]
    elif op == "redo":
        del msgs[max(1, n - args[0]):]  # type: ignore[operator]
        msgs.extend(args[1])  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(fresh_messages(), min_size=30, max_size=45),
       edits=st.lists(_edits, min_size=1, max_size=12))
def test_counter_memo_total_is_a_full_recount_after_any_edit(
    start: list[ChatMessage], edits: list[tuple[object, ...]]
) -> None:
    counter = HeuristicCounter(margin=0.0)  # its own memo, fresh for this example
    msgs = list(start)
    assert counter.count_messages(msgs) == full_recount(msgs)
    for edit in edits:
        apply_edit(msgs, edit)
        event(str(edit[0]))
        assert counter.count_messages(msgs) == full_recount(msgs)
        assert counter.count_messages(tuple(msgs)) == full_recount(msgs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(fresh_messages(), min_size=1, max_size=40),
       edits=st.lists(_edits, min_size=1, max_size=8),
       over=st.booleans())
async def test_guard_decides_on_the_exact_total_after_any_edit(
    start: list[ChatMessage], edits: list[tuple[object, ...]], over: bool
) -> None:
    """At a budget of exactly the recounted total the list passes untouched (stage-1 cuts
    and the repair of broken tool turns aside); one token less and the compaction reports
    that exact total as its start."""
    guard = ContextGuard(max_message_chars=MAX_CHARS, counter=EXACT)
    msgs = list(start)
    for edit in [("same", 0), *edits]:
        apply_edit(msgs, edit)
        # what stage 1 must produce, made a valid request (the agent never sends another)
        cut = repair_tool_turns([cut_message(m, MAX_CHARS) for m in msgs])
        total = full_recount(cut)
        if total == 0:
            continue  # an orphan result alone: nothing valid is left to send
        budget = total - 1 if over and total > 1 else total
        result = await guard.check(msgs, budget)
        if budget == total:
            assert result.event is None
            assert result.messages == cut
            assert (result.messages is msgs) == (
                len(cut) == len(msgs) and all(a is b for a, b in zip(cut, msgs, strict=True)))
        else:
            assert result.event is not None
            assert result.event.tokens_before == total
