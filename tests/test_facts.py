"""The fact extractor over arbitrary text: what every candidate is, the verdict cache, the
grammar constants beside the patterns.

Results of the extractor on chosen conversations (which facts are kept, how they rank)
are in ``test_compact.py`` and ``test_compact_stages.py``; linear time on adversarial
input in ``test_compact_stages.py`` and ``test_service_linear_time.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.compaction import _facts as facts

# --------------------------------------------------------------------------- inputs
# Fragments that drive every branch of the scan: month spellings (with dots, days,
# ordinals, years), units after a space, CJK suffixes with numbers, token characters of
# each class, JSON punctuation, quotes, file names, and the characters that break naive
# text handling (NUL, lone surrogates, astral, the scan's own sentinel " #").
FRAGMENTS = [
    "March", "Mar", "Mar.", "Sept", "Sept.", "Sep", "May", "June", "Jun", "December",
    "march", "aMarch", "xMay", " ", "  ", "5", "12", "123", "2024", "st", "nd", "rd", "th",
    ", ", ", 2024", ",", ".", "-", ":", "_", "%", "+", "~", "=", "?", "&", "/", "@", "\\",
    "$", "#", " #", "a", "Z", "x1", "ORD-", "v1.2.3", "1.5", "kg", " kg", " ms", " m",
    " lbs", " lb", " °C", " ドル", " 日間", "年", "月", "日", "円", "万", "3月5日", "1年a",
    '"', '"a b"', '"room with a view"', "「", "」", "“", "”", "{", "}", "[", "]", ";",
    "\n", "\t", "\x00", "\ud800", "\udfff", "中", "ü", "€", "\U0001f600", "https://x.io/a",
    "a@b.io", "/srv/in.csv", "report.csv", ".py", "1st", "and/or", "5 March 2024",
    ".jpeg", ".jpg", ".xlsx", ".parquet", ".PY", ".c", ".cc+", "..", "x" * 130, "_", "a-b",
    "€ 1,200.50", "£3", "¥100", "₹5", "『x y』", "「会議は3月」",
]
any_char = st.one_of(
    st.characters(exclude_categories=()),  # any code point, surrogates included
    st.characters(categories=["Cs"]),
    st.characters(max_codepoint=127),
)
piece = st.one_of(st.sampled_from(FRAGMENTS), any_char)
texts = st.lists(piece, max_size=60).map("".join)
# Very long tokens and runs: a fragment repeated up to 3,000 times, between others.
long_texts = st.lists(
    st.tuples(st.sampled_from([*FRAGMENTS, "a", "1", "a1", "-1"]),
              st.integers(min_value=1, max_value=3_000)),
    min_size=1, max_size=4,
).map(lambda runs: "".join(f * n for f, n in runs))
KINDS = {kind for _leads, kind, _score, _pattern in facts._KINDS} | {"quote", "money"}


def well_formed(text: str) -> None:
    """What every extraction of ``text`` holds to, cold and warm, with and without quoted
    phrases: distinct candidates, each a ``Candidate`` whose fact is found verbatim in the
    text, of a known kind with that kind's score; a warm verdict cache gives the same
    answer as a cold one; ``quotes=False`` is the same list without the quoted phrases."""
    facts.clear_caches()
    cold = facts.extract_candidates(text)
    warm = facts.extract_candidates(text)
    assert warm == cold
    assert [type(c) for c in cold] == [facts.Candidate] * len(cold)
    assert len({c.fact for c in cold}) == len(cold), cold
    for c in cold:
        assert c.fact, c
        assert c.fact in text, c
        assert c.kind in KINDS, c
        assert type(c.score) is int, c
        assert 1 <= c.score <= 9, c
    no_quotes = facts.extract_candidates(text, quotes=False)
    assert no_quotes == [c for c in cold if c.kind != "quote"]
    assert facts.extract_facts(text) == [c.fact for c in cold if c.kind != "small_number"]


# --------------------------------------------------------------------------- properties
@settings(max_examples=1000, deadline=None)
@given(texts)
def test_every_candidate_is_a_distinct_verbatim_value_of_arbitrary_text(text: str) -> None:
    well_formed(text)


@settings(max_examples=100, deadline=None)
@given(long_texts)
def test_very_long_tokens_and_runs_give_well_formed_candidates(text: str) -> None:
    well_formed(text)


@pytest.mark.parametrize("text", [
    "", " ", "#", " #", "1", "\x00", "\ud800", "March 5", "5March 5", "Sept. 5th, 2024",
    "x 5 kg-3", "5 kg", "1年2.3月4,5日x", '"a b"', '"a\nb c"', '"' + "x" * 79 + ' y"',
    '"' + "x" * 80 + ' y"', '"a ' + "y" * 80 + '"', '"a ' + "y" * 81 + '"', "a" * 300 + "1",
    "Jan. 5", "Jan.5", "Mayday 5", "5 Sept 2024", "5 Sept 20245", "12 May 2024",
    "..py", "/a.py", "\\b.csv", "a/.py", "x" * 127 + ".json", "x" * 129 + ".json",
    "a.py.txt", ".pyc .py", "v.ipynb_", "x.parquet", "ü.py", ".c.h",
])
def test_edge_cases_give_well_formed_candidates(text: str) -> None:
    well_formed(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("Sept. 5th, 2024", ["Sept. 5th, 2024"]),
    ("5 Sept 2024", ["5 Sept 2024"]),
    ("5 Sept 20245", ["20245"]),  # no five-digit year: the number alone
    ("x 5 kg-3", ["kg-3"]),  # no unit where the run goes on: "5" alone is no fact
    ('"' + "x" * 80 + ' y"', ['"' + "x" * 80 + ' y"']),
    ('"' + "x" * 81 + ' y"', []),  # a quoted phrase's first word: at most 80 characters
    ('"a ' + "y" * 81 + '"', []),  # and the rest at most 80
    ("x" * 128 + ".json", ["x" * 128 + ".json"]),
    ("x" * 129 + ".json", ["x" * 128 + ".json"]),  # read back over MAX_NAME characters
    ("/a.py a/.py ..py", ["/a.py"]),
    ("and/or 1st", []),
])
def test_edge_cases_give_these_facts(text: str, expected: list[str]) -> None:
    facts.clear_caches()
    assert facts.extract_facts(text) == expected


def test_long_texts_in_every_string_width_give_their_facts() -> None:
    """Texts of 70,000 characters or more in each of the str's storage widths (1, 2 and 4
    bytes per character) give the same facts as their ASCII body."""
    records = [{"ts": f"2026-04-{d:02d}T18:39:00Z", "p50_ms": d * 1.7, "id": f"ORD-{d}-XK",
                "path": f"/srv/run/{d}.csv", "note": "due March 5, 2024 · 3月5日"}
               for d in range(1, 29)]
    body = json.dumps(records, ensure_ascii=False)
    facts.clear_caches()
    expected = facts.extract_facts(body)
    assert {"ORD-17-XK", "/srv/run/17.csv", "2026-04-17T18:39:00Z", "March 5, 2024",
            "3月5日"} <= set(expected)
    for extra in ("", "ü", "中", "\U0001f600"):
        text = (body + extra + " ") * (70_000 // len(body) + 1)
        assert len(text) >= 70_000
        well_formed(text)
        assert facts.extract_facts(text) == expected


# --------------------------------------------------------------------------- the cache
def test_each_new_shape_is_judged_once_and_the_cache_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Verdicts are cached by shape (digits → 0): "A-1", "A-7" and a repeated "A-1" cost one
    judgement in the same text; a cache over its limit is cleared before the next new
    shape is judged, without changing the answer."""
    calls: list[str] = []
    judge = facts._judge

    def counting(shape: str) -> Any:
        calls.append(shape)
        return judge(shape)

    monkeypatch.setattr(facts, "_judge", counting)
    facts.clear_caches()
    text = "ids A-1 A-7 A-1 and/or 2024-03-15 x.py"
    found = facts.extract_candidates(text)
    assert calls == ["A-0", "and/or", "0000-00-00", "x.py"]
    assert found == [("A-1", "identifier", 9), ("A-7", "identifier", 9),
                     ("2024-03-15", "date", 8), ("x.py", "file", 6)]
    assert set(facts._VERDICTS) == {"A-0", "and/or", "0000-00-00", "x.py"}
    assert facts.extract_candidates(text) == found  # all cached: nothing judged again
    assert len(calls) == 4
    monkeypatch.setattr(facts, "MAX_VERDICTS", 1)
    assert facts.extract_candidates("A-3 B-4") == [("A-3", "identifier", 9),
                                                   ("B-4", "identifier", 9)]
    assert calls[4:] == ["B-0"]
    assert facts._VERDICTS == {"B-0": ("identifier", 9)}  # cleared, then refilled
    facts.clear_caches()


def test_a_thousand_timestamps_of_one_shape_cost_one_judgement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    judge = facts._judge
    monkeypatch.setattr(facts, "_judge", lambda shape: calls.append(shape) or judge(shape))
    facts.clear_caches()
    dump = json.dumps([{"ts": f"2026-04-01T{d // 60:02d}:{d % 60:02d}:00Z"}
                       for d in range(1_000)])
    found = facts.extract_candidates(dump, quotes=False)
    assert len(found) == 1_000
    assert calls == ["0000-00-00T00:00:00Z"]
    facts.clear_caches()


# --------------------------------------------------------------------------- the grammar
def test_the_grammar_constants_are_the_patterns_character_classes() -> None:
    """``_L_CHARS`` (what a letter prefix is stripped of) is the scan's L class, and the
    month spellings (which ``_AFTER_MONTH`` looks behind for) are exactly the prefixes of
    month names the month pattern accepts."""
    for code in range(128):
        char = chr(code)
        assert (char in facts._L_CHARS) == bool(re.fullmatch(facts._L, char)), char
    prefixes = {name[:n] for name in facts._MONTH_NAMES for n in range(1, len(name) + 1)}
    accepted = {p for p in prefixes if re.fullmatch(facts._MONTH, p)}
    assert accepted == facts._MONTH_SPELLINGS
    assert len(accepted) == 24


# The scan as first written: the month-first date tried before the token, optional parts
# as ``(?:X)?``. ``_SCAN`` reorders the two (they never match at the same place) and spells
# optional parts ``(?:X|)`` for speed; it must find exactly the same tokens.
_PLAIN_SCAN = re.compile(
    facts._NOT_S + r"*(?<!" + facts._L + r")(" + facts._MONTH_FIRST
    + r"|(?!" + facts._AFTER_MONTH + r")(?:" + facts._DAY_FIRST
    + r"|" + facts._L + r"*+" + facts._S + r"(?:" + facts._T + r"*" + facts._T_END + r")?"
    + r"(?:" + facts._UNIT_AFTER + r"|(?:" + facts._CJK_AFTER
    + r"(?:[0-9]++(?:[.,][0-9]++)*+)?)++)?))"
    + r"|" + facts._NOT_S + r"*+\Z"
)


@settings(max_examples=1000, deadline=None)
@given(texts)
def test_the_scan_finds_the_tokens_of_its_plain_spelling(text: str) -> None:
    subject = text + facts._SENTINEL
    assert facts._SCAN.findall(subject) == _PLAIN_SCAN.findall(subject)


@pytest.mark.parametrize("text", [
    "March 5, 2024", "Mar. 5th", "Sept. 5th, 2024 x", "5 March 2024", "May 1st-2", "Mar5",
    "aMarch 5", "March.5", "Jan 12 ORD-5 3.14159 kg 2024年3月5日 42名 x 5 kg-3", "March 1st-a1",
])
def test_the_scan_agrees_with_its_plain_spelling_on_month_dates(text: str) -> None:
    subject = text + facts._SENTINEL
    assert facts._SCAN.findall(subject) == _PLAIN_SCAN.findall(subject)
