"""A question's reply is found with it (issue 29, recall on real dialogues).

In a conversation the answer to a question is the next turn, and it seldom repeats the
question's words: searched for "Why did John run for office again?", the archive finds
Maria's "What made you decide to run again?" — and must bring John's reply with it.
"""

from __future__ import annotations

import pytest

from ctxstack.compaction import HistoryArchive
from ctxstack.compaction._archive import REPLY_CREDIT, asks_question, credit_replies
from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage, ToolCall

FILLER = [
    "We talked about the weather and the weekend plans again.",
    "The bakery on the corner has new opening hours since March.",
    "My sister visited last month and we went to the museum together.",
    "The train was late again this morning, twenty minutes this time.",
    "I finally finished the book about the history of tea.",
    "Our neighbours adopted a second cat, a very loud one.",
]
AFTER = [
    "The garden needs watering twice a day in this heat.",
    "We booked the cabin by the lake for the first week of August.",
    "The new coffee machine at work makes terrible espresso.",
    "Dad is learning to play the guitar at sixty-two.",
]
QUESTION = "What made you decide to run for office again?"
REPLY = "Seeing the difference I made locally last time convinced me."
"""Shares no word with the query (nor with the question): only the link finds it."""
QUERY = "Why did John decide to run for office again?"


def turns(texts: list[str], first: str = "user") -> list[ChatMessage]:
    """Alternating user / assistant turns, starting with ``first``."""
    other = "assistant" if first == "user" else "user"
    return [ChatMessage(role=first if i % 2 == 0 else other, content=t)
            for i, t in enumerate(texts)]


async def refs_found(archive: HistoryArchive, query: str, k: int = 3) -> list[str]:
    return [h.message.text for h in await archive.search(query, k=k)]


async def test_the_reply_to_a_matching_question_is_found_with_it() -> None:
    archive = HistoryArchive()
    await archive.add(turns([*FILLER, QUESTION, REPLY, *AFTER]))
    found = await refs_found(archive, QUERY, k=2)
    assert found[0] == QUESTION
    assert REPLY in found


JA_FILLER = [
    "今朝は電車が二十分も遅れました。",
    "駅前のパン屋の営業時間が三月から変わりました。",
    "先月、妹が遊びに来て一緒に美術館へ行きました。",
    "お茶の歴史についての本をやっと読み終えました。",
    "隣の家が二匹目の猫を飼い始めました。",
    "今年の夏は庭の水やりが一日二回必要です。",
]
JA_QUESTION = "週末はどこでキャンプをしましたか。"
JA_REPLY = "富士山の近くの湖のほとりです。"
"""Shares no character bigram with the query: only the link finds it."""
JA_QUERY = "キャンプの場所"


async def test_a_japanese_question_without_a_question_mark_lends_to_its_reply() -> None:
    archive = HistoryArchive()
    await archive.add(turns([*JA_FILLER, JA_QUESTION, JA_REPLY, *JA_FILLER[:2]]))
    found = await refs_found(archive, JA_QUERY, k=2)
    assert found[0] == JA_QUESTION
    assert JA_REPLY in found
    # Control: the same turn as a statement lends nothing.
    statement = HistoryArchive()
    await statement.add(turns([*JA_FILLER, "週末は湖でキャンプをしました。", JA_REPLY,
                               *JA_FILLER[:2]]))
    assert JA_REPLY not in await refs_found(statement, JA_QUERY, k=2)


async def test_a_statement_lends_nothing_to_the_turn_after_it() -> None:
    """Control: the same turns, the first a statement, not a question."""
    archive = HistoryArchive()
    await archive.add(turns([*FILLER, "I decided to run for office again.", REPLY,
                             *AFTER]))
    assert REPLY not in await refs_found(archive, QUERY, k=2)


async def test_the_reply_must_come_from_the_other_side() -> None:
    archive = HistoryArchive()
    await archive.add([*turns(FILLER), ChatMessage.user(QUESTION), ChatMessage.user(REPLY),
                       *turns(AFTER)])
    assert REPLY not in await refs_found(archive, QUERY, k=2)


async def test_tool_calls_between_a_question_and_its_answer_do_not_break_the_link() -> None:
    call = ToolCall(id="c1", name="lookup_history", arguments={"person": "John"})
    archive = HistoryArchive()
    await archive.add([
        *turns(FILLER),
        ChatMessage.user(QUESTION),
        ChatMessage.assistant(None, tool_calls=[call]),
        ChatMessage.tool("c1", "no records", name="lookup_history"),
        ChatMessage.assistant(REPLY),
        *turns(AFTER),
    ])
    assert REPLY in await refs_found(archive, QUERY, k=2)


async def test_the_link_holds_across_archiving_calls_and_re_archived_turns() -> None:
    """Compaction archives a conversation a span at a time, and a caller that refits its
    whole history hands the same turns again: the next new turn is still the reply."""
    archive = HistoryArchive()
    head = turns([*FILLER, QUESTION])
    await archive.add(head)
    await archive.add([m.replace() for m in head])  # the same turns again, as new objects
    await archive.add([ChatMessage.assistant(REPLY), *turns(AFTER)])
    assert len(archive) == len(FILLER) + len(AFTER) + 2
    assert REPLY in await refs_found(archive, QUERY, k=2)


async def test_an_archive_filled_out_of_order_links_only_what_it_is_told() -> None:
    """A store ranks its candidates in any order: no link is inferred from it."""
    archive = HistoryArchive(in_order=False)
    question, reply, *_ = await archive.add(turns([QUESTION, REPLY, *AFTER]))
    assert REPLY not in await refs_found(archive, QUERY, k=1)
    plain = await archive.search(QUERY, k=len(archive))
    archive.link_reply(question, reply)
    linked = await archive.search(QUERY, k=len(archive))
    before = next(h.score for h in plain if h.ref == reply)
    after = next(h.score for h in linked if h.ref == reply)
    lent = next(h.score for h in plain if h.ref == question)
    assert after == pytest.approx(before + REPLY_CREDIT * lent, abs=1e-5)


async def test_link_reply_names_an_unknown_ref_and_ignores_a_non_question() -> None:
    archive = HistoryArchive(in_order=False)
    statement, reply = await archive.add(turns(["I went home.", REPLY]))
    with pytest.raises(InputError, match="a99"):
        archive.link_reply("a99", reply)
    with pytest.raises(InputError, match="link_reply"):
        archive.link_reply(statement, 7)  # type: ignore[arg-type]
    before = await archive.search("difference locally", k=2)
    archive.link_reply(statement, reply)  # a statement asks nothing: no credit
    assert await archive.search("difference locally", k=2) == before


def test_what_counts_as_a_question() -> None:
    assert asks_question(ChatMessage.user("Really?"))
    assert asks_question(ChatMessage.assistant('She said "why not?" and left.'))
    assert asks_question(ChatMessage.user("你好吗？我很好"))
    assert asks_question(ChatMessage.user("هل أنت بخير؟"))
    assert not asks_question(ChatMessage.user("see https://example.org/a?b=1&c=2"))
    assert not asks_question(ChatMessage.user("no question here"))
    # Japanese and Chinese often end a question with its particle and a full stop.
    assert asks_question(ChatMessage.user("明日は何時に出発しますか。"))
    assert asks_question(ChatMessage.assistant("どこへ行ったのですか"))
    assert asks_question(ChatMessage.user("你去过北京吗。\n我去过。"))
    assert asks_question(ChatMessage.user("你吃飯了嗎"))
    assert not asks_question(ChatMessage.user("わかりました。ありがとう。"))  # か inside a word
    assert not asks_question(ChatMessage.user("我很好。谢谢。"))
    # Tool traffic neither asks nor replies.
    assert not asks_question(ChatMessage.tool("c1", "Why?", name="t"))
    call = ToolCall(id="c1", name="t", arguments={})
    assert not asks_question(ChatMessage.assistant("Why?", tool_calls=[call]))


def test_hostile_text_is_judged_in_linear_time() -> None:
    """100K characters of URL query strings, NUL bytes and question marks run through
    the pattern once each (no backtracking), with the expected answers."""
    assert not asks_question(ChatMessage.user("a?b=1\x00" * 20_000))
    assert asks_question(ChatMessage.user("?" * 100_000))
    assert not asks_question(ChatMessage.user("x" * 100_000))
    assert not asks_question(ChatMessage.user("かわ" * 50_000))
    assert asks_question(ChatMessage.user("か" * 100_000))


def test_credit_is_lent_once_and_does_not_chain() -> None:
    fused = {"q1": 0.5, "q2": 0.25}
    out = credit_replies(fused, {"q1": "q2", "q2": "r"}, share=0.5)
    assert out == pytest.approx({"q1": 0.5, "q2": 0.5, "r": 0.125})
    assert fused == {"q1": 0.5, "q2": 0.25}  # the input is not changed
