"""The C accelerator of the default estimator gives exactly the pure-Python path's results.

``ctxstack._speedups`` is optional (built on install when a C compiler is present); both
paths are callable here through ``estimator(family, accelerated=...)``. With
``CTXSTACK_REQUIRE_SPEEDUPS=1`` (CI) an accelerator that did not build is a failure, not
a skip.
"""

from __future__ import annotations

import os
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.token_corpus import gather
from ctxstack.errors import ConfigError
from ctxstack.tokens import HeuristicCounter
from ctxstack.tokens import _model as token_model
from ctxstack.tokens._model import (
    _TRADITIONAL_CHARS,
    ACCELERATED,
    FAMILIES,
    SUB_BLOCKS,
    TWO_BYTE_BLOCKS,
    Family,
    estimate,
    estimator,
)

REQUIRED = os.environ.get("CTXSTACK_REQUIRE_SPEEDUPS") == "1"
needs_speedups = pytest.mark.skipif(
    not ACCELERATED, reason="ctxstack._speedups is not built (CTXSTACK_REQUIRE_SPEEDUPS=1 "
    "makes this a failure)")

PURE = {f: estimator(f, accelerated=False) for f in FAMILIES}


def both(text: str) -> None:
    """Both families: the accelerator's result is the pure-Python path's."""
    for family in FAMILIES:
        fast = estimator(family, accelerated=True)
        assert fast(text) == PURE[family](text), (family, text[:80])


def test_the_accelerator_is_in_use_when_required() -> None:
    if not REQUIRED:
        pytest.skip("CTXSTACK_REQUIRE_SPEEDUPS is not set")
    assert ACCELERATED, "ctxstack._speedups did not build or does not match this model"
    from ctxstack import _speedups

    assert _speedups.LAYOUT == token_model._LAYOUT
    for family in FAMILIES:  # the default estimator (the counter's) is the C function
        default = estimator(family)
        assert isinstance(default, partial)
        assert default.func is _speedups.estimate
        assert HeuristicCounter(family)._estimate.func is _speedups.estimate  # type: ignore[attr-defined]


def test_the_pure_path_is_callable_whatever_is_built() -> None:
    count = estimator("o200k", accelerated=False)
    assert count("") == 0
    assert count("hello world") >= 1
    assert count("0" * 800) >= 267  # the digit floor


def test_asking_for_a_missing_accelerator_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(token_model, "_SPEEDUPS", None)  # as if it had not built
    with pytest.raises(ConfigError, match="_speedups is not built"):
        estimator("o200k", accelerated=True)
    assert estimator("o200k", accelerated=False)("abc") == PURE["o200k"]("abc")


# Characters of every class and of the model's special cases: ASCII classes, digits,
# Latin-1 and other two-byte, symbols, kana, Han (simplified and the traditional set),
# full-width forms, other three-byte scripts, astral, lone surrogates, NUL.
SPECIAL = ("aZ09 \t\n\r_\"'`()[]{}<>.,;:!?\x00\x7f\xa0éÿĀߟࠀ\u2014→"
           "、。「」ひらがなカタカナ中文字日本語" + _TRADITIONAL_CHARS +
           "，！？\uffff\ufeffไทย한국\U0001f600\U00010000\U0010ffff\ud800\udfff\udbff")


def block_chars(lead: int, seconds: tuple[int, ...]) -> str:
    """Every character whose UTF-8 encoding starts with lead byte ``lead`` followed by one
    of ``seconds`` (a sub-block or two-byte block of the script correction)."""
    width = 2 if lead < 0xE0 else 3
    out = []
    for second in seconds:
        for rest in (range(0x80, 0xC0) if width == 3 else (None,)):
            raw = bytes([lead, second] if rest is None else [lead, second, rest])
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                continue  # e.g. E0 80 xx, an overlong form
    return "".join(out)


# Characters the per-script correction counts: one per group (by UTF-8 lead byte: Latin-1,
# other accented Latin and combining marks, Greek, Cyrillic, Armenian and Hebrew, Arabic,
# Indic and Thai, U+1000-U+1FFF, Hangul and other U+A000-U+DFFF, four-byte), every
# character of every block it weighs apart, and the boundaries between groups and
# blocks; emoji sequences (ZWJ, skin tones, flags, keycaps, variation selectors).
SCRIPT_SPECIAL = (
    "\xc0\xdeßäöüÀÉÎÕÜłąĳſ\u0300\u036f\u0370ΑΩάωϿЀЯабя\u04ffԀ\u0530Աשאעברית\u05ff"
    "\u0600سلامدنیا\u07ffݐ\u0800ࣿऀहिन्दीবাংলাਗੁਰગુજଓଡ଼ிதமிழ்తెలుగుಕನ್ನಡമലയാളംසිංහලไทยລາວ\u0fff"
    "\u1000မြန်ქართულიሀ\u1780ខ្មែរTiếngViệt\u1fff\ua000한국어\ud7ff\ud800\udbff\udc00\udfff\ue000"
    "👨\u200d👩\u200d👧👍🏽🇫🇷1\ufe0f\u20e3❤\ufe0f\U00010000\U0001f9d1\U0010ffff"
)
# The symbol blocks' characters as used: spinners, bars, rules and tables (repeats), arrows
# and checks inline, and each block's first and last character.
SYMBOL_SPECIAL = ("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏⠀⣿█░▒▓▁▂▃─━═│┌┐└┘├┤┬┴┼╔╗■□●◐◓◑◒✓✔✗★→←⇒≤≥∞"
                  "\u2100\u24ff\u2500\u257f\u2580\u25ff\u2600\u27ff\u2800\u28ff\u2900\u2bff"
                  "\u2c00\u2000\u20ff\U0001f000\U0001ffff\U0001f600\U00010000\U0002a6d6")
SCRIPT_BLOCK_CHARS = "".join(block_chars(lead, seconds)
                             for _name, lead, seconds in SUB_BLOCKS + TWO_BYTE_BLOCKS)
any_char = st.one_of(
    st.characters(exclude_categories=()),  # any code point
    st.characters(categories=["Cs"]),  # lone surrogates (rare among all code points)
    st.sampled_from(SPECIAL),
    st.sampled_from(SCRIPT_SPECIAL),
    st.sampled_from(SCRIPT_BLOCK_CHARS),
    st.characters(min_codepoint=0x80, max_codepoint=0x7FF),  # every two-byte character
    st.characters(min_codepoint=0x800, max_codepoint=0x1FFF),  # Indic, Thai, E1
    st.characters(min_codepoint=0xA000, max_codepoint=0xDFFF),  # Hangul, surrogates
    st.characters(min_codepoint=0x2000, max_codepoint=0x2FFF),  # the symbol blocks
    st.characters(min_codepoint=0x1F000, max_codepoint=0x1FFFF),  # emoji
    st.sampled_from(SYMBOL_SPECIAL),
)
runs = st.lists(st.tuples(any_char, st.integers(min_value=1, max_value=3000)), max_size=6)


@needs_speedups
@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=any_char, max_size=300))
def test_same_results_on_arbitrary_unicode(text: str) -> None:
    both(text)


@needs_speedups
@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.text(alphabet=st.sampled_from(SCRIPT_SPECIAL + SCRIPT_BLOCK_CHARS
                                                      + SYMBOL_SPECIAL),
                              min_size=1, max_size=12), max_size=40),
       gaps=st.lists(st.sampled_from([" ", "", "\n", ", ", "\x00", "x", "—", "日"]),
                     min_size=1, max_size=4))
def test_same_results_on_text_in_other_scripts(words: list[str], gaps: list[str]) -> None:
    # words of the correction's scripts: runs, run boundaries between groups, blocks
    both("".join(w + gaps[i % len(gaps)] for i, w in enumerate(words)))


@needs_speedups
@settings(max_examples=150, deadline=None)
@given(pieces=runs, tail=st.text(alphabet=any_char, max_size=40))
def test_same_results_on_long_runs(pieces: list[tuple[str, int]], tail: str) -> None:
    # long runs of one class: digit floors, the 8-characters floor, negative pair sums
    # (newline runs), the nibble-sum chunking of the pure path (> 4,367 characters)
    both("".join(ch * n for ch, n in pieces) + tail)


@needs_speedups
@pytest.mark.parametrize("text", [
    "", "a", " ", "\x00", "\ud800", "\U0001f600", "這", "這個們", "0" * 800, "\n" * 9000,
    "x" * 2000, "這" * 4369, "日本語" * 5000 + "這個" + "x" * 3,
    "é", "ÿ" * 9000, "привет", "МИР", "नमस्ते", "ไทย", "한국어", "\ud800\udfff",
    "👨\u200d👩\u200d👧", "👍🏽 🇫🇷", "x\x00ü\x00", "ß" * 5000 + "日本" + "Ж" * 4400,
    "Tiếng Việt", "ქართული ენა", "\U0010ffff\U00010000",
    "⠋⠙⠹⠸" * 50, "─" * 5000, "█" * 10 + "░" * 10, "┌──┐\n│ab│\n└──┘", "✓ → ★",
    "😀" * 3 + "\u200d" + "🔥", "⠋ x ⠋⠋", "𠀀𠀀𝐀",
    # symbol-class punctuation only (the accelerator skips its correction pass), then with
    # one symbol block character at either end
    "他说：“中文”——好。" * 50, "“quoted” — text…", "⠋他说：“中文”", "他说：“中文”✓", "\u2100", "\u2bff",
    "\u20ff\u2c00",
])
def test_same_results_on_edge_cases(text: str) -> None:
    both(text)


@needs_speedups
def test_same_results_on_a_text_counted_without_the_gil() -> None:
    # ≥ 2^20 characters: the accelerator releases the GIL for the pass
    text = ("The 2024 report: 這個們 說明、ひらがな。 {\"k\": [1, 2]} 😀 привет नमस्ते\n"
            * 25_000)
    assert len(text) >= 1 << 20
    both(text)


@needs_speedups
def test_same_results_on_the_benchmark_corpus() -> None:
    corpus, _ = gather("eval", 40)
    fit, _ = gather("fit", 15)
    texts = [t for pool in (*corpus.values(), *fit.values()) for t in pool]
    assert len(texts) >= 100
    for text in texts:
        both(text)


@needs_speedups
def test_the_accelerator_rejects_what_is_not_a_text_or_its_tables() -> None:
    from ctxstack import _speedups

    count = estimator("o200k", accelerated=True)
    with pytest.raises(TypeError, match="expected str"):
        count(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="classes"):
        _speedups.estimate(b"short", b"", b"", 1.0, b"", b"", b"", b"", "text")
    with pytest.raises(TypeError, match="9 arguments"):
        _speedups.estimate("text")  # type: ignore[call-arg]
    args = count.args  # type: ignore[attr-defined]
    for i, name in ((4, "groups"), (5, "blocks"), (6, "script_weights"), (7, "frequent")):
        bad = list(args)
        bad[i] = b"short"
        with pytest.raises(TypeError, match=name):
            _speedups.estimate(*bad, "text")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_default_path_is_the_accelerated_one_when_built(family: Family) -> None:
    counter = HeuristicCounter(family)
    text = "def f(x):\n    return 這個 + 'ひらがな' * 3  # 2024\n" * 20
    assert counter.count_text(text) == estimate(text, family) == PURE[family](text)
    assert token_model.ACCELERATED is (token_model._SPEEDUPS is not None)
