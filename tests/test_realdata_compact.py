"""Layers 1–3 on real-shape data (fixtures: ``tests/realdata``), checked by o200k_base.

Each public entry point gets the conversations users actually have — an exported
OpenAI trajectory with parallel tool calls, images and huge tool outputs, a 150-step
SWE-agent run, a 30-session LoCoMo-style dialogue in several languages — and every result
is checked against the contract with exact counts: it fits the budget by the real
tokenizer, keeps order, the system prompt and pinned messages, opens with a user turn,
never splits a tool group, is a valid request, and leaves the input untouched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from ctxstack import (
    ChatMessage,
    CompactUtils,
    ContextGuard,
    HistoryArchive,
    SummaryMemory,
    ToolCall,
    WindowMemory,
)
from ctxstack.compaction._archive import ARCHIVE_REF_KEY
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import from_openai_messages, to_openai_messages
from ctxstack.messages._tool_turns import tool_turn_problems
from ctxstack.tokens import TiktokenCounter
from tests import realdata

pytest.importorskip("tiktoken")
O200K = TiktokenCounter("o200k_base")


def _with_query(messages: list[ChatMessage], text: str) -> list[ChatMessage]:
    return [*messages, ChatMessage.query(text)]


def _fixtures() -> dict[str, list[ChatMessage]]:
    openai = from_openai_messages(realdata.openai_export())
    return {
        "openai": _with_query(openai[:-1], openai[-1].text),
        "swe": _with_query(from_openai_messages(realdata.swe_trajectory(150)),
                           "Summarise what you changed and why."),
        "locomo": _with_query(from_openai_messages(realdata.multi_session_dialogue(30))[:-1],
                              "What was the adoption agency case number?"),
    }


FIXTURES = _fixtures()


def check_window(out: Sequence[ChatMessage], given: Sequence[ChatMessage], budget: int | None
                 ) -> None:
    """Every invariant of a compacted window, exactly (see the module doc)."""
    if budget is not None:
        assert O200K.count_messages(out) <= budget
    assert tool_turn_problems(out) == []
    wire = to_openai_messages(out)
    json.dumps(wire, ensure_ascii=False).encode("utf-8")  # sendable as a request body
    assert to_openai_messages(from_openai_messages(wire)) == wire
    prompt = 0
    while prompt < len(given) and given[prompt].role == "system":
        prompt += 1
    assert list(out[:prompt]) == list(given[:prompt]), "system prompt lost"
    position = {id(m): i for i, m in enumerate(given)}
    seen = [position[id(m)] for m in out if id(m) in position]
    assert seen == sorted(seen), "order changed"
    for m in given:
        if m.pinned:
            assert any(o is m for o in out), f"pinned message lost: {m.text[:40]!r}"
    rest = [m for m in out[prompt:] if m.role != "system"]
    assert rest, "no history turn left"
    assert rest[0].role == "user" or rest[0].pinned, "history opens mid-turn"


def _snapshot(messages: Sequence[ChatMessage]) -> list[dict[str, object]]:
    return [m.model_dump() for m in messages]


BUDGETS = [4_000, 12_000, 30_000]


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_smart_truncate_fits_by_o200k_and_keeps_the_contract(name: str, budget: int) -> None:
    given = FIXTURES[name]
    before = _snapshot(given)
    out = CompactUtils.smart_truncate(given, budget)
    check_window(out, given, budget)
    assert _snapshot(given) == before
    assert out[-1] is given[-1]  # the pinned query


@pytest.mark.parametrize("budget", [600, 2_000])
def test_smart_truncate_on_a_broken_log_returns_a_valid_request(budget: int) -> None:
    given = from_openai_messages(realdata.broken_export())
    out = CompactUtils.smart_truncate(given, budget)
    assert tool_turn_problems(out) == []
    assert O200K.count_messages(out) <= budget
    assert out[0].role == "system"
    assert out[-1].text == "thanks"


async def _summariser(text: str = "要約: 作業は進行中。Kenji asked about Kyoto; tests fail on NAXIS1."
                      ) -> ScriptedLLM:
    return ScriptedLLM(handler=lambda messages, tools: text)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("name", sorted(FIXTURES))
async def test_llm_compact_summarises_and_keeps_the_contract(name: str, budget: int) -> None:
    given = FIXTURES[name]
    before = _snapshot(given)
    llm = await _summariser()
    out = await CompactUtils.llm_compact(given, llm, budget)
    check_window(out, given, budget)
    assert _snapshot(given) == before
    summaries = [m for m in out if m.kind == "summary"]
    assert len(summaries) <= 1
    if summaries:
        assert summaries[0].text.startswith("[Conversation summary]")
        assert "NAXIS1" in summaries[0].text


@pytest.mark.parametrize("failure", [RuntimeError("503 upstream"), "", "   "])
@pytest.mark.parametrize("name", sorted(FIXTURES))
async def test_llm_compact_falls_back_to_truncation_when_the_summariser_fails(
    name: str, failure: object
) -> None:
    given = FIXTURES[name]
    llm = ScriptedLLM(handler=lambda messages, tools: failure)  # type: ignore[arg-type,return-value]
    out = await CompactUtils.llm_compact(given, llm, 8_000)
    check_window(out, given, 8_000)
    assert not any(m.kind == "summary" for m in out)


@pytest.mark.parametrize("with_llm", [False, True])
@pytest.mark.parametrize("name", sorted(FIXTURES))
async def test_guard_fits_real_conversations(name: str, with_llm: bool) -> None:
    given = FIXTURES[name]
    before = _snapshot(given)
    llm = await _summariser() if with_llm else None
    guard = ContextGuard(compact_llm=llm, archive=HistoryArchive())
    out = await guard.check_and_compact(given, 12_000, hint="react_iteration")
    check_window(out, given, 12_000)
    assert _snapshot(given) == before
    assert len(guard.archive or ()) > 0


async def test_guard_keeps_a_growing_swe_run_in_budget_every_iteration() -> None:
    """As an agent loop does: the guard's output plus the next step, 150 times."""
    steps = from_openai_messages(realdata.swe_trajectory(150))
    guard = ContextGuard(compact_llm=await _summariser(), archive=HistoryArchive())
    window = steps[:2]
    for i in range(2, len(steps) - 1, 2):
        window = await guard.check_and_compact([*window, *steps[i : i + 2]], 16_000)
        assert O200K.count_messages(window) <= 16_000
        assert tool_turn_problems(window) == []
        assert window[0] is steps[0]
    assert guard.totals.compactions > 0


async def test_archive_finds_dropped_cjk_and_ids_after_compaction() -> None:
    given = FIXTURES["locomo"]
    archive = HistoryArchive()
    out = await ContextGuard(archive=archive).check_and_compact(given, 4_000)
    kept = {m.text for m in out}
    for query, needle in [("予約番号", "予約番号"), ("物流状态", "ORD-99812-XK"),
                          ("분기 실적", "12.5%"), ("AD-4100", "AD-4100")]:
        hits = await archive.search(query, k=3)
        assert hits, query
        assert needle in hits[0].message.text, (query, hits[0].snippet)
        assert hits[0].message.text not in kept or needle in hits[0].message.text


@pytest.mark.parametrize("max_messages", [3, 10, 40])
@pytest.mark.parametrize("name", [*sorted(FIXTURES), "broken"])
async def test_window_memory_is_always_a_valid_request(name: str, max_messages: int) -> None:
    given = (FIXTURES[name] if name != "broken"
             else from_openai_messages(realdata.broken_export()))
    memory = WindowMemory(max_messages)
    for m in given:
        await memory.add_message(m)
    out = await memory.get_messages()
    assert tool_turn_problems(out) == []
    rest = [m for m in out if m.role != "system"]
    assert rest[0].role == "user"
    assert out[-1].text == given[-1].text


@pytest.mark.parametrize("name", [*sorted(FIXTURES), "broken"])
async def test_summary_memory_is_always_a_valid_request(name: str) -> None:
    given = (FIXTURES[name] if name != "broken"
             else from_openai_messages(realdata.broken_export()))
    memory = SummaryMemory(await _summariser(), threshold=12, keep_recent=4)
    for m in given:
        await memory.add_message(m)
    out = await memory.get_messages()
    assert tool_turn_problems(out) == []
    assert sum(m.kind == "summary" for m in out) == 1
    assert out[-1].text == given[-1].text


@pytest.mark.parametrize("failure", [RuntimeError("down"), "", " \n "])
async def test_summary_memory_survives_a_failing_summariser(failure: object) -> None:
    given = FIXTURES["swe"]
    memory = SummaryMemory(ScriptedLLM(handler=lambda m, t: failure),  # type: ignore[arg-type,return-value]
                           threshold=20, keep_recent=4, budget=8_000)
    for m in given:
        await memory.add_message(m)
    out = await memory.get_messages()
    assert tool_turn_problems(out) == []
    assert O200K.count_messages(out) <= 8_000
    assert memory.last_reason


async def test_guard_never_passes_an_invalid_request() -> None:
    given = from_openai_messages(realdata.broken_export())
    out = await ContextGuard().check_and_compact(given, 64_000)
    assert tool_turn_problems(out) == []


async def test_llm_compact_never_returns_an_invalid_request() -> None:
    given = from_openai_messages(realdata.broken_export())
    out = await CompactUtils.llm_compact(given, await _summariser(), 64_000)
    assert tool_turn_problems(out) == []


async def test_guard_cuts_a_400k_character_shell_log_head_and_tail() -> None:
    log = realdata.shell_log(6000)
    given = [ChatMessage.system("s"), ChatMessage.user("run the tests"),
             ChatMessage.assistant(None, tool_calls=[ToolCall(id="a", name="bash")]),
             ChatMessage.tool("a", log), ChatMessage.query("what failed?")]
    out = await ContextGuard().check_and_compact(given, 64_000)
    check_window(out, given, 64_000)
    cut = out[3]
    assert cut.tool_call_id == "a"
    assert len(cut.text) <= 50_000
    assert "Truncated" in cut.text
    assert cut.text.startswith(log[:200])
    assert "1 failed, 1841 passed" in cut.text  # the tail: the verdict survives


async def test_guard_archives_what_the_oversize_cut_removes() -> None:
    log = realdata.shell_log(6000)
    given = [ChatMessage.system("s"), ChatMessage.user("run the tests"),
             ChatMessage.assistant(None, tool_calls=[ToolCall(id="a", name="bash")]),
             ChatMessage.tool("a", log), ChatMessage.query("what failed?")]
    archive = HistoryArchive()
    await ContextGuard(archive=archive).check_and_compact(given, 64_000)
    hits = await archive.search("test_case_3000", k=1)
    assert hits
    assert hits[0].message.text == log


async def test_the_oversize_cut_archives_each_original_once_and_tags_the_copy() -> None:
    log = realdata.shell_log(6000)
    given = [ChatMessage.system("s"), ChatMessage.user("run the tests"),
             ChatMessage.assistant(None, tool_calls=[ToolCall(id="a", name="bash")]),
             ChatMessage.tool("a", log), ChatMessage.query("what failed?")]
    archive = HistoryArchive()
    guard = ContextGuard(archive=archive)
    first = await guard.check_and_compact(given, 64_000)
    again = await guard.check_and_compact(list(given), 64_000)  # the caller kept the original
    assert len(archive) == 1
    ref = first[3].metadata[ARCHIVE_REF_KEY]
    assert again[3].metadata[ARCHIVE_REF_KEY] == ref
    archived = await archive.get(ref)
    assert archived is not None
    assert archived.text == log
    assert first[3].text == again[3].text
    check_window(first, given, 64_000)


async def test_guard_repairs_a_broken_log_only_where_it_is_broken() -> None:
    good = [ChatMessage.system("s"), ChatMessage.user("go"),
            ChatMessage.assistant(None, tool_calls=[ToolCall(id="a", name="ls")]),
            ChatMessage.tool("a", "x.py")]
    guard = ContextGuard()
    assert (await guard.check_and_compact(good, 64_000)) is good
    grown = [*good, ChatMessage.tool("zz", "orphan"), ChatMessage.query("and now?")]
    out = await guard.check_and_compact(grown, 64_000)
    assert [m.tool_call_id for m in out if m.role == "tool"] == ["a"]
    assert all(a is b for a, b in zip(out[:4], good, strict=True))
    assert tool_turn_problems(out) == []


async def test_mask_placeholder_names_the_call_it_answers_when_ids_repeat_per_turn() -> None:
    given = [ChatMessage.system("s"), ChatMessage.user("investigate")]
    for i in range(10):
        given.append(ChatMessage.assistant(None, tool_calls=[
            ToolCall(id="call_0", name=f"tool_{i}", arguments={"step": i})]))
        given.append(ChatMessage.tool("call_0", realdata.shell_log(60)))
    given.append(ChatMessage.query("what now?"))
    check = await ContextGuard().check(given, 12_000)
    assert check.event is not None
    assert check.event.method == "mask"
    check_window(check.messages, given, 12_000)
    for i, m in enumerate(check.messages):
        if m.role == "tool" and "cleared" in m.text:
            call = check.messages[i - 1].tool_calls
            assert call is not None
            assert f"{call[0].name}(" in m.text


@pytest.mark.parametrize("steps", [50, 300])
async def test_swe_runs_of_50_and_300_steps_compact_within_budget(steps: int) -> None:
    given = _with_query(from_openai_messages(realdata.swe_trajectory(steps)), "Status?")
    out = CompactUtils.smart_truncate(given, 32_000)
    check_window(out, given, 32_000)
    out = await CompactUtils.llm_compact(given, await _summariser(), 32_000)
    check_window(out, given, 32_000)
    assert sum(m.kind == "summary" for m in out) == 1
