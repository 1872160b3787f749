"""The symbol blocks of the token estimator's correction (ctxstack.tokens._model.SYMBOL_BLOCKS):
their features on known strings, and — against the real vocabularies, offline — that text
made of spinners, bars, tables, arrows and emoji is no longer under-counted by more than
the default counter's budget margin, which is what made a fitted budget overflow."""

from __future__ import annotations

import pytest

from benchmarks.symbol_corpus import symbol_texts
from ctxstack.tokens._counter import HEURISTIC_MARGIN
from ctxstack.tokens._model import (
    FREQUENT_SYMBOLS,
    SYMBOL_BLOCKS,
    SYMBOL_FEATURES,
    SYMBOL_NAMES,
    SYMBOL_WEIGHTS,
    Family,
    estimate,
    has_symbol,
    script_units,
    symbol_features,
)
from tests.exact_tokens import exact, named_counts


def features(text: str) -> dict[str, int]:
    return named_counts(text, SYMBOL_FEATURES, symbol_features)


def test_feature_names_and_weights_line_up() -> None:
    assert len(set(SYMBOL_FEATURES)) == len(SYMBOL_FEATURES) == 3 * len(SYMBOL_NAMES)
    for family in ("o200k", "cl100k"):
        assert len(SYMBOL_WEIGHTS[family]) == len(SYMBOL_FEATURES)  # type: ignore[index]
    # a repeat never lowers a count: most repeated symbols do not merge
    for weights in SYMBOL_WEIGHTS.values():
        repeats = [w for name, w in zip(SYMBOL_FEATURES, weights, strict=True)
                   if name.endswith("_repeats")]
        assert min(repeats) >= 0


def test_blocks_count_characters_runs_and_repeats() -> None:
    assert features("⠋⠙⠹ x ⠋") == {"braille_chars": 4, "braille_runs": 2}
    assert features("⠿⠿") == {"braille_chars": 2, "braille_runs": 1, "braille_repeats": 1}
    # one run of symbols of several blocks is one run, of its first character's block
    assert features("▁▂⠿") == {"shapes_chars": 2, "braille_chars": 1, "shapes_runs": 1}
    # the frequent ones form their own block wherever they are
    assert features("──── ✓") == {"frequent_chars": 5, "frequent_runs": 2,
                                  "frequent_repeats": 3}
    assert features("╾╾") == {"box_drawing_chars": 2, "box_drawing_runs": 1,
                              "box_drawing_repeats": 1}
    assert features("∮ ⌘") == {"technical_chars": 2, "technical_runs": 2}
    assert features("☂ ⭍") == {"dingbats_chars": 2, "dingbats_runs": 2}
    assert features("🦀🦀") == {"emoji_chars": 2, "emoji_runs": 1, "emoji_repeats": 1}
    assert features("𠀀𝐀") == {"astral_chars": 2, "astral_runs": 1}
    # ZWJ (general punctuation) is no symbol block: a family is three emoji runs
    assert features("👨\u200d👩\u200d👧") == {"emoji_chars": 3, "emoji_runs": 3}


def test_general_punctuation_cjk_and_ascii_have_no_symbol_feature() -> None:
    for text in ("", "plain ASCII {'k': [1]}", "— “quoted” … • ‰ €", "日本語、中文。", "привет"):
        assert symbol_features(text.encode()) == [0] * len(SYMBOL_FEATURES)
    for text in ("— “quoted” … • ‰ €", "日本語、中文。"):  # nor any script group: no correction
        assert script_units(text.encode(), "o200k") == 0
    assert symbol_features(b"\xe2\xa0") == [0] * len(SYMBOL_FEATURES)  # a cut character


def test_the_symbol_check_finds_exactly_the_blocks_lead_and_second_bytes() -> None:
    in_blocks = {(lead, second) for _name, ranges in SYMBOL_BLOCKS
                 for lead, lo, hi in ranges for second in range(lo, hi + 1)}
    for lead in range(0xC0, 0x100):
        for second in range(0x80, 0xC0):
            raw = b"x " + bytes([lead, second]) + b"\x80\x80 y"
            assert has_symbol(raw) == ((lead, second) in in_blocks), (hex(lead), hex(second))
    assert not has_symbol("plain — “text” 日本語 привет".encode())


def test_the_symbol_blocks_are_exactly_the_two_ranges_scanned_first() -> None:
    from ctxstack.tokens._scripts import _code_point_ranges

    covered: set[int] = set()
    for _name, ranges in SYMBOL_BLOCKS:
        for first, last in _code_point_ranges(ranges):
            covered.update(range(first, last + 1))
    assert covered == set(range(0x2100, 0x2C00)) | set(range(0x10000, 0x110000))


def test_frequent_symbols_are_distinct_and_in_the_blocks() -> None:
    assert len(set(FREQUENT_SYMBOLS)) == len(FREQUENT_SYMBOLS)
    for ch in FREQUENT_SYMBOLS:
        assert features(ch).get("frequent_chars") == 1, ch


SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TERMINAL_AND_CHAT = {
    "braille spinner frames": SPINNER * 20,
    "spinner log": "".join(f"{c} Installing dependencies… {i}%\n"
                           for i, c in zip(range(0, 100, 2), SPINNER * 5, strict=True)),
    "spinner frames as JSON": '{"dots": {"interval": 80, "frames": [' + ", ".join(
        f'"{a}{b}"' for a, b in zip(SPINNER, SPINNER[3:] + SPINNER[:3], strict=True)) + "]}}",
    "braille art": "⣿⣿⣿⣷⣄⠀⠀⠈⠻⣿⣿⣿⡇⢸⣿⣿⣿\n" * 20,
    "block element sparkline": "▁▂▃▄▅▆▇█▇▆▅▄▃▂▁" * 20,
    "progress bars": "".join(f"{name} [{'█' * k}{'░' * (20 - k)}] {5 * k}%\n"
                             for k, name in enumerate(("fetch", "build", "test", "lint") * 5)),
    "geometric spinner": "◐◓◑◒" * 50,
    "box-drawn table": "┌──────────┬──────┐\n│ name     │ size │\n├──────────┼──────┤\n"
                       "│ a.txt    │ 12 K │\n└──────────┴──────┘\n" * 5,
    "arrows and checks": "←↑→↓↔↕⇐⇒✓✗✔✘★☆♠♣♥♦" * 20,
    "math": "∀x∈ℝ: ∑ᵢ xᵢ² ≤ ∫₀¹ f(t)dt ≠ ∞ ⊂ ⊆ ∪ ∩ ⊕ ⊗ " * 10,
    "common emoji": "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘😗☺😚" * 10,
    "newer emoji": "".join(chr(c) for c in range(0x1FA70, 0x1FAF0)),
    "emoji sequences": "👨\u200d👩\u200d👧\u200d👦 👩\u200d💻 🏳️\u200d🌈 👍🏽 🇫🇷🇩🇪 " * 20,
    "emoji chat": "".join(f"Great job {e}! Done {e}{e}\n" for e in "🎉🚀✅🔥💯👏🙌✨" * 10),
    "CJK extension B": "".join(chr(c) for c in range(0x20000, 0x20100)),
}


@pytest.mark.parametrize(("family", "encoding"), [("o200k", "o200k_base"),
                                                  ("cl100k", "cl100k_base")])
def test_symbol_text_is_not_under_counted_beyond_the_budget_margin(family: Family,
                                                                   encoding: str) -> None:
    # A text the estimate says fills (1 - margin) of a budget must fit the budget by the
    # real tokenizer: exact * (1 - margin) <= estimate. Before the symbol blocks, the
    # spinner frames were counted 600 -> 41 and the sparkline 540 -> 61 (o200k).
    counter = exact(encoding)
    margin = HEURISTIC_MARGIN[family]
    for name, text in TERMINAL_AND_CHAT.items():
        truth, guess = counter.count_text(text), estimate(text, family)
        assert truth * (1 - margin) <= guess, (name, guess, truth)
    # the held-out synthetic layouts of every block (odd code points, eval-split words)
    for block, texts in symbol_texts("eval", 30).items():
        for text in texts:
            truth, guess = counter.count_text(text), estimate(text, family)
            assert truth * (1 - margin) <= guess, (block, guess, truth, text[:60])


@pytest.mark.parametrize(("family", "encoding"), [("o200k", "o200k_base"),
                                                  ("cl100k", "cl100k_base")])
def test_spinners_and_uncommon_symbols_are_counted_close(family: Family,
                                                         encoding: str) -> None:
    # where the characters' cost does not depend on which ones they are (Braille and
    # geometric spinners, rare emoji, CJK extension B: 2-4 byte tokens each), within 25%
    counter = exact(encoding)
    for name in ("braille spinner frames", "spinner log", "geometric spinner",
                 "newer emoji", "CJK extension B"):
        text = TERMINAL_AND_CHAT[name]
        truth, guess = counter.count_text(text), estimate(text, family)
        assert abs(guess - truth) <= 0.25 * truth, (name, guess, truth)
