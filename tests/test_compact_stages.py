"""Staged compaction (mask → llm → truncate), the in-memory archive and the facts scan."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ctxstack import CompactionOptions, ContextGuard, HistoryArchive
from ctxstack.compaction import CompactionContext, CompactionResult, RollingSummary, Truncate
from ctxstack.compaction._facts import extract_facts, select_facts
from ctxstack.compaction._mask import MASKED_KEY, plan_mask
from ctxstack.compaction._stages import RECALL_NOTE, compact_staged
from ctxstack.errors import ConfigError, InputError
from ctxstack.guard import CompactionEvent
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import effective_budget
from tests.service_support import clean_env

SYS = ChatMessage.system("You are a research agent.")
QUERY = ChatMessage.user("Compare the hotels.", pinned=True, metadata={"kind": "query"})


def tool_run(rounds: int, size: int = 2_000) -> list[ChatMessage]:
    msgs = [SYS, QUERY]
    for i in range(rounds):
        call = ToolCall(id=f"c{i}", name="search", arguments={"page": i})
        msgs.append(ChatMessage.assistant(f"Reading page {i}.", tool_calls=[call]))
        msgs.append(ChatMessage.tool(f"c{i}", f"page {i} HOTEL-{i:04d} " + "row " * (size // 5)))
    return msgs


def valid_pairs(msgs: list[ChatMessage]) -> bool:
    calls = {c.id for m in msgs for c in m.tool_calls or ()}
    answered = {m.tool_call_id for m in msgs if m.role == "tool"}
    return calls == answered


async def test_masking_alone_fits_without_a_model_call_and_keeps_pairs() -> None:
    msgs = tool_run(10)
    llm = ScriptedLLM(handler=lambda m, t: "summary")
    archive = HistoryArchive()
    options = CompactionOptions(mask_fill=0.6)
    res = await compact_staged(msgs, llm, 4_000, options, counter=HEURISTIC, archive=archive)
    assert res.method == "mask"
    assert llm.calls == []  # no summariser call
    assert res.tokens_after <= 4_000
    assert len(res.messages) == len(msgs)  # every message still in place
    assert valid_pairs(res.messages)
    cleared = [m for m in res.messages if m.metadata.get(MASKED_KEY)]
    assert res.masked == len(cleared) == res.archived == len(archive) > 0
    # oldest first; the newest two tool groups keep their output
    assert cleared[0].tool_call_id == "c0"
    assert not res.messages[-1].metadata.get(MASKED_KEY)
    assert not res.messages[-3].metadata.get(MASKED_KEY)
    # the placeholder names tool, arguments, size, a head preview and the recall ref
    text = cleared[0].text
    ref = cleared[0].metadata["archive_ref"]
    assert 'search({"page":0})' in text
    assert "characters" in text
    assert "HOTEL-0000" in text
    assert f"recall ref {ref}" in text
    original = await archive.get(ref)
    assert original is not None
    assert original.text == msgs[3].text
    # only as much as needed: the mask stage's fill, not everything
    assert res.tokens_after <= 4_000 * options.mask_fill
    assert len(cleared) < 8


async def test_masking_not_enough_goes_on_to_the_summary_with_a_recall_note() -> None:
    msgs = tool_run(4, size=4_000)
    msgs += [ChatMessage.user("more " * 400), ChatMessage.assistant("answer " * 400)] * 3
    llm = ScriptedLLM(handler=lambda m, t: "Summary of the research so far.")
    archive = HistoryArchive()
    res = await compact_staged(msgs, llm, 2_500, counter=HEURISTIC, archive=archive)
    assert res.method == "llm"
    assert res.masked > 0
    assert res.summary is not None
    assert RECALL_NOTE in res.summary.text
    assert res.tokens_after <= 2_500
    assert len(archive) == res.archived >= res.masked


async def test_the_recall_tool_is_named_as_the_options_say() -> None:
    """The proxy reads its archives back with ``ctxstack_recall``: its placeholders and
    the summary's note name that tool, not the agents' ``recall``."""
    msgs = tool_run(4, size=4_000)
    msgs += [ChatMessage.user("more " * 400), ChatMessage.assistant("answer " * 400)] * 3
    llm = ScriptedLLM(handler=lambda m, t: "Summary of the research so far.")
    options = CompactionOptions(recall_tool="ctxstack_recall")
    res = await compact_staged(msgs, llm, 2_500, options, counter=HEURISTIC,
                               archive=HistoryArchive())
    assert res.summary is not None
    assert "`ctxstack_recall`" in res.summary.text
    assert "`recall`" not in res.summary.text
    masked = await compact_staged(tool_run(10), llm, 4_000, options.with_(mask_fill=0.6),
                                  counter=HEURISTIC, archive=HistoryArchive())
    cleared = [m.text for m in masked.messages if m.metadata.get(MASKED_KEY)]
    assert cleared
    assert all("; ctxstack_recall ref " in t for t in cleared)


async def test_without_a_summariser_masking_then_truncation_archives_the_dropped() -> None:
    msgs = tool_run(3, size=4_000)
    msgs += [ChatMessage.user("question " * 300), ChatMessage.assistant("reply " * 300)] * 2
    archive = HistoryArchive()
    res = await compact_staged(msgs, None, 1_500, counter=HEURISTIC, archive=archive)
    assert res.method == "truncate"
    assert res.tokens_after <= 1_500
    dropped = [m for m in msgs if all(m is not k for k in res.messages)]
    assert dropped
    assert len(archive) >= len(dropped) - res.masked


async def test_masking_is_cache_friendly_messages_before_the_first_cleared_are_untouched() -> None:
    msgs = tool_run(12)
    res = await compact_staged(msgs, None, 4_000, counter=HEURISTIC)
    first = next(i for i, m in enumerate(res.messages) if m.metadata.get(MASKED_KEY))
    assert all(a is b for a, b in zip(res.messages[:first], msgs[:first], strict=True))
    # a second pass after growth clears the next-oldest outputs, earlier placeholders stay
    grown = [*res.messages, *tool_run(3)[2:]]
    again = await compact_staged(grown, None, 4_000, counter=HEURISTIC)
    assert again.messages[: first + 1] == res.messages[: first + 1]


async def test_a_tool_loop_under_a_guard_keeps_every_prefix_until_the_first_new_mask() -> None:
    """The prompt-cache contract over a growing agent loop: each call is within budget, and
    a call after a mask-only compaction is byte-identical to the previous call up to the
    first output this compaction cleared (earlier placeholders included)."""
    events: list[CompactionEvent] = []
    guard = ContextGuard(default_budget=3_000, on_compact=events.append)
    history = [SYS, QUERY]
    previous: list[ChatMessage] = []
    mask_events = 0
    for i in range(30):
        call = ToolCall(id=f"c{i}", name="search", arguments={"page": i})
        history += [ChatMessage.assistant(f"Reading page {i}.", tool_calls=[call]),
                    ChatMessage.tool(f"c{i}", f"page {i} HOTEL-{i:04d} " + "row " * 150)]
        seen = len(events)
        sent = await guard.check_and_compact(history)
        assert guard.counter.count_messages(sent) <= 3_000
        assert valid_pairs(sent)
        if len(events) > seen and events[-1].method == "mask":
            mask_events += 1
            new = [j for j, m in enumerate(sent) if m.metadata.get(MASKED_KEY)
                   and not (j < len(previous) and previous[j].metadata.get(MASKED_KEY))]
            assert new, "a mask-only compaction clears at least one new output"
            first = new[0]
            assert first > 2
            assert [m.model_dump_json() for m in sent[:first]] == [
                m.model_dump_json() for m in previous[:first]]
        history, previous = sent, sent
    assert mask_events >= 2  # the loop did compact, more than once, by masking


def test_plan_mask_is_pure_and_respects_its_options() -> None:
    msgs = tool_run(6)
    plan = plan_mask(msgs, 2_000, CompactionOptions(mask_keep_groups=4), HEURISTIC)
    assert set(plan.indices) <= {3, 5}  # only the two oldest groups are candidates
    assert not plan_mask(msgs, 2_000, CompactionOptions(mask=False), HEURISTIC)
    assert not plan_mask(msgs, 2_000, CompactionOptions(mask_min_tokens=100_000), HEURISTIC)
    assert msgs == tool_run(6)


async def test_guard_reports_the_stage_and_archives() -> None:
    events: list[CompactionEvent] = []
    archive = HistoryArchive()
    guard = ContextGuard(default_budget=3_000, on_compact=events.append, archive=archive)
    out = await guard.check_and_compact(tool_run(10))
    assert HEURISTIC.count_messages(out) <= 3_000
    assert [e.method for e in events] == ["mask"]
    assert events[0].masked == events[0].archived == len(archive) > 0
    assert guard.totals.mask_compactions == 1
    with pytest.raises(ConfigError, match="archive"):
        ContextGuard(archive=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"keep_recent": -1}, "keep_recent"), ({"target_fill": 0}, "target_fill"),
    ({"timeout": -1}, "timeout"), ({"hint": "nope"}, "hint"), ({"prompt": " "}, "prompt"),
    ({"mask_keep_groups": 1.5}, "mask_keep_groups"), ({"mask_fill": 0}, "mask_fill"),
    ({"mask_fill": 1.5}, "mask_fill"), ({"mask_fill": True}, "mask_fill"),
    ({"mask_accept": 0}, "mask_accept"), ({"mask_accept": "high"}, "mask_accept"),
])
def test_options_name_what_is_wrong(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        CompactionOptions(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- archive
async def test_history_archive_search_ranks_and_reads_back_cjk_included() -> None:
    archive = HistoryArchive()
    filler = [ChatMessage.user(f"We discussed the weather on day {i}.") for i in range(20)]
    refs = await archive.add([
        *filler,
        ChatMessage.user("My order ORD-99812-XK weighs 3.14159 kg."),
        ChatMessage.assistant("会議は東京本社の第三会議室で行います。"),
        ChatMessage.user("我们的预算上限是四万八千元。"),
    ])
    assert len(archive) == 23
    assert len(set(refs)) == 23
    hits = await archive.search("what was the order ORD-99812-XK", k=5)
    assert hits[0].ref == refs[20]
    assert len(hits) <= 5
    assert (await archive.search("会議室はどこ"))[0].ref == refs[21]
    assert (await archive.search("预算上限"))[0].ref == refs[22]
    again = await archive.add([hits[0].message])  # an archived copy is not archived twice
    assert again == [refs[20]]
    assert len(archive) == 23
    assert (await archive.get(refs[21])) is not None
    assert await archive.get("a999") is None
    with pytest.raises(InputError, match="query"):
        await archive.search("")
    with pytest.raises(InputError, match="k must"):
        await archive.search("x", k=0)


# ---------------------------------------------------------------------- facts
def test_facts_are_chosen_by_what_they_are_not_by_where_they_are() -> None:
    """The issue's case: a user states four values once, then 20 turns of filler."""
    msgs = [ChatMessage.user("Order ORD-99812-XK, weight 3.14159 kg, file /srv/data/in.csv, "
                             "due 2026-03-14.")]
    for i in range(20):
        msgs += [ChatMessage.user(f"Tell me about word{i} number {i}."),
                 ChatMessage.assistant(f"word{i} is item {i} of the list, {i + 1} left.")]
    facts = select_facts(msgs, "A summary.", 60, HEURISTIC)
    assert set(facts[:4]) == {"ORD-99812-XK", "3.14159 kg", "/srv/data/in.csv", "2026-03-14"}
    assert not any(f.startswith("word") for f in facts)
    assert "3月5日" in extract_facts("会議は3月5日です")
    assert "March 5, 2024" in extract_facts("due March 5, 2024 please")


ADVERSARIAL = ["a", "1", "a1", '"', "/", "a-", "日", "1年", "「", "a.", "1 ", "March 1 ",
               "https:/", "a@", "-1", "1.", '"a ', "x.p", "ORD-", "$1,", "v1.", "1 kg ",
               "1 k", "a1 %", "1日", "x1日", "5 March ", "March 2024 ", '"a b', "€1",
               "1,", "Mar. ", "Sept. 1", "March 1st-", "1 kg-", "1年a", "a.c"]
"""Units repeated to 100,000 characters."""
LONG_RUNS = [("日", "1", ""), ("", "1", "日"), ("", "a", "1"), ("", "1", " k"),
             ("1" * 50_000 + "x", "1", "年"), ("M", "1", ""), ('"', "a", ""),
             ("1", ",", "a"), ("1 kg-", "a", "1"), ("May 1st-", "a", "1"), ("", "a", " ")]
"""(head, repeated character, tail) built to 100,000 characters: one long run. A scan
that restarted inside a run would re-read it from every byte."""


def test_every_fact_regex_is_linear_on_adversarial_input() -> None:
    """Each 100,000-character adversarial string goes through the whole extractor in a
    subprocess bounded by a generous wall clock (a quadratic regex takes minutes)."""
    code = textwrap.dedent(f"""
        from ctxstack.compaction._facts import extract_candidates
        for unit in {ADVERSARIAL!r}:
            text = (unit * (100_000 // len(unit) + 1))[:100_000]
            assert len(text) == 100_000
            extract_candidates(text)
            extract_candidates(text + ".py")
        for head, char, tail in {LONG_RUNS!r}:
            text = head + char * (100_000 - len(head) - len(tail)) + tail
            extract_candidates(text)
    """)
    # this checkout's sources, not whichever copy the interpreter has installed
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env=clean_env())


def test_a_lone_surrogate_in_a_quoted_phrase_does_not_break_extraction() -> None:
    """Text decoded leniently upstream can carry lone surrogates; the extractor encodes with
    ``surrogatepass`` and must decode what it found the same way (it used to raise)."""
    found = extract_facts('keep "room \ud800 with a view" and ORD-12-X')
    assert '"room \ud800 with a view"' in found
    assert "ORD-12-X" in found


# ------------------------------------------------------------ strategies as a pipeline


class _Halve:
    """A test strategy: drops every other tool *output text* (a partial step: never fits
    by itself on a long run), recording what it was handed."""

    name = "halve"
    method = "mask"

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def compact(self, messages: list[ChatMessage], ctx: CompactionContext
                      ) -> CompactionResult | None:
        self.seen.append(len(messages))
        out = [m.model_copy(update={"content": "[halved]"}) if m.role == "tool" and i % 4 == 1
               else m for i, m in enumerate(messages)]
        return ctx.result(messages, out, "mask", masked=sum(m is not o for m, o in
                                                             zip(out, messages, strict=True)))


async def test_a_strategy_list_without_mask_summarises_at_once() -> None:
    msgs = tool_run(10)
    llm = ScriptedLLM(handler=lambda m, t: "Pages read; HOTEL-0003 is the cheapest.")
    opts = CompactionOptions(strategies=[RollingSummary(), Truncate()])
    res = await compact_staged(msgs, llm, 4_000, opts, counter=HEURISTIC)
    assert res.method == "llm"
    assert res.masked == 0
    assert not any(m.metadata.get(MASKED_KEY) for m in res.messages)


async def test_partial_progress_is_handed_to_the_next_strategy_and_totals_add_up() -> None:
    msgs = tool_run(12)
    halve = _Halve()
    opts = CompactionOptions(strategies=[halve, Truncate()])
    res = await compact_staged(msgs, None, 1_500, opts, counter=HEURISTIC)
    assert halve.seen == [len(msgs)]
    assert res.method == "truncate"
    assert res.masked > 0
    assert res.tokens_after <= 1_500
    assert valid_pairs(res.messages)
    # the truncation started from the halved messages, not from the originals
    assert any(m.text == "[halved]" for m in res.messages)
    assert res.tokens_before == HEURISTIC.count_messages(msgs)
    assert res.messages_before == len(msgs)


async def test_a_pipeline_that_never_fits_still_ends_within_budget() -> None:
    msgs = tool_run(12)
    opts = CompactionOptions(strategies=[_Halve()])  # no truncation listed
    res = await compact_staged(msgs, None, 2_000, opts, counter=HEURISTIC)
    assert res.method == "truncate"
    assert res.tokens_after <= 2_000
    assert valid_pairs(res.messages)


async def test_a_truncation_never_replaces_a_fitting_mask_offered_earlier() -> None:
    """With a summariser that fails, a mask that fits but leaves the context near the
    budget (above mask_accept) is used rather than the summariser's truncation."""
    msgs = tool_run(10)

    def broken(m: list[ChatMessage], t: object) -> str:
        raise RuntimeError("summariser down")

    llm = ScriptedLLM(handler=broken)
    # only the 3 oldest outputs may be cleared: the mask fits, but above mask_accept
    opts = CompactionOptions(mask_fill=0.5, mask_accept=0.5, mask_keep_groups=7)
    fits = effective_budget(4_000, HEURISTIC)
    plan = plan_mask(msgs, fits, opts, HEURISTIC)
    assert fits * 0.5 < plan.tokens_after <= fits  # the scenario
    res = await compact_staged(msgs, llm, 4_000, opts, counter=HEURISTIC)
    assert res.method == "mask"
    assert res.reason
    assert len(res.messages) == len(msgs)  # nothing dropped


def test_strategies_must_be_compactors() -> None:
    with pytest.raises(ConfigError, match="strategies"):
        CompactionOptions(strategies=[object()])
    with pytest.raises(ConfigError, match="strategies"):
        CompactionOptions(strategies=[])
    opts = CompactionOptions(strategies=[Truncate()])
    assert opts.with_(keep_recent=2).strategies == opts.strategies
