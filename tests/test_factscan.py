"""The C scanner of the fact extractor gives exactly the pure-Python path's results.

``ctxstack._factscan`` is optional (built on install when a C compiler is present); both
paths are reachable here (``facts._NATIVE`` set or ``None``). With
``CTXSTACK_REQUIRE_SPEEDUPS=1`` (CI) a scanner that did not build is a failure, not a
skip. Memory safety: the CHANGELOG (issue 14) says how to run this module against an
AddressSanitizer / UBSan build.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.compaction import _facts as facts
from tests.fact_paths import NATIVE, REQUIRED, require_native

# --------------------------------------------------------------------------- inputs
# Fragments that drive every branch of the scan: month spellings (with dots, days,
# ordinals, years), units after a space, CJK suffixes with numbers, token characters of
# each class, JSON punctuation, quotes, and the characters a C scanner gets wrong first
# (NUL, lone surrogates, astral, the sentinel's own " #").
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


def pure(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn`` run on the pure-Python path (the scanner switched off for the call)."""
    native, facts._NATIVE = facts._NATIVE, None
    try:
        return fn(*args, **kwargs)
    finally:
        facts._NATIVE = native


def scanner() -> ModuleType:
    require_native()
    assert NATIVE is not None
    return NATIVE


def same_everywhere(text: str) -> None:
    """The scan, the quoted phrases, the file names and the candidates (both ``quotes``
    settings) agree."""
    native = scanner()
    assert native.scan(text) == facts._SCAN.findall(text + facts._SENTINEL)[:-2]
    assert native.quotes(text) == facts._QUOTE.findall(text)
    assert native.names(text) == facts._file_names(text)
    for quotes in (True, False):
        facts.clear_caches()
        fast = facts.extract_candidates(text, quotes=quotes)
        facts.clear_caches()
        slow = pure(facts.extract_candidates, text, quotes=quotes)
        assert fast == slow
        assert [type(c) for c in fast] == [facts.Candidate] * len(fast)


# --------------------------------------------------------------------------- the build
def test_the_scanner_is_in_use_when_required() -> None:
    if not REQUIRED:
        pytest.skip("CTXSTACK_REQUIRE_SPEEDUPS is not set")
    assert facts.NATIVE_SCAN, "ctxstack._factscan did not build or has another grammar"
    from ctxstack import _factscan

    assert facts._NATIVE is _factscan
    assert facts._load_native() is _factscan  # built for facts.py's grammar


def test_a_scanner_built_for_another_grammar_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-place build left over from an older grammar is not trusted: facts.py falls
    back to its regex path rather than scan with different rules."""
    stale = ModuleType("ctxstack._factscan")
    grammar = list(facts._GRAMMAR)
    grammar[3] = (*grammar[3], "furlongs")  # one more unit word than facts.py's
    stale.GRAMMAR = tuple(grammar)  # type: ignore[attr-defined]
    monkeypatch.setattr(facts, "import_module", lambda name: stale)
    assert facts._load_native() is None
    stale.GRAMMAR = None  # type: ignore[attr-defined]
    assert facts._load_native() is None

    def missing(name: str) -> ModuleType:
        raise ImportError(name)

    monkeypatch.setattr(facts, "import_module", missing)
    assert facts._load_native() is None
    stale.GRAMMAR = facts._GRAMMAR  # type: ignore[attr-defined]
    monkeypatch.setattr(facts, "import_module", lambda name: stale)
    assert facts._load_native() is stale


def test_the_grammar_constants_are_the_patterns_character_classes() -> None:
    """``_GRAMMAR`` (what the C scanner is checked against) states the regex's sets."""
    import re

    for code in range(128):
        char = chr(code)
        assert (char in facts._S_CHARS) == bool(re.fullmatch(facts._S, char)), char
        assert (char in facts._L_CHARS) == bool(re.fullmatch(facts._L, char)), char
        assert (char in facts._T_END_CHARS) == bool(re.fullmatch(facts._T_END, char)), char
    # The month spellings are exactly the prefixes of month names the pattern accepts.
    prefixes = {name[:n] for name in facts._MONTH_NAMES for n in range(1, len(name) + 1)}
    accepted = {p for p in prefixes if re.fullmatch(facts._MONTH, p)}
    assert accepted == facts._MONTH_SPELLINGS
    assert len(accepted) == 24


# --------------------------------------------------------------------------- equality
@settings(max_examples=1500, deadline=None)
@given(texts)
def test_native_and_pure_agree_on_arbitrary_text(text: str) -> None:
    same_everywhere(text)


@settings(max_examples=150, deadline=None)
@given(long_texts)
def test_native_and_pure_agree_on_very_long_tokens_and_runs(text: str) -> None:
    same_everywhere(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(texts, st.integers(0, 2), st.integers(-1, 50)), max_size=8),
       texts)
def test_native_and_pure_rank_the_same(sources: list[tuple[str, int, int]],
                                       present: str) -> None:
    scanner()
    facts.clear_caches()
    fast = facts.rank_candidates(sources, facts.normalize(present))
    facts.clear_caches()
    slow = pure(facts.rank_candidates, sources, facts.normalize(present))
    assert fast == slow


def test_native_and_pure_agree_on_long_texts_scanned_without_the_gil() -> None:
    """Texts of 65,536 characters or more are scanned with the GIL released, in each of
    the str's storage widths (1, 2 and 4 bytes per character)."""
    records = [{"ts": f"2026-04-{d:02d}T18:39:00Z", "p50_ms": d * 1.7, "id": f"ORD-{d}-XK",
                "path": f"/srv/run/{d}.csv", "note": "due March 5, 2024 · 3月5日"}
               for d in range(1, 29)]
    body = json.dumps(records, ensure_ascii=False)
    for extra in ("", "ü", "中", "\U0001f600"):
        text = (body + extra + " ") * (70_000 // len(body) + 1)
        assert len(text) >= 70_000
        same_everywhere(text)
        assert "ORD-17-XK" in [c.fact for c in facts.extract_candidates(text)]


@pytest.mark.parametrize("text", [
    "", " ", "#", " #", "1", "\x00", "\ud800", "March 5", "5March 5", "Sept. 5th, 2024",
    "x 5 kg-3", "5 kg", "1年2.3月4,5日x", '"a b"', '"a\nb c"', '"' + "x" * 79 + ' y"',
    '"' + "x" * 80 + ' y"', '"a ' + "y" * 80 + '"', '"a ' + "y" * 81 + '"', "a" * 300 + "1",
    "Jan. 5", "Jan.5", "Mayday 5", "5 Sept 2024", "5 Sept 20245", "12 May 2024",
    "..py", "/a.py", "\\b.csv", "a/.py", "x" * 127 + ".json", "x" * 129 + ".json",
    "a.py.txt", ".pyc .py", "v.ipynb_", "x.parquet", "ü.py", ".c.h",
])
def test_native_and_pure_agree_on_edge_cases(text: str) -> None:
    same_everywhere(text)


# --------------------------------------------------------------------------- failures
def test_the_entry_points_reject_what_they_cannot_scan() -> None:
    native = scanner()
    with pytest.raises(TypeError):
        native.scan(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.quotes(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.names(["a.py"])  # type: ignore[arg-type]
    args: list[Any] = [{}, facts._judge, facts.Candidate, facts._PREFIXED, 10, "a1", []]
    for position, wrong in [(0, []), (1, None), (2, str), (2, 3), (5, b"a1"), (6, ())]:
        bad = list(args)
        bad[position] = wrong
        with pytest.raises(TypeError):
            native.judged(*bad)
    with pytest.raises(TypeError, match="7 arguments"):
        native.judged(*args[:6])
    with pytest.raises(TypeError, match="non-str"):
        native.judged(*args[:6], ["x1", 5])
    with pytest.raises(OverflowError):
        native.judged(*args[:4], 2**70, "a1", [])
    whole: list[Any] = [*args[:5], ("quote", 6), 'a1 "b c" x.py', True]
    assert native.extract(*whole)[3] == [('"b c"', "quote", 6)]
    with pytest.raises(TypeError, match="8 arguments"):
        native.extract(*whole[:7])
    for position, wrong in [(5, ["quote", 6]), (5, ("quote",)), (6, None), (0, [])]:
        bad = list(whole)
        bad[position] = wrong
        with pytest.raises(TypeError):
            native.extract(*bad)

    class Undecided:
        def __bool__(self) -> bool:
            raise ValueError("neither")

    with pytest.raises(ValueError, match="neither"):
        native.extract(*whole[:7], Undecided())


def test_a_failing_judge_or_a_malformed_verdict_is_an_error_not_a_wrong_answer() -> None:
    native = scanner()

    def broken(shape: str) -> Any:
        raise RuntimeError(f"cannot judge {shape}")

    with pytest.raises(RuntimeError, match="cannot judge a0"):
        native.judged({}, broken, facts.Candidate, facts._PREFIXED, 10, "see a1", [])
    with pytest.raises(TypeError, match="verdict"):
        native.judged({}, lambda shape: ("kind",), facts.Candidate, facts._PREFIXED, 10,
                      "see a1", [])
    # A cached verdict is used as it is: a bad one in the cache is caught too.
    with pytest.raises(TypeError, match="verdict"):
        native.judged({"a0": 7}, facts._judge, facts.Candidate, facts._PREFIXED, 10,
                      "see a1", [])


def test_judged_fills_and_bounds_the_verdict_cache() -> None:
    """Verdicts are cached by shape (digits → 0): "a1" and "a7" cost one judgement; a cache
    over its limit is cleared before the next new shape, without changing the answer."""
    native = scanner()
    calls: list[str] = []

    def judge(shape: str) -> Any:
        calls.append(shape)
        return facts._judge(shape)

    cache: dict[str, Any] = {}
    out, prefixed, seen = native.judged(cache, judge, facts.Candidate, facts._PREFIXED, 100,
                                        "ids A-1 A-7 A-1 and/or 2024-03-15", ["x.py"])
    assert calls == ["A-0", "and/or", "0000-00-00", "x.py"]
    assert out == [("A-1", "identifier", 9), ("A-7", "identifier", 9),
                   ("2024-03-15", "date", 8), ("x.py", "file", 6)]
    assert prefixed == ["and/or"]
    assert list(seen) == ["A-1", "A-7", "and/or", "2024-03-15", "x.py"]
    assert set(cache) == {"A-0", "and/or", "0000-00-00", "x.py"}
    again, _, _ = native.judged(cache, judge, facts.Candidate, facts._PREFIXED, 1,
                                "A-3 B-4", [])
    assert again == [("A-3", "identifier", 9), ("B-4", "identifier", 9)]
    assert calls[-1] == "B-0"
    assert cache == {"B-0": ("identifier", 9)}  # cleared, then refilled
