"""HistoryArchive's hybrid ranking: word BM25 (FTS5) fused with character n-gram BM25."""

from __future__ import annotations

import pytest

from ctxstack.compaction import HistoryArchive
from ctxstack.compaction._archive import (
    STOP_WORDS,
    content_query,
    fts_match,
    fuse,
    query_words,
)
from ctxstack.messages import ChatMessage
from tests.archive_cases import CASES, ONE_SIDED, SearchCase


async def archive_of(texts: list[str]) -> HistoryArchive:
    archive = HistoryArchive()
    await archive.add([ChatMessage.user(t) if i % 2 == 0 else ChatMessage.assistant(t)
                       for i, t in enumerate(texts)])
    return archive


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_the_evidence_ranks_first(case: SearchCase) -> None:
    archive = await archive_of(case.texts)
    hits = await archive.search(case.question, k=5)
    assert hits, "nothing found"
    assert case.evidence in hits[0].message.text
    assert hits[0].score > 0


async def test_an_english_question_is_ranked_by_its_meaningful_words() -> None:
    """The n-gram ranking alone is pulled off by the question's function words and
    shared fragments; the word ranking finds the evidence through the stemmed words."""
    case = CASES[0]
    archive = await archive_of(case.texts)
    words = archive.word_ranking(case.question)
    evidence = next(h.ref for h in await archive.search(case.question, k=1))
    assert words[0] == evidence
    assert query_words(case.question) == ["mia", "go", "support", "group"]


async def test_a_cjk_question_has_no_word_ranking_and_keeps_the_ngram_order() -> None:
    case = CASES[1]
    archive = await archive_of(case.texts)
    assert archive.word_ranking(case.question) == []
    ngram = archive.ngram_ranking(case.question, 5)
    hits = await archive.search(case.question, k=5)
    assert [h.ref for h in hits] == ngram[:5]


async def test_a_question_of_stop_words_only_still_finds_something() -> None:
    archive = await archive_of(["what is it", "unrelated words here"])
    hits = await archive.search("what is it", k=2)
    assert hits
    assert hits[0].message.text == "what is it"


async def test_punctuation_and_case_do_not_matter_and_quotes_are_not_operators() -> None:
    archive = await archive_of(['The "NEAR" clause: Zebra OR stripes AND 5521', "other"])
    for q in ['zebra?', 'ZEBRA!!', '"near" OR', 'NEAR(zebra', 'stripes*']:
        hits = await archive.search(q, k=1)
        assert hits, q
        assert "Zebra" in hits[0].message.text


async def test_text_that_sqlite_cannot_encode_is_archived_and_searchable() -> None:
    archive = await archive_of(["broken \ud83d surrogate with marker QX-77", "other"])
    hits = await archive.search("QX-77", k=1)
    assert hits
    assert "QX-77" in hits[0].message.text


def test_query_helpers() -> None:
    assert {"when", "did", "the", "to"} <= STOP_WORDS
    assert content_query("When did Mia go to the group?") == "Mia go group?"
    assert content_query("what is it") == "what is it"
    assert fts_match(['a"b', "c"]) == '"a""b" OR "c"'
    # Clitics a word tokenizer splits off ("'s", "'t") match every possessive: left out.
    assert query_words("What is the name of Aisha's dog? Don't guess.") == [
        "name", "aisha", "dog", "don", "guess"]


def test_fusion_is_reciprocal_rank_with_a_small_constant() -> None:
    scores = fuse([["x", "y"], ["y", "z"]])
    assert scores == pytest.approx({"x": 1 / 3, "y": 1 / 4 + 1 / 3, "z": 1 / 4})
    assert fuse([["x"], []], k=60) == pytest.approx({"x": 1 / 61})
    # One half's first beats what both halves rank 5th, ties with both 4th.
    first = fuse([["a"], []])["a"]
    assert first > fuse([["q1", "q2", "q3", "q4", "b"]] * 2)["b"]
    assert first == pytest.approx(fuse([["q1", "q2", "q3", "b"]] * 2)["b"])


async def test_a_hit_only_one_half_finds_stays_in_the_top_five() -> None:
    """The halves see different tokens, so a message only one of them lists — first, by a
    clear margin — must not be pushed out by messages both list through a common word."""
    archive = await archive_of(ONE_SIDED.texts)
    words = archive.word_ranking(ONE_SIDED.question)
    ngrams = archive.ngram_ranking(ONE_SIDED.question)
    evidence = next(f"a{i}" for i, t in enumerate(ONE_SIDED.texts, start=1)
                    if ONE_SIDED.evidence in t)
    assert evidence not in words
    assert ngrams[0] == evidence
    assert len(set(words) & set(ngrams)) >= 5
    hits = await archive.search(ONE_SIDED.question, k=5)
    assert evidence in [h.ref for h in hits]
    # Its score is its n-gram half's first place alone.
    assert next(h.score for h in hits if h.ref == evidence) == pytest.approx(1 / 3, abs=1e-6)
