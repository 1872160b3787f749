"""HistoryArchive search on real-shape multilingual history (fixtures: ``tests/realdata``).

What a user (or the agent's ``recall`` tool) relies on: a word from any script finds the
archived message that holds it — including one-character words, which Chinese and
Japanese have plenty of — and an identifier finds its message exactly.
"""

from __future__ import annotations

import pytest

from ctxstack import ChatMessage, HistoryArchive
from ctxstack.errors import InputError
from ctxstack.messages import from_openai_messages
from tests import realdata


async def _archive() -> tuple[HistoryArchive, list[ChatMessage]]:
    messages = [ChatMessage.user(text) for text in realdata.MULTILINGUAL.values()] + [
        ChatMessage.user("うちの猫が昨日から何も食べません。"),
        ChatMessage.assistant("犬の散歩は朝7時です。"),
        ChatMessage.user("猫"),
        *from_openai_messages(realdata.multi_session_dialogue(6)),
    ]
    archive = HistoryArchive()
    await archive.add(messages)
    return archive, messages


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("猫", "猫"), ("犬", "犬の散歩"), ("雨", None), ("物流", "ORD-99812-XK"),
        ("분기 실적", "12.5%"), ("موقف سيارات", "BK-7731"), ("ट्रेन", "4521987360"),
        ("OOM killer", "8812"), ("συμμετοχή", "Πέμπτη"), ("ORD-99812-XK", "物流"),
        ("👨‍👩‍👧‍👦", "Kyoto"), ("予約番号", "予約番号"),
    ],
)
async def test_a_word_in_any_script_finds_its_message(query: str, needle: str | None) -> None:
    archive, _ = await _archive()
    hits = await archive.search(query, k=3)
    if needle is None:
        assert hits == []
        return
    assert hits, query
    assert needle in hits[0].message.text
    assert hits[0].snippet


async def test_one_character_query_ranks_and_gets_back_the_message() -> None:
    archive, _ = await _archive()
    hits = await archive.search("猫", k=5)
    assert {h.message.text for h in hits} == {"うちの猫が昨日から何も食べません。", "猫"}
    got = await archive.get(hits[0].ref)
    assert got is not None
    assert got.text in {"うちの猫が昨日から何も食べません。", "猫"}


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
async def test_empty_query_is_a_clear_error(query: str) -> None:
    archive, _ = await _archive()
    with pytest.raises(InputError, match="query"):
        await archive.search(query)


async def test_a_100k_character_message_is_archived_and_found() -> None:
    archive = HistoryArchive()
    big = ChatMessage.tool("call_1", "ログ行\n" * 20_000 + "最後に ERR-4417 で停止しました")
    (ref,) = await archive.add([big])
    got = await archive.get(ref)
    assert got is not None
    assert got.text == big.text
    hits = await archive.search("ログ行", k=1)
    assert hits[0].ref == ref
