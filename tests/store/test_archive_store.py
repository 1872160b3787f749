"""The service's archive: stored messages plus archived run messages, searched with the
database's full-text machinery (SQLite FTS5 trigram, PostgreSQL full-text + pg_trgm)."""

from __future__ import annotations

import pytest

from ctxstack.compaction import Archive, HistoryArchive
from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.store import SessionFactory, UserRecord, create_conversation
from ctxstack.store.archive import ConversationArchive, query_terms
from ctxstack.store.messages import NewMessage, append_messages
from tests.archive_cases import CASES, ONE_SIDED, SearchCase


async def conversation(sf: SessionFactory, user: UserRecord, texts: list[str]) -> str:
    conv = await create_conversation(sf, user.id, "archive")
    await append_messages(sf, conv.id, [
        NewMessage(role="user" if i % 2 == 0 else "assistant", content=t)
        for i, t in enumerate(texts)
    ])
    return conv.id


FILLER = "We talked about the weather and the weekend plans again."


async def test_stored_messages_are_searchable_and_readable_by_ref(
    sf: SessionFactory, alice: UserRecord
) -> None:
    texts = [FILLER] * 30
    texts[3] = "My order id is ORD-99812-XK and it weighs 3.14159 kg."
    conv = await conversation(sf, alice, texts)
    archive = ConversationArchive(sf, conv, hidden=20)
    assert isinstance(archive, Archive)
    assert len(archive) == 20
    hits = await archive.search("which order id ORD-99812-XK", k=5)
    assert hits
    assert hits[0].ref == "m4"
    assert "ORD-99812-XK" in hits[0].snippet
    message = await archive.get("m4")
    assert message is not None
    assert "3.14159 kg" in message.text
    assert await archive.get("m999") is None
    assert await archive.get("nonsense") is None


async def test_cjk_search_on_both_backends(sf: SessionFactory, alice: UserRecord) -> None:
    texts = [FILLER, "好的。", "会議は東京本社の第三会議室で三月五日に行います。", "了解しました。",
             "我们的预算上限是四万八千元，请不要超过。", "好的。"] + [FILLER] * 10
    conv = await conversation(sf, alice, texts)
    archive = ConversationArchive(sf, conv)
    ja = await archive.search("会議室はどこですか", k=3)
    assert ja
    assert "第三会議室" in ja[0].message.text
    zh = await archive.search("预算上限", k=3)
    assert zh
    assert "四万八千元" in zh[0].message.text
    two = await archive.search("東京", k=3)  # a two-character query still works
    assert two
    assert "東京本社" in two[0].message.text


async def test_run_messages_are_archived_and_other_conversations_stay_apart(
    sf: SessionFactory, alice: UserRecord, bob: UserRecord
) -> None:
    conv = await conversation(sf, alice, [FILLER] * 4)
    other = await conversation(sf, bob, ["bob's secret code ZEBRA-5521"])
    archive = ConversationArchive(sf, conv, before_seq=4)
    call = ToolCall(id="c1", name="search_hotels", arguments={"city": "Kyoto"})
    refs = await archive.add([
        ChatMessage.tool("c1", "Hotel Sakura: room 1208, rate 18,500円 per night",
                         name="search_hotels"),
        ChatMessage.assistant(None, tool_calls=[call]),
        ChatMessage.user("stored already", metadata={"seq": 2}),
    ])
    assert refs[0].startswith("a")
    assert refs[1].startswith("a")
    assert refs[2] == "m2"
    assert len(archive) == 3
    hits = await archive.search("room rate Sakura")
    assert hits[0].ref == refs[0]
    got = await archive.get(refs[0])
    assert got is not None
    assert "18,500円" in got.text
    assert await archive.search("ZEBRA-5521") == []  # bob's conversation is not searched
    assert await ConversationArchive(sf, other).get(refs[0]) is None
    # before_seq: the current question is not part of the archive
    assert await archive.get("m4") is None


async def test_bad_queries_are_input_errors(sf: SessionFactory, alice: UserRecord) -> None:
    archive = ConversationArchive(sf, await conversation(sf, alice, [FILLER]))
    with pytest.raises(InputError, match="query"):
        await archive.search("  ")
    with pytest.raises(InputError, match="k must"):
        await archive.search("weather", k=0)


def test_query_terms_use_trigrams_for_text_without_spaces() -> None:
    assert query_terms("ORD-99812 is it") == ["ord-99812"]
    assert "会議室" in query_terms("会議室はどこ")
    assert query_terms("東京") == ["東京"]


async def test_archived_audio_and_files_are_named_never_stored_as_base64(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, [FILLER] * 4)
    archive = ConversationArchive(sf, conv, before_seq=4)
    payload = "UEFZTE9BRC8wMTIz" * 10_000
    message = ChatMessage.user([
        {"type": "text", "text": "The lease for flat 12B, see attached."},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{payload}",
                                  "filename": "lease.pdf"}},
        {"type": "input_audio", "input_audio": {"data": payload, "format": "wav"}}])
    (ref,) = await archive.add([message])
    got = await archive.get(ref)
    assert got is not None
    assert got.text == "The lease for flat 12B, see attached. [file: lease.pdf] [audio (wav)]"
    assert await archive.search("UEFZTE9BRC8wMTIz") == []
    hits = await archive.search("lease.pdf flat 12B")
    assert hits[0].ref == ref
    with pytest.raises(InputError, match="audio and file parts are not stored"):
        NewMessage.from_chat(message)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_the_fused_ranking_puts_the_evidence_first_on_every_backend(
    sf: SessionFactory, alice: UserRecord, case: SearchCase,
) -> None:
    """English (word BM25 via FTS5 unicode61 / ts_rank), Chinese, Japanese (n-grams via
    FTS5 trigram / pg_trgm) and identifiers: the same order as the in-memory archive."""
    conv = await conversation(sf, alice, case.texts)
    hits = await ConversationArchive(sf, conv).search(case.question, k=5)
    assert hits
    assert case.evidence in hits[0].message.text
    memory = HistoryArchive()
    await memory.add([ChatMessage.user(t) for t in case.texts])
    expected = await memory.search(case.question, k=1)
    assert expected[0].message.text == hits[0].message.text


async def test_an_english_question_finds_old_evidence_past_the_candidate_limit(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """A question of common words used to fetch the newest 200 messages that contain
    "the": the word index ranks the old evidence into the candidates."""
    texts = ["Mia went to her first support-group meeting last Tuesday."]
    texts += [f"The weather was fine on day {i} and the walk was long." for i in range(260)]
    conv = await conversation(sf, alice, texts)
    hits = await ConversationArchive(sf, conv).search("When did Mia go to the support group?")
    assert hits
    assert hits[0].ref == "m1"


async def test_a_hit_only_the_ngram_half_finds_is_returned_on_every_backend(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """A mixed-script question whose Japanese words only the n-gram half (FTS5 trigram /
    pg_trgm) matches: the evidence is in the top 5 although six messages match both
    halves through a name, and in the same place as in the in-memory archive."""
    conv = await conversation(sf, alice, ONE_SIDED.texts)
    hits = await ConversationArchive(sf, conv).search(ONE_SIDED.question, k=5)
    texts = [h.message.text for h in hits]
    assert any(ONE_SIDED.evidence in t for t in texts)
    memory = HistoryArchive()
    await memory.add([ChatMessage.user(t) for t in ONE_SIDED.texts])
    expected = [h.message.text for h in await memory.search(ONE_SIDED.question, k=5)]
    assert texts.index(next(t for t in texts if ONE_SIDED.evidence in t)) == next(
        i for i, t in enumerate(expected) if ONE_SIDED.evidence in t)


REPLY_TEXTS = [
    "The bakery on the corner has new opening hours since March.",
    "My sister visited last month and we went to the museum together.",
    "The train was late again this morning, twenty minutes this time.",
    "I finally finished the book about the history of tea.",
    "What made you decide to run for office again?",
    "Seeing the difference I made locally last time convinced me.",
    "The garden needs watering twice a day in this heat.",
    "We booked the cabin by the lake for the first week of August.",
]


async def test_a_stored_questions_reply_is_found_with_it_on_every_backend(
    sf: SessionFactory, alice: UserRecord
) -> None:
    """The reply (the next stored message, the other role) shares no word with the
    question asked of the archive; the stored question does, and brings it — as the
    in-memory archive ranks the same turns."""
    conv = await conversation(sf, alice, REPLY_TEXTS)  # seq 1, 2, …: user, assistant, …
    hits = await ConversationArchive(sf, conv).search(
        "Why did you decide to run for office again?", k=2)
    assert [h.ref for h in hits] == ["m5", "m6"]
    assert hits[1].message.text == REPLY_TEXTS[5]
    memory = HistoryArchive()
    await memory.add([ChatMessage(role="user" if i % 2 == 0 else "assistant", content=t)
                      for i, t in enumerate(REPLY_TEXTS)])
    expected = await memory.search("Why did you decide to run for office again?", k=2)
    assert [h.message.text for h in expected] == [h.message.text for h in hits]


async def test_a_reply_outside_the_archive_or_from_the_same_side_is_not_linked(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, REPLY_TEXTS)
    # before_seq=6: the reply is the current question, not history yet.
    hits = await ConversationArchive(sf, conv, before_seq=6).search(
        "Why did you decide to run for office again?", k=3)
    assert "m6" not in [h.ref for h in hits]
    same_side = await create_conversation(sf, alice.id, "same side")
    await append_messages(sf, same_side.id, [NewMessage(role="user", content=t)
                                             for t in REPLY_TEXTS])
    hits = await ConversationArchive(sf, same_side.id).search(
        "Why did you decide to run for office again?", k=2)
    assert hits[0].ref == "m5"
    assert "m6" not in [h.ref for h in hits]


JA_REPLY_TEXTS = [
    "今朝は電車が二十分も遅れました。",
    "駅前のパン屋の営業時間が三月から変わりました。",
    "先月、妹が遊びに来て一緒に美術館へ行きました。",
    "お茶の歴史についての本をやっと読み終えました。",
    "週末はどこでキャンプをしましたか。",  # a question without a question mark
    "富士山の近くの湖のほとりです。",
    "隣の家が二匹目の猫を飼い始めました。",
    "今年の夏は庭の水やりが一日二回必要です。",
]


async def test_a_japanese_question_ending_in_ka_brings_its_reply_on_every_backend(
    sf: SessionFactory, alice: UserRecord
) -> None:
    conv = await conversation(sf, alice, JA_REPLY_TEXTS)
    hits = await ConversationArchive(sf, conv).search("キャンプの場所", k=2)
    assert [h.ref for h in hits] == ["m5", "m6"]
    assert hits[1].message.text == JA_REPLY_TEXTS[5]
