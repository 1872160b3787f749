"""CompactUtils: estimation, smart_truncate, cutting and LLM compaction, rule by rule."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from ctxstack.compaction import (
    FACTS_HEADING,
    SUMMARY_PREFIX,
    CompactionResult,
    CompactUtils,
    cut_message,
    cut_text,
    cut_text_tokens,
)
from ctxstack.compaction import _summarize as summarize_module
from ctxstack.compaction._facts import extract_facts
from ctxstack.compaction._llm_compact import MAX_FACTS_SHARE
from ctxstack.compaction._prompts import compaction_prompt
from ctxstack.errors import ConfigError, InputError, LLMError, RateLimitError
from ctxstack.llm import LLMResult, ScriptedLLM, Usage
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import HEURISTIC, SEED_HEURISTIC, BaseCounter, HeuristicCounter
from ctxstack.tokens._counter import effective_budget
from tests.conversations import budget_for

SYS = ChatMessage.system("You are a careful assistant.")


def tok(msgs: Sequence[ChatMessage]) -> int:
    return HEURISTIC.count_messages(msgs)


def user(text: str, **kw: object) -> ChatMessage:
    return ChatMessage.user(text, **kw)  # type: ignore[arg-type]


def answer(text: str) -> ChatMessage:
    return ChatMessage.assistant(text)


def group(call_id: str, result: str, *, name: str = "search", n: int = 1) -> list[ChatMessage]:
    """An assistant tool call (``n`` parallel calls) and its results."""
    calls = [ToolCall(id=f"{call_id}_{i}", name=name, arguments={"q": call_id}) for i in range(n)]
    return [ChatMessage.assistant(None, tool_calls=calls)] + [
        ChatMessage.tool(c.id, result) for c in calls
    ]


def chat(turns: int, words: int = 30) -> list[ChatMessage]:
    """System prompt + ``turns`` user/assistant pairs, each message ~``words`` tokens."""
    out = [SYS]
    for i in range(turns):
        out.append(user(f"question {i} " + "word " * words))
        out.append(answer(f"answer {i} " + "text " * words))
    return out


def summary_msg(text: str) -> ChatMessage:
    return ChatMessage.system(f"{SUMMARY_PREFIX}\n{text}", metadata={"kind": "summary"})


def index_of(out: Sequence[ChatMessage], msgs: Sequence[ChatMessage]) -> list[int]:
    """Positions in ``msgs`` of the (identical) messages of ``out``."""
    return [next(i for i, m in enumerate(msgs) if m is o) for o in out]


# ====================================================================== estimation
def test_estimates_delegate_to_the_token_module() -> None:
    for text in ("a" * 400, "中" * 100, "Hello你好World世界"):
        assert CompactUtils.estimate_tokens(text) == HEURISTIC.count_text(text)
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AA"))
    assert CompactUtils.estimate_tokens([TextPart(text="a" * 40), img]) == (
        HEURISTIC.count_text("a" * 40) + 765)
    msgs = [ChatMessage.system("a" * 40), ChatMessage.user("中" * 3)]
    assert CompactUtils.estimate_messages_tokens(msgs) == 8 + sum(
        HEURISTIC.count_text(m.text) for m in msgs)
    assert CompactUtils.estimate_messages_tokens(msgs, SEED_HEURISTIC) == 20  # the seed's


def test_estimate_tokens_accepts_openai_dict_parts_and_refuses_other_shapes() -> None:
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AA"))
    as_objects = CompactUtils.estimate_tokens([TextPart(text="a" * 40), img])
    as_dicts = CompactUtils.estimate_tokens([
        {"type": "text", "text": "a" * 40},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
    ])
    assert as_dicts == as_objects == CompactUtils.estimate_tokens("a" * 40) + 765
    mixed = [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}, TextPart(text="hi")]
    assert CompactUtils.estimate_tokens(mixed) == 765 + CompactUtils.estimate_tokens("hi")
    for bad, match in [
        (42, "got int"),
        (b"bytes", "got bytes"),
        ([{"type": "audio", "data": "x"}], "not a list of content parts"),
        ([{"type": "text"}], "not a list of content parts"),
        (["plain string part"], "not a list of content parts"),
    ]:
        with pytest.raises(InputError, match=match):
            CompactUtils.estimate_tokens(bad)  # type: ignore[arg-type]


def test_estimate_messages_accepts_a_counter() -> None:
    class Double(HeuristicCounter):
        @property
        def cache_key(self) -> str:
            return "double"

        def count_text(self, text: str) -> int:
            return 2 * super().count_text(text)

    msgs = [ChatMessage.user("a" * 40)]
    assert CompactUtils.estimate_messages_tokens(msgs, Double()) == (
        4 + 2 * HEURISTIC.count_text("a" * 40))


def test_compact_utils_is_a_namespace() -> None:
    with pytest.raises(TypeError, match="do not instantiate"):
        CompactUtils()


# ====================================================================== cutting
def test_cut_text_keeps_both_ends_and_says_how_much_was_removed() -> None:
    text = "HEAD" + "x" * 1000 + "TAIL"
    out = cut_text(text, 100)
    assert len(out) <= 100
    assert out.startswith("HEAD")
    assert out.endswith("TAIL")
    removed = len(text) - (len(out) - len(out[out.index("\n[") : out.index("]\n") + 2]))
    assert f"{removed:,} characters removed" in out
    assert cut_text("short", 100) == "short"


def test_cut_text_tokens_fits_the_counter() -> None:
    text = "東京" * 500 + " end of story"
    out = cut_text_tokens(text, 50, HEURISTIC)
    assert HEURISTIC.count_text(out) <= 50
    assert out.startswith("東京")
    assert out.endswith("story")
    assert cut_text_tokens(text, 1, HEURISTIC) == ""


def test_cut_message_never_touches_tool_call_arguments() -> None:
    call = ToolCall(id="c1", name="write", arguments={"path": "/tmp/a.txt", "body": "y" * 400})
    msg = ChatMessage.assistant("thinking " * 200, tool_calls=[call])
    out = cut_message(msg, 200, HEURISTIC)
    assert out is not None
    assert out.tool_calls == [call]
    assert HEURISTIC.count_message(out) <= 200
    assert out.metadata["truncated_chars"] > 0
    # the calls alone cost more than 50 tokens: no valid cut exists
    assert cut_message(msg, 50, HEURISTIC) is None


def test_cut_message_drops_images_only_when_they_do_not_fit() -> None:
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AA"))
    msg = ChatMessage.user([TextPart(text="look " * 400), img])
    with_image = cut_message(msg, 900, HEURISTIC)
    assert with_image is not None
    assert with_image.images == [img]
    without = cut_message(msg, 300, HEURISTIC)
    assert without is not None
    assert without.images == []
    assert "1 image(s) omitted" in without.text
    assert HEURISTIC.count_message(without) <= 300


# ====================================================================== smart_truncate
def test_within_budget_returns_an_equal_new_list() -> None:
    msgs = chat(3)
    out = CompactUtils.smart_truncate(msgs, 10_000)
    assert out == msgs
    assert out is not msgs


def test_keeps_system_prompt_and_a_contiguous_recent_suffix() -> None:
    msgs = chat(20)
    out = CompactUtils.smart_truncate(msgs, 400)
    assert tok(out) <= 400
    assert out[0] is SYS
    idx = index_of(out[1:], msgs)
    assert idx == list(range(idx[0], len(msgs))), "not a contiguous suffix"
    assert out[1].role == "user"
    # greedy: the next older turn would not have fitted
    assert tok([*out, msgs[idx[0] - 1]]) > 400 or msgs[idx[0] - 1].role != "user"


def test_pinned_messages_stay_where_they_were() -> None:
    msgs = chat(20)
    pinned = user("the original task: migrate ORD-1 to v2", pinned=True)
    msgs.insert(3, pinned)
    query = user("current question", pinned=True, metadata={"kind": "query"})
    msgs.append(query)
    out = CompactUtils.smart_truncate(msgs, 500)
    assert tok(out) <= 500
    assert out[0] is SYS
    assert out[1] is pinned, "old pinned message must keep its place right after the prompt"
    assert out[-1] is query
    idx = index_of(out, msgs)
    assert idx == sorted(idx)


def test_a_tool_group_is_never_split_the_turn_that_does_not_fit_is_filled() -> None:
    old = [user("old " * 50), answer("old " * 50)]
    big = group("g1", "row " * 200, n=3)
    msgs = [SYS, *old, user("find it " * 20), *big, answer("found " * 20),
            user("thanks, and the next? " * 5), answer("sure " * 10)]
    # enough for the newest turn and part of the group, not all of it: the group's turn
    # is kept with its outputs cut head+tail, the oldest first, every call with its result
    budget = budget_for(tok([SYS, *msgs[-3:]]) + tok(big[:2]))
    out = CompactUtils.smart_truncate(msgs, budget)
    assert tok(out) <= effective_budget(budget, HEURISTIC)
    assert out[0] is SYS
    assert out[1] is msgs[3]  # the turn's opener, whole
    assert [m.tool_call_id for m in out if m.role == "tool"] == ["g1_0", "g1_1", "g1_2"]
    assert all(a is b for a, b in zip(out[-3:], msgs[-3:], strict=True))  # verbatim
    cut = [m for m in out if m.metadata.get("truncated_chars")]
    assert cut
    assert all(m.role == "tool" for m in cut)
    assert cut[0].tool_call_id == "g1_0"  # the oldest output gives way first
    # the plain walk (fill=0) stops at the group and drops its turn, as before issue 29
    assert CompactUtils.smart_truncate(msgs, budget, fill=0) == [SYS, *msgs[-2:]]
    # enough for everything but the old turn: the group is kept whole, untouched
    out = CompactUtils.smart_truncate(msgs, budget_for(tok(msgs) - tok(old)))
    assert out == [SYS, *msgs[3:]]
    assert all(a is b for a, b in zip(out[2:6], big, strict=True))


def test_leading_orphan_assistant_turn_is_dropped() -> None:
    msgs = [SYS, user("q1 " * 50), answer("a1 " * 50), answer("a1 continued " * 5),
            user("q2 " * 5), answer("a2 " * 5)]
    budget = tok([SYS, *msgs[3:]])  # fits from the orphan continuation onwards
    out = CompactUtils.smart_truncate(msgs, budget)
    assert out == [SYS, msgs[4], msgs[5]]


def test_newest_oversized_message_is_cut_head_and_tail() -> None:
    long = "BEGIN " + "filler " * 3000 + " END"
    msgs = [SYS, user("old " * 10), answer("ok"), user(long)]
    out = CompactUtils.smart_truncate(msgs, 300)
    assert tok(out) <= 300
    assert out[0] is SYS
    assert len(out) == 2
    cut = out[1]
    assert cut.role == "user"
    assert cut.text.startswith("BEGIN")
    assert cut.text.endswith("END")
    assert "characters removed" in cut.text
    assert cut.metadata["truncated_chars"] > 10_000
    assert msgs[3].text == long, "input message must not change"


def test_newest_oversized_tool_group_is_cut_not_split() -> None:
    msgs = [SYS, user("read the logs"), *group("g", "LOGSTART " + "line " * 4000 + " LOGEND", n=2)]
    out = CompactUtils.smart_truncate(msgs, 400)
    assert tok(out) <= 400
    assert [m.role for m in out] == ["system", "user", "assistant", "tool", "tool"]
    assert out[2].tool_calls == msgs[2].tool_calls
    for m in out[3:]:
        assert m.text.startswith("LOGSTART")
        assert m.text.endswith("LOGEND")


def test_long_tool_loop_keeps_its_user_message_as_anchor() -> None:
    task = user("TASK: audit every file under /srv")
    msgs = [SYS, user("hello"), answer("hi"), task]
    for i in range(30):
        msgs += group(f"c{i}", f"result {i} " + "data " * 60)
    budget = 1000
    out = CompactUtils.smart_truncate(msgs, budget)
    assert tok(out) <= budget
    assert out[1] is task, "the loop's user message anchors the kept groups"
    assert out[-1] is msgs[-1]
    assert all(m.role in ("assistant", "tool") for m in out[2:])
    assert len(out) > 4


def test_summary_is_history_but_kept_before_older_messages() -> None:
    summary = summary_msg("Earlier the user set budget=500 and chose Tokyo.")
    msgs = [SYS, summary, *chat(20)[1:]]
    out = CompactUtils.smart_truncate(msgs, 400)
    assert tok(out) <= 400
    assert out[1] is summary
    assert out[2].role == "user"
    # too small for the summary: it is dropped like history, the prompt is not
    tiny = budget_for(tok([SYS, msgs[-2], msgs[-1]]) + 2)
    out = CompactUtils.smart_truncate(msgs, tiny)
    assert out == [SYS, msgs[-2], msgs[-1]]


def test_summary_survives_when_the_newest_group_must_be_cut() -> None:
    summary = summary_msg("Budget is 500; user prefers CSV.")
    query = user("analyse the export", pinned=True, metadata={"kind": "query"})
    msgs = [SYS, summary, query, *group("g", "ROW " * 5000)]
    out = CompactUtils.smart_truncate(msgs, 500)
    assert tok(out) <= 500
    assert out[:3] == [SYS, summary, query]
    assert [m.role for m in out[3:]] == ["assistant", "tool"]
    assert "characters removed" in out[-1].text
    # when the summary would leave the cut no useful room, the newest group wins
    tight = budget_for(tok([SYS, summary, query]) + 10)
    out = CompactUtils.smart_truncate(msgs, tight)
    assert summary not in out
    assert out[-1].role == "tool"


def test_fixed_part_over_budget_returns_just_the_fixed_part() -> None:
    big_pin = user("pinned " * 400, pinned=True)
    msgs = [SYS, *chat(5)[1:], big_pin]
    out = CompactUtils.smart_truncate(msgs, 100)
    assert out == [SYS, big_pin]


def test_custom_counter_is_honoured() -> None:
    class Characters(BaseCounter):
        """A character a token: four times what the default counter says of English."""

        margin = 0.0  # a custom counter states its own margin

        @property
        def cache_key(self) -> str:
            return "characters"

        def count_text(self, text: str) -> int:
            return len(text)

    counter = Characters()
    msgs = chat(30, words=10)
    out = CompactUtils.smart_truncate(msgs, 600, counter=counter)
    assert counter.count_messages(out) <= 600  # the whole budget: its margin is 0
    default = CompactUtils.smart_truncate(msgs, 600)
    assert len(out) < len(default), "the custom counter was used"
    assert counter.count_messages(default) > 600


@pytest.mark.parametrize("bad", [0, -5, 1.5, "100", True])
def test_invalid_budget_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        CompactUtils.smart_truncate(chat(2), bad)  # type: ignore[arg-type]


# ====================================================================== llm_compact
def scripted(*replies: object, **kw: object) -> ScriptedLLM:
    return ScriptedLLM(list(replies), **kw)  # type: ignore[arg-type]


async def test_within_budget_is_returned_unchanged_without_a_call() -> None:
    msgs = chat(3)
    llm = scripted("unused")
    res = await CompactUtils.compact_detailed(msgs, llm, 10_000)
    assert res.method == "none"
    assert res.messages == msgs
    assert not llm.calls
    assert res.tokens_before == res.tokens_after == tok(msgs)
    assert not res.compacted


async def test_summary_replaces_the_oldest_messages() -> None:
    msgs = chat(20)
    query = user("what now?", pinned=True, metadata={"kind": "query"})
    msgs.append(query)
    llm = scripted("The user asked twenty questions about words.")
    res = await CompactUtils.compact_detailed(msgs, llm, 1000, keep_recent=4)
    out = res.messages
    assert res.method == "llm"
    assert res.reason is None
    assert out[0] is SYS
    summary = out[1]
    assert summary is res.summary
    assert summary.role == "system"
    assert summary.kind == "summary"
    assert summary.text.startswith(f"{SUMMARY_PREFIX}\nThe user asked twenty questions")
    assert out[-1] is query
    kept = out[2:-1]
    assert len(kept) >= 4
    assert kept[0].role == "user"
    idx = index_of(kept, msgs)
    assert idx == list(range(idx[0], idx[0] + len(kept)))
    assert list(res.summarized) == msgs[1 : idx[0]]
    assert tok(out) <= 1000
    assert res.tokens_after == tok(out)
    assert res.messages_before == len(msgs)
    assert res.messages_after == len(out)
    assert res.usage == llm.total_usage
    assert res.usage.calls == 1


async def test_llm_compact_returns_the_detailed_messages() -> None:
    msgs = chat(20)
    a = await CompactUtils.llm_compact(msgs, scripted("S."), 1000)
    b = await CompactUtils.compact_detailed(msgs, scripted("S."), 1000)
    assert [m.model_dump() for m in a] == [m.model_dump() for m in b.messages]


async def test_summariser_sees_prompt_and_transcript() -> None:
    msgs = [SYS, user("look up ORD-7"), *group("c1", "status: shipped", name="orders"),
            answer("It shipped."), *chat(15)[1:]]
    llm = scripted("Summary.")
    await CompactUtils.compact_detailed(msgs, llm, 900, hint="planner_input")
    (call,) = llm.calls
    system, request = call.messages
    assert system.text == compaction_prompt("planner_input")
    assert "[user] look up ORD-7" in request.text
    assert '[assistant -> tool call] orders({"q":"c1"})' in request.text
    assert "[tool result: orders] status: shipped" in request.text
    assert "[assistant] It shipped." in request.text
    assert "Previous summary" not in request.text
    # a share of the room for history: the usable budget (the counter's margin kept
    # free) less the system prompt
    room = effective_budget(900, HEURISTIC) - HEURISTIC.count_messages([SYS])
    assert call.opts["max_tokens"] == int(room * 0.15)


async def test_custom_prompt_replaces_the_hint_prompt() -> None:
    llm = scripted("Summary.")
    await CompactUtils.compact_detailed(chat(20), llm, 900, prompt="Only keep numbers.")
    assert llm.calls[0].messages[0].text == compaction_prompt("general", custom="Only keep numbers.")


async def test_rolling_summary_is_folded_not_piled_up() -> None:
    old = summary_msg("The user lives in Osaka and budget is 300.")
    msgs = [SYS, old, *chat(20)[1:]]
    llm = scripted("User in Osaka, budget 300, asked many questions.")
    res = await CompactUtils.compact_detailed(msgs, llm, 1000)
    assert res.method == "llm"
    request = llm.calls[0].messages[1].text
    assert "Previous summary" in request
    assert "The user lives in Osaka and budget is 300." in request
    summaries = [m for m in res.messages if m.kind == "summary"]
    assert summaries == [res.summary]
    assert old not in res.messages
    assert res.previous_summary == "The user lives in Osaka and budget is 300."
    assert res.summarized[0] is old
    # and again: the new summary becomes the previous one
    llm2 = scripted("Second summary.")
    more = [*res.messages, *chat(20)[1:]]
    res2 = await CompactUtils.compact_detailed(more, llm2, 1000)
    assert [m for m in res2.messages if m.kind == "summary"] == [res2.summary]
    assert "User in Osaka, budget 300" in llm2.calls[0].messages[1].text


async def test_finalize_summary_hook_gets_previous_and_new(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str | None, str]] = []

    def fake(hint: str, previous: str | None, new: str) -> str:
        seen.append((hint, previous, new))
        return f"MERGED {new}"

    monkeypatch.setattr(summarize_module, "finalize_summary", fake)
    msgs = [SYS, summary_msg("prev"), *chat(20)[1:]]
    res = await CompactUtils.compact_detailed(msgs, scripted("new"), 1000, hint="react_iteration")
    assert seen == [("react_iteration", "prev", "new")]
    assert res.summary is not None
    assert res.summary.text.startswith(f"{SUMMARY_PREFIX}\nMERGED new")


async def test_facts_missing_from_the_summary_are_reattached() -> None:
    msgs = [
        SYS,
        user("My order ORD-88412 was charged $1,234.56 on 2024-03-15; invoice at /srv/inv/88412.pdf"),
        answer("I see a refund of 300円 scheduled, see https://shop.example.com/r/88412"),
        *chat(20)[1:],
    ]
    llm = scripted("The user disputes order ORD-88412.")
    res = await CompactUtils.compact_detailed(msgs, llm, 1500)
    assert res.summary is not None
    text = res.summary.text
    assert FACTS_HEADING in text
    facts = text.split(FACTS_HEADING, 1)[1]
    for value in ["$1,234.56", "2024-03-15", "/srv/inv/88412.pdf", "300円",
                  "https://shop.example.com/r/88412"]:
        assert f"- {value}" in facts, value
    assert "- ORD-88412" not in facts, "already in the summary: not repeated"
    lines = facts.strip().splitlines()
    assert len(lines) == len(set(lines)), "facts are deduplicated"


async def test_facts_list_is_bounded_and_prefers_user_facts() -> None:
    noisy = " ".join(f"ID-{i:05d}" for i in range(3000))
    msgs = [SYS, user("Please keep account ACC-777 in mind"), *group("c", noisy),
            *chat(20)[1:]]
    res = await CompactUtils.compact_detailed(msgs, scripted("Summary."), 2000)
    assert res.summary is not None
    facts = res.summary.text.split(FACTS_HEADING, 1)[1]
    assert "- ACC-777" in facts
    assert facts.strip().splitlines()[0] == "- ACC-777", "the user's fact comes first"
    # The list fills the room the budget leaves, never more than MAX_FACTS_SHARE of it.
    assert HEURISTIC.count_text(FACTS_HEADING + facts) <= int(2000 * MAX_FACTS_SHARE) + 2
    assert res.tokens_after <= 2000


async def test_target_fill_keeps_more_than_keep_recent_when_there_is_room() -> None:
    msgs = chat(80, words=10)
    res = await CompactUtils.compact_detailed(msgs, scripted("S."), 2000, keep_recent=2)
    assert res.method == "llm"
    verbatim = [m for m in res.messages if m.role != "system"]
    assert len(verbatim) > 2
    assert res.tokens_after <= int(2000 * 0.6), "stays under the low watermark"
    # one more message does not trigger another compaction
    assert tok([*res.messages, user("next " * 10)]) <= 2000
    low = await CompactUtils.compact_detailed(
        msgs, scripted("S."), 2000, keep_recent=2, target_fill=0.3
    )
    assert len([m for m in low.messages if m.role != "system"]) < len(verbatim)


async def test_keep_recent_is_a_floor_widened_to_whole_groups() -> None:
    msgs = [*chat(10), user("run the tool"), *group("g", "result " * 30, n=3)]
    res = await CompactUtils.compact_detailed(
        msgs, scripted("S."), 700, keep_recent=2, target_fill=0.01
    )
    kept = [m for m in res.messages if m.role != "system"]
    assert kept == msgs[-5:], "the floor (2) reaches into the group, so the whole group stays"
    assert kept[0].role == "user"


async def test_kept_part_never_opens_with_an_assistant_or_tool_turn() -> None:
    msgs = [SYS]
    for i in range(10):
        msgs += [user(f"q{i} " * 30), *group(f"g{i}", "r " * 60), answer(f"a{i} " * 30)]
    for keep in range(1, 8):
        res = await CompactUtils.compact_detailed(
            msgs, scripted("S."), 900, keep_recent=keep, target_fill=0.01
        )
        first = next(m for m in res.messages if m.role != "system")
        assert first.role == "user", keep


async def test_tool_loop_without_pinned_query_keeps_its_user_message() -> None:
    task = user("TASK: audit /srv")
    msgs = [SYS, *chat(5)[1:], task]
    for i in range(30):
        msgs += group(f"c{i}", "data " * 60)
    res = await CompactUtils.compact_detailed(msgs, scripted("S."), 2000)
    assert res.method == "llm"
    out = res.messages
    assert out[2] is task
    assert task not in res.summarized
    assert out[-1] is msgs[-1]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (RateLimitError("slow down"), "llm_error: RateLimitError: slow down"),
        (LLMError("boom"), "llm_error: LLMError: boom"),
        (RuntimeError("bug in provider"), "llm_error: RuntimeError: bug in provider"),
        ("", "empty_summary"),
        ("   \n ", "empty_summary"),
        ("<think>I should summarise this carefully</think>", "empty_summary"),
        ("<analysis>unterminated scratchpad", "empty_summary"),
    ],
)
async def test_summariser_failures_fall_back_to_truncation(
    reply: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    msgs = chat(20)
    llm = scripted(reply)
    with caplog.at_level(logging.WARNING, logger="ctxstack.compaction"):
        res = await CompactUtils.compact_detailed(msgs, llm, 500)
    assert res.method == "truncate"
    assert res.reason == reason
    assert res.messages == CompactUtils.smart_truncate(msgs, 500)
    assert res.summary is None
    assert res.summarized == ()
    assert any(reason in r.getMessage() for r in caplog.records)
    if isinstance(reply, str):
        assert res.usage.calls == 1, "the failed call still cost tokens"


async def test_timeout_falls_back_to_truncation() -> None:
    llm = scripted("too late", delay=5.0)
    res = await CompactUtils.compact_detailed(chat(20), llm, 500, timeout=0.05)
    assert res.method == "truncate"
    assert res.reason == "timeout"
    assert tok(res.messages) <= 500


async def test_no_llm_and_nothing_to_summarize_truncate() -> None:
    res = await CompactUtils.compact_detailed(chat(20), None, 500)
    assert (res.method, res.reason) == ("truncate", "no_llm")
    few = [SYS, user("x " * 400), answer("y " * 400)]
    llm = scripted("unused")
    res = await CompactUtils.compact_detailed(few, llm, 300)
    assert (res.method, res.reason) == ("truncate", "nothing_to_summarize")
    assert not llm.calls
    assert tok(res.messages) <= 300


async def test_cancellation_is_not_swallowed() -> None:
    llm = scripted("late", delay=5.0)
    task = asyncio.ensure_future(CompactUtils.compact_detailed(chat(20), llm, 500))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_summariser_input_is_bounded() -> None:
    huge = "LOG " * 200_000  # ~200K tokens of tool output
    msgs = [SYS, user("analyse"), *group("g", huge), answer("done"), *chat(10)[1:]]
    llm = scripted("Summary.", context_size=8_000, max_output_tokens=2_000)
    res = await CompactUtils.compact_detailed(msgs, llm, 1000)
    assert res.method == "llm"
    sent = llm.calls[0].messages
    assert tok(sent) <= 6_000
    assert "characters removed" in sent[1].text


async def test_summariser_input_default_cap_when_sizes_are_unknown() -> None:
    class Opaque(ScriptedLLM):
        context_size = 0  # type: ignore[assignment]

    llm = Opaque(["S."])
    msgs = [SYS, user("x"), *group("g", "LOG " * 200_000), *chat(10)[1:]]
    await CompactUtils.compact_detailed(msgs, llm, 1000)
    assert tok(llm.calls[0].messages) <= summarize_module.DEFAULT_SUMMARIZER_INPUT


async def test_oversized_summary_answer_is_bounded() -> None:
    llm = scripted("blah " * 20_000 + "THE END")
    res = await CompactUtils.compact_detailed(chat(40), llm, 1000)
    assert res.method == "llm"
    assert res.summary is not None
    assert HEURISTIC.count_message(res.summary) <= summarize_module.summary_reserve(
        150, 50, HEURISTIC
    )
    assert tok(res.messages) <= 1000


async def test_echoed_prefix_is_not_doubled() -> None:
    res = await CompactUtils.compact_detailed(chat(20), scripted(f"{SUMMARY_PREFIX} S."), 600)
    assert res.summary is not None
    assert res.summary.text.startswith(f"{SUMMARY_PREFIX}\nS.")
    assert res.summary.text.count(SUMMARY_PREFIX) == 1


async def test_still_over_budget_after_summary_is_truncated_keeping_the_summary() -> None:
    pins = [user(f"pinned {i} " + "p " * 150, pinned=True) for i in range(3)]
    msgs = [SYS, *chat(10)[1:], *pins, *chat(4)[1:]]
    budget = tok([SYS, *pins]) + 300
    res = await CompactUtils.compact_detailed(msgs, scripted("Short summary."), budget,
                                              keep_recent=8)
    assert res.method == "llm"
    assert tok(res.messages) <= budget
    assert res.messages[1] is res.summary
    assert all(p in res.messages for p in pins)


async def test_uses_the_summariser_usage_reported_by_the_provider() -> None:
    reported = Usage(input_tokens=1234, output_tokens=56, calls=1)
    llm = scripted(LLMResult(message=ChatMessage.assistant("S."), usage=reported))
    res = await CompactUtils.compact_detailed(chat(20), llm, 600)
    assert res.usage == reported


async def test_inputs_are_not_mutated() -> None:
    msgs = [*chat(20), *group("g", "x " * 500)]
    before = [(id(m), m.model_dump()) for m in msgs]
    copy = list(msgs)
    await CompactUtils.compact_detailed(msgs, scripted("S."), 500)
    CompactUtils.smart_truncate(msgs, 300)
    assert msgs == copy
    assert [(id(m), m.model_dump()) for m in msgs] == before


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"hint": "fast"}, "hint"),
        ({"keep_recent": -1}, "keep_recent"),
        ({"target_fill": 0}, "target_fill"),
        ({"target_fill": 1.5}, "target_fill"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
async def test_invalid_arguments_name_the_argument(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"max_tokens": 500, **kwargs}
    with pytest.raises(ConfigError, match=name):
        await CompactUtils.compact_detailed(chat(20), scripted("S."), **args)  # type: ignore[arg-type]


def test_compaction_result_is_frozen() -> None:
    res = CompactionResult(messages=[], method="none", tokens_before=0, tokens_after=0,
                           messages_before=0, messages_after=0)
    with pytest.raises(ValueError, match="frozen"):
        res.method = "llm"  # type: ignore[misc]


def test_fact_extraction_covers_the_documented_kinds() -> None:
    text = (
        "Order ORD-12345 (#4521) costs $1,234.56, 15% off, 1500円; ships 2024-03-15, 10:30 "
        "or 2024年3月15日 / March 5, 2024. Mail john.doe@example.com, see "
        "https://example.com/a?b=1). Files /etc/hosts, src/app/main.py, report.csv. "
        "Version v1.2.3 on 192.168.1.10:8080, id 123e4567-e89b-12d3-a456-426614174000, "
        "commit deadbeef1234, 3.14 and 1,000,000. The 1st try and/or 3 apples."
    )
    facts = extract_facts(text)
    for value in ["ORD-12345", "#4521", "$1,234.56", "15%", "1500円", "2024-03-15", "10:30",
                  "2024年3月15日", "March 5, 2024", "john.doe@example.com",
                  "https://example.com/a?b=1", "/etc/hosts", "src/app/main.py", "report.csv",
                  "v1.2.3", "192.168.1.10:8080", "123e4567-e89b-12d3-a456-426614174000",
                  "deadbeef1234", "3.14", "1,000,000"]:
        assert value in facts, value
    for noise in ["1st", "3", "and/or", "/or"]:
        assert noise not in facts, noise


async def test_user_facts_survive_rolling_compactions_despite_bulky_tool_output() -> None:
    """Early user constraints must outlive the second and third rolling summary, even when
    every later turn brings a JSON tool result full of numbers and the summariser keeps
    only first sentences (regression: tool numbers used to crowd them out)."""
    from ctxstack.testing import first_sentence_summarizer

    llm = ScriptedLLM(handler=first_sentence_summarizer)
    system = ChatMessage.system("You plan events.")
    context = [
        system,
        ChatMessage.user("Plan the offsite. Budget cap $48,250, ticket OPS-4471, 42名, from 2026-03-14."),
        ChatMessage.assistant("Noted."),
    ]
    for turn in range(10):
        rows = [{"id": f"VEN-{turn:02d}{i:03d}", "price": 180_000 + 7_500 * i} for i in range(30)]
        call = ToolCall(id=f"c{turn}", name="search", arguments={"turn": turn})
        context = [
            *context,
            ChatMessage.user(f"Next question number {turn}."),
            ChatMessage.assistant(None, tool_calls=[call]),
            ChatMessage.tool(call.id, str(rows)),
            ChatMessage.assistant(f"Cheapest is {rows[0]['id']}."),
        ]
        context = await CompactUtils.llm_compact(context, llm, 1_200, hint="react_iteration")
    text = "\n".join(m.text for m in context)
    summaries = [m for m in context if m.kind == "summary"]
    assert len(summaries) == 1
    for fact in ("$48,250", "OPS-4471", "42名", "2026-03-14"):
        assert fact in text, fact


def test_pinned_query_after_an_oversized_tool_turn_does_not_empty_the_window() -> None:
    """Regression: the newest history was one user turn whose tool loop exceeded the
    budget; dropping its orphaned answer left only the system prompt and the query."""
    call = ToolCall(id="c1", name="search", arguments={})
    msgs = [
        ChatMessage.system("sys"),
        ChatMessage.user("old question"),
        ChatMessage.assistant("old answer"),
        ChatMessage.user("look this up " + "x" * 2000),
        ChatMessage.assistant(None, tool_calls=[call]),
        ChatMessage.tool("c1", "y" * 8000),
        ChatMessage.assistant("Here is what I found " + "z" * 400),
        ChatMessage.user("final question", pinned=True, metadata={"kind": "query"}),
    ]
    budget = 1000  # the tool result alone is ~1,000 tokens: the turn cannot fit whole
    assert HEURISTIC.count_messages(msgs[3:7]) > budget
    out = CompactUtils.smart_truncate(msgs, budget)
    assert HEURISTIC.count_messages(out) <= effective_budget(budget, HEURISTIC)
    roles = [m.role for m in out]
    assert roles[0] == "system"
    assert roles[1] == "user"  # never opens with an orphan assistant turn
    assert out[1].text.startswith("look this up")  # the turn's own question anchors it
    assert out[-2].text.startswith("Here is what I found")
    assert out[-1].kind == "query"
