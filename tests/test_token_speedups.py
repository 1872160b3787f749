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
from ctxstack import token_model
from ctxstack.errors import ConfigError
from ctxstack.token_model import (
    _TRADITIONAL_CHARS,
    ACCELERATED,
    FAMILIES,
    Family,
    estimate,
    estimator,
)
from ctxstack.tokens import HeuristicCounter

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
any_char = st.one_of(
    st.characters(exclude_categories=()),  # any code point
    st.characters(categories=["Cs"]),  # lone surrogates (rare among all code points)
    st.sampled_from(SPECIAL),
)
runs = st.lists(st.tuples(any_char, st.integers(min_value=1, max_value=3000)), max_size=6)


@needs_speedups
@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet=any_char, max_size=300))
def test_same_results_on_arbitrary_unicode(text: str) -> None:
    both(text)


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
])
def test_same_results_on_edge_cases(text: str) -> None:
    both(text)


@needs_speedups
def test_same_results_on_a_text_counted_without_the_gil() -> None:
    # ≥ 2^20 characters: the accelerator releases the GIL for the pass
    text = ("The 2024 report: 這個們 說明、ひらがな。 {\"k\": [1, 2]} 😀\n" * 30_000)
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
        _speedups.estimate(b"short", b"", b"", 1.0, "text")
    with pytest.raises(TypeError, match="5 arguments"):
        _speedups.estimate("text")  # type: ignore[call-arg]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_default_path_is_the_accelerated_one_when_built(family: Family) -> None:
    counter = HeuristicCounter(family)
    text = "def f(x):\n    return 這個 + 'ひらがな' * 3  # 2024\n" * 20
    assert counter.count_text(text) == estimate(text, family) == PURE[family](text)
    assert token_model.ACCELERATED is (token_model._SPEEDUPS is not None)
