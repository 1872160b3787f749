"""A vocabulary-free model of how BPE tokenizers split text: the default token estimator.

Byte-pair-encoding tokenizers (OpenAI's ``o200k_base`` / ``cl100k_base`` and their
relatives) first cut text into *pre-tokens* — runs of letters with one leading space or
punctuation mark, numbers of at most three digits, runs of punctuation, runs of
whitespace, newlines — and then merge bytes inside each pre-token into vocabulary entries.
So a text's token count is well predicted from its characters' classes and from where the
class changes: a common word is one token whatever its length (the cost is at the word's
boundary), a run of punctuation is a few tokens, an identifier pays at every ``_`` or
case change, a Chinese character is about one token in ``cl100k_base`` but fewer in
``o200k_base``, which learnt many multi-character Chinese words.

The model: every character gets one of 16 classes (:data:`CLASSES`), and the estimate is
the sum, over the text's characters, of a weight that depends on the pair (this
character's class, the next character's class) — 256 weights per tokenizer family, plus
one for frequent traditional-Chinese characters (``o200k_base`` splits traditional text
more finely than simplified). The weights are fitted by ``benchmarks/fit_tokens.py`` on
texts the accuracy benchmark never evaluates (see ``benchmarks/token_corpus.py``).

Other scripts: the 16 classes put every two-byte character in one class and every
three-byte one outside CJK in another, and the pair weights were fitted on English, code,
JSON, Chinese and Japanese only — so Hindi or Thai were counted 2–3.5x too high and
Greek or Hebrew 25–50% too low. Text with such characters gets a linear correction on top
(:func:`script_correction`): per script group (by UTF-8 lead byte), a weight per
character and per run of characters, plus per block where one lead byte covers scripts
that tokenize differently (Indic scripts, Thai, Georgian…; capitals, German and Ukrainian
letters), plus a weight per ASCII letter of text that accented Latin letters mark as
German, French, Polish… (each vouches for up to :data:`VOUCH` letters): those languages'
words are mostly ASCII letters that the vocabularies split more finely than English ones,
and German was counted 5% low at the median. Fitted after the pair weights, which it
leaves unchanged, on Debian's translations (``benchmarks/fit_tokens.py --scripts``; the
manual pages read with their roff glyph escapes turned into the accented letters they
name). ASCII text never pays for it, and
text without those lead bytes (most Chinese and Japanese) skips it after four ``in``
tests on the class digits.

Decomposed text (Unicode normal form D: an accent as a combining mark after its letter,
a Korean syllable as its jamo, as macOS file names and some tools write it) costs the
vocabularies far more than composed text; combining marks are a group of their own and
jamo a block, fitted last on the decomposed forms of the fit texts (Korean was counted
77% low, Greek, Polish and Vietnamese 11–25% low; composed text is counted as before).
ASCII control characters other than whitespace and ESC (binary read as text) are in the
``four_byte`` class: as punctuation they were counted 55–75% low.

Files as coding agents' tools show them — line-numbered (a tab or an arrow after the
number) or inside a JSON string — text with tabs between fields (tab-separated tables,
tab-aligned configuration) and command output in columns aligned with spaces (``ls -la``,
``ps aux``, ``pip list``) get a correction of their own (:mod:`ctxstack.tokens._listings`):
the tab, backslash and arrow counts paid only by text with one of those, the runs of
spaces only by text past a gate on the first 512 (class, next class) pairs.

Binary written as base64 (a notebook's PNG, a data URI, a lockfile's hashes, a JWT)
gets a correction of its own (:mod:`ctxstack.tokens._encoded`): the pair model counted it
11–18% low, and up to 46% low for zero-filled tables. Text is looked at for it only past a
gate — the pair model's own rate (a quarter token per character: most prose and code
stop there), then one (lower, upper) pair in 25 of every 7th pair, which base64 has and
prose and code do not.

Symbols: the pair model gave a run of symbols ~0.2 token a character, where a Braille
spinner frame costs three byte tokens in both vocabularies and most arrows, shapes,
dingbats, rare emoji and CJK extension B characters 1.5–4: spinner output was counted
10–15x low and could overflow a budget that the estimate said it fitted. The same
correction has a weight per character, per run and per repeat of each symbol block
(:data:`SYMBOL_BLOCKS`; the characters that are one ``o200k_base`` token each,
:data:`FREQUENT_SYMBOLS`, form a block of their own), fitted on synthetic layouts of the
blocks' characters (``benchmarks/fit_tokens.py --symbols``) and biased upward: an
under-count is what makes a budget overflow. Rules of merging characters (``────``) and
common emoji remain over-counted (safe, not exact).

Speed: no Python code visits a character. The UTF-8 bytes lose their continuation bytes
(one byte per character) and are mapped to their class, written as one hex digit, by one
``bytes.translate``; ``binascii.unhexlify`` joins each two digits into one byte, so two
calls (the digits, and the digits shifted by one) give every (class, next class) pair as
a byte, with no big-integer round trip; two more ``translate`` calls map each pair to the
high and the low nibble of its weight (in 1/64 token units) and ``zlib.adler32`` sums each
in C (its low half is 1 + the byte sum modulo 65521: nibble sums cannot wrap below 4,368
bytes, so a text of up to that many characters costs two calls and no chunk loop).
Text with Han characters also pays one regular-expression scan over every 4th character
of the span from its first to its last Han character.
Text in other scripts pays :func:`script_features`: two ``translate`` calls, a ``count``
per group present and, for Indic, Thai, Georgian, Cyrillic, Greek and Latin-1 letters,
one interleaved block pass (two ``translate``, two strided slice copies, one
``unhexlify``, single-byte counts) — Cyrillic or Hindi text costs about 2–4x what the
pair pass alone did, still far from the exact tokenizers. Text with a symbol-class or
four-byte character also pays one regular-expression search for the symbol blocks and,
only if one is there, :func:`symbol_features` (a few scans of the decoded text).
(An earlier version marked 、。「」 apart from kana with a ``bytes.replace``; refitted
without it, the Chinese and Japanese errors did not change, so the pass was dropped.)

Pure Python, no compiled code of its own. Measured by ``benchmarks/bench_tokens_accuracy.py``
(cold counts in process CPU time, CPython 3.11, 2 shared cores), these passes count
94–191 MB/s of UTF-8, 12–22× tiktoken's ``o200k_base`` encode in the same run: prose
12.7×, code 12.2×, JSON tool output 17.5×, Chinese 14.6×, Japanese 21.7×, mixed chat
19.2×. The target is ≥ 8× on every kind; the narrowest margin seen is English prose on
the previous report's machine, 8.8× (225 MB/s against 25.7), where tiktoken ran faster.
Counts are cached per message, so only new text is ever estimated. An optional C
extension computed the same model 3–4× faster; it was removed (issue 27): the speed was
not needed, and installing ctxstack needs no compiler.
"""

from __future__ import annotations

import re
from binascii import unhexlify as _unhex
from collections.abc import Callable, Iterator
from functools import partial
from itertools import repeat
from operator import and_ as _and
from typing import Final, Literal
from zlib import adler32 as _adler32

from ctxstack.tokens._encoded import _LOWER_UPPER, GATE_SHARE, GATE_STRIDE, RATE_FLOOR, RUN
from ctxstack.tokens._encoded import ENCODED_FEATURES as ENCODED_FEATURES
from ctxstack.tokens._encoded import ENCODED_WEIGHTS as ENCODED_WEIGHTS
from ctxstack.tokens._encoded import encoded_features as encoded_features
from ctxstack.tokens._encoded import encoded_units as encoded_units
from ctxstack.tokens._listings import (
    _ARROW,
    _BACKSLASH,
    _NEWLINE_SPACE,
    _SPACE_PAIR,
    _TAB,
    COLUMN_SAMPLE,
    COLUMN_SHARE,
    INDENT_SHARE,
    column_units,
)
from ctxstack.tokens._listings import LISTING_FEATURES as LISTING_FEATURES
from ctxstack.tokens._listings import LISTING_WEIGHTS as LISTING_WEIGHTS
from ctxstack.tokens._listings import listing_features as listing_features
from ctxstack.tokens._listings import listing_units as listing_units
from ctxstack.tokens._scripts import _GROUP_LEADS, _group_units, _symbol_units
from ctxstack.tokens._scripts import FAMILIES as FAMILIES
from ctxstack.tokens._scripts import FREQUENT_SYMBOLS as FREQUENT_SYMBOLS
from ctxstack.tokens._scripts import SCRIPT_FEATURES as SCRIPT_FEATURES
from ctxstack.tokens._scripts import SCRIPT_GROUPS as SCRIPT_GROUPS
from ctxstack.tokens._scripts import SCRIPT_SCALE as SCRIPT_SCALE
from ctxstack.tokens._scripts import SCRIPT_WEIGHTS as SCRIPT_WEIGHTS
from ctxstack.tokens._scripts import SUB_BLOCKS as SUB_BLOCKS
from ctxstack.tokens._scripts import SYMBOL_BLOCKS as SYMBOL_BLOCKS
from ctxstack.tokens._scripts import SYMBOL_FEATURES as SYMBOL_FEATURES
from ctxstack.tokens._scripts import SYMBOL_NAMES as SYMBOL_NAMES
from ctxstack.tokens._scripts import SYMBOL_WEIGHTS as SYMBOL_WEIGHTS
from ctxstack.tokens._scripts import TWO_BYTE_BLOCKS as TWO_BYTE_BLOCKS
from ctxstack.tokens._scripts import VOUCH as VOUCH
from ctxstack.tokens._scripts import Family as Family
from ctxstack.tokens._scripts import has_symbol as has_symbol
from ctxstack.tokens._scripts import script_correction as script_correction
from ctxstack.tokens._scripts import script_features as script_features
from ctxstack.tokens._scripts import script_units as script_units
from ctxstack.tokens._scripts import symbol_features as symbol_features

CLASSES: Final[tuple[str, ...]] = (
    "lower", "upper", "digit", "space", "newline", "underscore", "quote", "bracket",
    "punct", "two_byte", "symbol", "kana", "han", "cjk_punct", "other3", "four_byte",
)
"""Character classes, by number: ASCII ones, then by UTF-8 lead byte (see _class_table)."""

SCALE: Final = 64
OFFSET: Final = 64
"""Pair weights are in 1/SCALE token units, stored as one byte (units + OFFSET, 0–255): a
weight may be negative (−1 to +2.98 tokens) — e.g. a space that merges into the next word."""
_CHUNK: Final = 65519 // 15  # nibbles whose sum (+1) can never reach adler32's modulus

CHARS_PER_TOKEN_CEILING: Final = 8
"""No real text averages more than 8 characters per token (English ≈ 4.5, code ≈ 3.5,
JSON ≈ 3, CJK < 1.5); degenerate text does get close — ``"x" * 2000`` is 250 o200k
tokens — and the pair model, which never saw such runs, would say far less."""

DIGITS_PER_TOKEN_CEILING: Final = 3
"""Both vocabularies' pre-tokenizers cut a run of ASCII digits into pieces of at most three
digits that never merge with anything else, and every such piece is one token: a run of
``L`` digits costs exactly ⌈L / 3⌉ tokens, whatever surrounds it. The estimate follows
that: the (digit, digit) pair weighs nothing, the pair at a run's end — (digit, next
class), one per run — carries the run's first piece (it was fitted with the rest counted
so: ``benchmarks/fit_tokens.py --digits``, on the fit texts and number-heavy tool output),
and :func:`digit_pieces` adds the ⌊(L − 1) / 3⌋ pieces after it (exactly for the usual
lengths, a piece over for some). The pair model alone charged digits pair by pair, which
cannot follow ⌈L / 3⌉: a JSON list of 10-digit numbers (Unix times, phone numbers) was
counted 28% low — more than the default margin, so a budget could overflow — and ISO
timestamps 25% high. (That is why the estimate used to be floored at ⌈digits / 3⌉; with
the pieces counted, :func:`lower_bound` of all the characters is its only floor.)"""


def _class_table() -> bytes:
    table = bytearray(256)
    for i in range(256):
        ch = chr(i)
        if "a" <= ch <= "z":
            cls = "lower"
        elif "A" <= ch <= "Z":
            cls = "upper"
        elif "0" <= ch <= "9":
            cls = "digit"
        elif ch in " \t\f\v":
            cls = "space"
        elif ch in "\r\n":
            cls = "newline"
        elif ch == "_":
            cls = "underscore"
        elif ch in "\"'`":
            cls = "quote"
        elif ch in "()[]{}<>":
            cls = "bracket"
        elif (i < 0x20 and i != 0x1B) or i == 0x7F:
            # control characters (NUL, BEL, backspace…; ESC stays punctuation: terminal
            # colour codes are common and cheap) are a token or half a token each where
            # punctuation pairs weigh a fifth: binary read as text was under-counted 55–75%
            cls = "four_byte"
        elif i < 0x80:
            cls = "punct"
        elif 0xC2 <= i <= 0xDF:
            cls = "two_byte"  # Latin supplements, Greek, Cyrillic, Hebrew, Arabic…
        elif i == 0xE2:
            cls = "symbol"  # U+2000–U+2FFF: general punctuation, arrows, box drawing…
        elif i == 0xE3:
            cls = "kana"  # U+3000–U+3FFF: 、。「」, hiragana, katakana, bopomofo…
        elif 0xE4 <= i <= 0xE9:
            cls = "han"  # U+4000–U+9FFF: CJK unified ideographs
        elif i == 0xEF:
            cls = "cjk_punct"  # U+F000–U+FFFF: full-width forms (，！？：), compatibility
        elif 0xE0 <= i <= 0xEE:
            cls = "other3"  # Indic, Thai, Hangul, other three-byte scripts
        else:
            cls = "four_byte"  # emoji, rare ideographs, stray bytes (and controls, above)
        table[i] = CLASSES.index(cls)
    return bytes(table)


_CLASS: Final = _class_table()
_HEX_CLASS: Final = bytes(b"0123456789abcdef"[c] for c in _CLASS)
"""Byte → its class as one lowercase hex digit (what ``binascii.unhexlify`` pairs up)."""
_HAN_HEX: Final = b"0123456789abcdef"[CLASSES.index("han")].to_bytes(1, "big")
_DIGIT_HEX: Final = b"0123456789abcdef"[CLASSES.index("digit")].to_bytes(1, "big")
_CONTINUATION: Final = bytes(range(0x80, 0xC0))
_DIGIT_PAIR: Final = bytes([CLASSES.index("digit") * 17])
"""The pair byte (digit, digit) of :func:`_pairs`."""
_FOUR_DIGITS: Final = _DIGIT_HEX * 4
_SEVEN_DIGITS: Final = _DIGIT_HEX * 7
# Frequent characters written differently in traditional Chinese (and mostly not in
# Japanese either).
_TRADITIONAL_CHARS: Final = (
    "這個們為說時會來對發與從檔於後統開無當將關設經過樣還麼動體數義長間問題實現認記錄"
    "態較閱讀據則應該環變網頁標準選項輸處並單屬員執結構際雙節鍵"
)
_TRADITIONAL: Final = re.compile(f"[{_TRADITIONAL_CHARS}]")
TRADITIONAL_STRIDE: Final = 4
"""The traditional-character feature looks at every 4th character only (see
:func:`traditional_count`)."""


def _hex_classes(text: str) -> tuple[bytes, bool]:
    """One hex digit per character, its class; and whether the text has Han characters."""
    if text.isascii():
        return text.encode("ascii").translate(_HEX_CLASS), False
    raw = text.encode("utf-8", "surrogatepass")
    hexes = raw.translate(_HEX_CLASS, _CONTINUATION)
    return hexes, _HAN_HEX in hexes


def _pairs(hexes: bytes) -> bytes:
    """One byte per character: its class (high nibble) | the next one's (low nibble; 0
    after the last character) — characters at even positions first, then odd ones.
    ``unhexlify`` joins two hex digits into one byte; the odd positions are the same
    digits shifted by one."""
    n = len(hexes)
    if n & 1:
        return _unhex(hexes + b"0") + _unhex(hexes[1:n])
    return _unhex(hexes) + _unhex(hexes[1:] + b"0")


def pair_units(pairs: bytes, family: Family) -> int:
    """The pair model's sum over ``pairs`` (:func:`pair_codes`), in 1/:data:`SCALE` token —
    the ``units`` the estimator computes with ``adler32``, here with a plain ``sum``."""
    high, low = _TABLES[family]
    return 16 * sum(pairs.translate(high)) + sum(pairs.translate(low)) - OFFSET * len(pairs)


def pair_codes(text: str) -> bytes:
    """One byte per character: its class (high nibble) | the next character's (low
    nibble), in the order of :func:`_pairs` (even positions, then odd).

    The last character's "next" class is 0. ``collections.Counter(pair_codes(t))`` is the
    feature vector the weights are fitted on.
    """
    return _pairs(_hex_classes(text)[0]) if text else b""


def digit_pieces(hexes: bytes, pairs: bytes | None = None) -> int:
    """About Σ ⌊(L − 1) / 3⌋ over the runs of digits in a text (its class digits
    ``hexes``; ``pairs`` its :func:`_pairs`, when the caller has them): the pieces each
    run costs beyond its first (see :data:`DIGITS_PER_TOKEN_CEILING`), for two
    non-overlapping counts, Σ ⌊L / 4⌋ + Σ ⌊L / 7⌋.

    Exact for runs of 1–7, 10, 11 and 13 digits (short numbers, years, phone numbers,
    Unix times in seconds and milliseconds); one piece over for 8, 9, 12 and some longer
    runs, and about 18% over on very long ones — never under, so never a cause of
    overflow. The exact sum needs each run's length (a regular expression over the text,
    or a pass per threshold), which cost more than the rest of the estimate together.

    Text with no run of four digits mostly pays one ``find``: such a run has a (digit,
    digit) pair at an even position, in the first half of ``pairs`` (a memchr). The
    counts then cover the span from the first digit to the last (numbers cluster).
    """
    if pairs is None:
        pairs = _pairs(hexes) if hexes else b""
    if pairs.find(_DIGIT_PAIR, 0, (len(hexes) + 1) // 2) < 0:
        return 0
    first, end = hexes.find(_DIGIT_HEX), hexes.rfind(_DIGIT_HEX) + 1
    total = hexes.count(_FOUR_DIGITS, first, end)
    if total:
        total += hexes.count(_SEVEN_DIGITS, first, end)
    return total


def _chunked_sum(data: bytes) -> int:
    """The sum of ``data``'s bytes, each at most 15, in C: ``adler32``'s low half is 1 +
    that sum modulo 65521, exact over chunks of at most ``_CHUNK`` bytes (cut, checksummed
    and masked by ``map``: no Python loop)."""
    n = len(data)
    cuts = map(slice, range(0, n, _CHUNK), range(_CHUNK, n + _CHUNK, _CHUNK))
    sums: Iterator[int] = map(_and, map(_adler32, map(data.__getitem__, cuts)), repeat(0xFFFF))
    return sum(sums) - (n + _CHUNK - 1) // _CHUNK


def traditional_count(text: str, hexes: bytes | None = None) -> int:
    """Frequent traditional-only Chinese characters in ``text``, estimated from every
    :data:`TRADITIONAL_STRIDE`-th character between its first and its last Han character
    (C-speed ``find``/``rfind`` on the class digits, then a slice), times the stride.

    Counting all of them costs a regular-expression step per character, more than the
    rest of the estimate together; the sample is unbiased and, on text with any real
    amount of traditional Chinese, close (the fitted weight is ~1 token per character).
    ``hexes``: the text's class digits, when the caller has them.
    """
    if text.isascii():
        return 0
    if hexes is None:
        hexes = _hex_classes(text)[0]
    first = hexes.find(_HAN_HEX)
    if first < 0:
        return 0
    last = hexes.rfind(_HAN_HEX)
    sample = text[first:last + 1:TRADITIONAL_STRIDE]
    return TRADITIONAL_STRIDE * len(_TRADITIONAL.findall(sample))


# Fitted by benchmarks/fit_tokens.py against tiktoken's o200k_base and cl100k_base counts
# of the FIT split of benchmarks/token_corpus.py: standard-library docstrings and code,
# installed distributions' READMEs, licences and code, JSON serialisations of package
# metadata and directory listings, and Debian's manpages-ja / manpages-zh pages — each
# restricted to the files or distributions whose name hashes even; the accuracy benchmark
# evaluates on the other half only. Row = this character's class, column = the next
# character's class (CLASSES order); values in 1/SCALE tokens, −OFFSET to 255 − OFFSET.
# Regenerate with
# `python -m benchmarks.fit_tokens --write`; the pairs at a digit run's ends (row and
# column "digit") were refitted last by `--digits`, on number-heavy tool output too.
PAIR_WEIGHTS: Final[dict[Family, tuple[tuple[int, ...], ...]]] = {
    "o200k": (
        (3, 51, 27, 47, 85, 38, 39, 30, 51, 57, 34, 34, 91, 11, 42, 42),
        (15, 9, 151, 30, 111, 44, 95, 47, 32, 55, 49, 50, 61, 65, 50, 50),
        (107, 89, 0, 90, 110, 119, 107, 67, 104, 96, 97, 131, 125, 98, 96, 96),
        (7, -4, 35, 1, 34, 82, 25, 47, 27, 30, 50, 65, 48, 30, 35, 28),
        (67, 62, 12, 96, -9, 85, 62, 64, 42, 51, 51, 61, 22, 44, 51, 51),
        (16, 11, 22, 21, 48, 2, 33, 28, 79, 28, 29, 27, 28, 28, 28, 28),
        (61, 36, -27, 65, 11, 2, 18, -8, 17, 24, 24, 18, 60, 24, 24, 24),
        (57, 57, 112, 38, -19, 25, 26, 17, 31, 35, 35, 37, 35, 30, 40, 35),
        (46, 48, 21, 48, 13, 75, -7, 59, 10, 41, 49, 56, 43, 42, 41, 41),
        (52, 33, 32, 30, 33, 33, 33, 33, 32, 11, 33, 35, 33, 33, 33, 33),
        (36, 41, 33, 55, 42, 43, 42, 43, 48, 42, 13, 35, 46, 40, 42, 42),
        (5, 38, 68, 19, 25, 45, 37, 97, 37, 47, 42, 42, 68, 52, 45, 45),
        (79, 52, -4, 40, 102, 60, 90, 81, 77, 60, 57, 33, 46, 85, 60, 60),
        (80, 87, 52, 52, 88, 56, 45, 54, 53, 56, 57, 44, -7, 49, 56, 56),
        (87, 87, 32, 87, 87, 87, 87, 93, 87, 87, 87, 87, 87, 87, 105, 87),
        (88, 88, 32, 82, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88),
    ),
    "cl100k": (
        (3, 39, 36, 50, 86, 33, 43, 32, 50, 55, 29, 25, 110, 8, 42, 42),
        (23, 10, 178, 25, 105, 33, 99, 44, 40, 60, 55, 56, 50, 87, 53, 53),
        (99, 85, 0, 85, 121, 115, 110, 62, 101, 95, 96, 126, 132, 95, 96, 96),
        (5, -6, 36, 0, 34, 86, 32, 54, 25, 36, 55, 85, 49, 35, 39, 40),
        (56, 49, 5, 93, -21, 90, 67, 69, 35, 48, 51, 59, 31, 35, 48, 48),
        (22, 7, 21, 4, 42, 5, 25, 29, 74, 25, 26, 23, 25, 25, 25, 25),
        (58, 29, -25, 53, 22, -1, 14, -18, 9, 19, 20, 9, 35, 18, 19, 19),
        (54, 50, 116, 40, -9, 27, 31, 14, 24, 37, 39, 39, 50, 32, 40, 37),
        (45, 46, 24, 51, 18, 74, -7, 62, 9, 41, 40, 61, 38, 40, 41, 41),
        (61, 42, 31, 42, 42, 42, 42, 42, 41, 27, 42, 43, 43, 42, 42, 42),
        (31, 38, 32, 53, 40, 39, 38, 38, 38, 38, 14, 26, 39, 37, 38, 38),
        (16, 56, 54, 28, 37, 54, 48, 98, 56, 55, 50, 62, 70, 65, 54, 54),
        (85, 55, -19, 63, 107, 68, 80, 99, 96, 68, 63, 46, 63, 97, 68, 68),
        (116, 127, 40, 69, 92, 79, 66, 77, 76, 79, 75, 75, 21, 69, 79, 79),
        (77, 77, 32, 77, 77, 77, 77, 80, 77, 77, 77, 77, 77, 77, 87, 77),
        (97, 97, 32, 99, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97),
    ),
}
TRADITIONAL_WEIGHT: Final[dict[Family, float]] = {"o200k": 1.0256, "cl100k": 2.0818}


def _weight_tables(family: Family) -> tuple[bytes, bytes]:
    """Pair byte (this class << 4 | next class) → its weight + OFFSET, split in two
    tables: the high nibble and the low nibble (see :func:`estimate`)."""
    rows = PAIR_WEIGHTS[family]
    units = [rows[code >> 4][code & 15] + OFFSET for code in range(256)]
    return bytes(u >> 4 for u in units), bytes(u & 15 for u in units)


_TABLES: Final[dict[Family, tuple[bytes, bytes]]] = {f: _weight_tables(f) for f in FAMILIES}


# The classes that hold the script groups' lead bytes: text with none of them (ASCII, most
# CJK) skips the correction.
_SCRIPT_CLASSES: Final = tuple(sorted(
    {_CLASS[b] for lo, hi in _GROUP_LEADS for b in range(lo, hi + 1)}
    | {_CLASS[lead] for _name, ranges in SYMBOL_BLOCKS for lead, _lo, _hi in ranges}))


def estimator(family: Family) -> Callable[[str], int]:
    """:func:`estimate` for ``family`` as one function, what the default counter calls.

    The fitted tables are bound in a closure with the ASCII path inlined (a counted text
    pays one Python call, not four). It sums the pairs' weights as 16 × (sum of high
    nibbles) + (sum of low nibbles): a nibble sum stays below adler32's modulus over 4,368
    bytes, so texts up to that length cost two ``adler32`` calls and no chunking.
    """
    high, low = _TABLES[family]
    traditional = TRADITIONAL_WEIGHT[family]
    unhex, adler, hex_class, chunk = _unhex, _adler32, _HEX_CLASS, _CHUNK
    groups, symbols = partial(_group_units, family=family), partial(_symbol_units,
                                                                    family=family)
    listings = partial(listing_units, family=family)
    columns = partial(column_units, family=family)
    space_pair, newline_space = _SPACE_PAIR, _NEWLINE_SPACE
    column_share, indent_share, head = COLUMN_SHARE, INDENT_SHARE, COLUMN_SAMPLE
    encoded = partial(encoded_units, family=family, gated=True)
    run, rate_floor, stride, share = RUN, RATE_FLOOR, GATE_STRIDE, GATE_SHARE
    lower_upper = _LOWER_UPPER
    ratio = SCRIPT_SCALE // SCALE
    two_byte, symbol, other3, four_byte = (b"0123456789abcdef"[c].to_bytes(1, "big")
                                           for c in _SCRIPT_CLASSES)
    bias = 17 + OFFSET  # adler32's two initial 1s (the high one counts 16 times) + offset

    def count(text: str) -> int:
        if not text:
            return 0
        if text.isascii():
            raw = text.encode("ascii")
            hexes, han = raw.translate(hex_class), False
            # memchr: most text has neither
            correction = listings(raw, arrows=False) if _TAB in raw or _BACKSLASH in raw else 0
        else:
            raw = text.encode("utf-8", "surrogatepass")
            hexes = raw.translate(hex_class, _CONTINUATION)
            han = _HAN_HEX in hexes
            # the script groups' lead bytes all fall in the two-byte, other-three-byte and
            # four-byte classes, the symbol blocks' in the symbol and four-byte ones: text
            # with none of those (most CJK) skips the correction, text whose only
            # non-ASCII characters are punctuation (— “ ”) its group part
            four = four_byte in hexes
            correction = groups(raw) if (two_byte in hexes or other3 in hexes or four) else 0
            symbols_in = four or symbol in hexes
            if symbols_in:
                correction += symbols(raw)
            arrows = symbols_in and _ARROW in raw  # an arrow is a symbol-class character
            if arrows or _TAB in raw or _BACKSLASH in raw:
                correction += listings(raw, arrows=arrows)
        n = len(hexes)
        if n & 1:
            pairs = unhex(hexes + b"0") + unhex(hexes[1:n])
        else:
            pairs = unhex(hexes) + unhex(hexes[1:] + b"0")
        if n <= chunk:
            units = 16 * (adler(pairs.translate(high)) & 0xFFFF) \
                + (adler(pairs.translate(low)) & 0xFFFF) - bias - OFFSET * (n - 1)
        else:
            units = 16 * _chunked_sum(pairs.translate(high)) \
                + _chunked_sum(pairs.translate(low)) - OFFSET * n
        spaces = pairs.count(space_pair, 0, head)  # columns aligned with spaces: _listings
        if spaces * column_share >= (n if n < head else head) and (
                pairs.find(newline_space, 0, head) < 0  # no indentation: a memchr
                or pairs.count(newline_space, 0, head) * indent_share < spaces):
            correction += columns(raw)
        if n >= run and units >= rate_floor * n:  # base64 (see _encoded): the gate, inline
            sample = pairs[::stride]
            if sample.count(lower_upper) * share >= len(sample):
                correction += encoded(raw, pairs, units)
        # the correction joins the pair units as one exact integer, divided once
        tokens = (units * ratio + correction) / SCRIPT_SCALE if correction else units / SCALE
        if han:
            tokens += traditional * traditional_count(text, hexes)
        rounded = int(tokens + 0.5)
        rounded += digit_pieces(hexes, pairs)
        floor = (len(text) + CHARS_PER_TOKEN_CEILING - 1) // CHARS_PER_TOKEN_CEILING
        return rounded if rounded > floor else floor

    return count


_ESTIMATORS: Final[dict[Family, Callable[[str], int]]] = {f: estimator(f) for f in FAMILIES}


def estimate(text: str, family: Family = "o200k") -> int:
    """Estimated tokens of ``text`` for ``family``'s tokenizer: ≥ 1 for any non-empty text."""
    return _ESTIMATORS[family](text)


def lower_bound(chars: int) -> int:
    """The least the estimate ever says for a text of ``chars`` characters (≥ 1 if any)."""
    return (chars + CHARS_PER_TOKEN_CEILING - 1) // CHARS_PER_TOKEN_CEILING


ContentKind = Literal["prose", "code", "cjk"]
CONTENT_KINDS: Final[tuple[ContentKind, ...]] = ("prose", "code", "cjk")
_CODE_MARKS: Final = b'{}[]()<>;=:"_\\/|'
_KEEP_CODE_MARKS: Final = bytes(b for b in range(256) if b not in _CODE_MARKS)


def content_kind(text: str) -> int:
    """The kind of text, as an index into :data:`CONTENT_KINDS`: CJK when at least ~20% of
    its characters are three-byte UTF-8 (CJK), code/JSON when brackets, quotes, ``=``,
    ``:`` and ``_`` make up ≥ 6% of it, else prose. Tokenizers differ most between these
    kinds, so a calibration learns one correction per kind (C-speed passes only)."""
    n = len(text)
    if n == 0:
        return 0
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) - n >= 0.4 * n:
        return 2
    marks = len(raw.translate(None, _KEEP_CODE_MARKS))
    return 1 if marks >= 0.06 * n else 0
