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

Speed: no Python code visits a character. The UTF-8 bytes lose their continuation bytes
(one byte per character) and are mapped to their class, written as one hex digit, by one
``bytes.translate``; ``binascii.unhexlify`` joins each two digits into one byte, so two
calls (the digits, and the digits shifted by one) give every (class, next class) pair as
a byte, with no big-integer round trip; two more ``translate`` calls map each pair to the
high and the low nibble of its weight (in 1/64 token units) and ``zlib.adler32`` sums each
in C (its low half is 1 + the byte sum modulo 65521: nibble sums cannot wrap below 4,368
bytes, so a text of up to that many characters costs two calls and no chunk loop).
Text with Han characters also pays one regular-expression scan over every 4th character.
(An earlier version marked 、。「」 apart from kana with a ``bytes.replace``; refitted
without it, the Chinese and Japanese errors did not change, so the pass was dropped.)
"""

from __future__ import annotations

import re
from binascii import unhexlify as _unhex
from collections.abc import Callable, Iterator
from itertools import repeat
from operator import and_ as _and
from typing import Final, Literal
from zlib import adler32 as _adler32

Family = Literal["o200k", "cl100k"]
FAMILIES: Final[tuple[Family, ...]] = ("o200k", "cl100k")

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
            cls = "four_byte"  # emoji, rare ideographs, stray bytes
        table[i] = CLASSES.index(cls)
    return bytes(table)


_CLASS: Final = _class_table()
_HEX_CLASS: Final = bytes(b"0123456789abcdef"[c] for c in _CLASS)
"""Byte → its class as one lowercase hex digit (what ``binascii.unhexlify`` pairs up)."""
_HAN_HEX: Final = b"0123456789abcdef"[CLASSES.index("han")].to_bytes(1, "big")
_CONTINUATION: Final = bytes(range(0x80, 0xC0))
# Frequent characters written differently in traditional Chinese (and mostly not in
# Japanese either).
_TRADITIONAL: Final = re.compile(
    "[這個們為說時會來對發與從檔於後統開無當將關設經過樣還麼動體數義長間問題實現認記錄"
    "態較閱讀據則應該環變網頁標準選項輸處並單屬員執結構際雙節鍵]"
)
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


def pair_codes(text: str) -> bytes:
    """One byte per character: its class (high nibble) | the next character's (low
    nibble), in the order of :func:`_pairs` (even positions, then odd).

    The last character's "next" class is 0. ``collections.Counter(pair_codes(t))`` is the
    feature vector the weights are fitted on.
    """
    return _pairs(_hex_classes(text)[0]) if text else b""


def _chunked_sum(data: bytes) -> int:
    """The sum of ``data``'s bytes, each at most 15, in C: ``adler32``'s low half is 1 +
    that sum modulo 65521, exact over chunks of at most ``_CHUNK`` bytes (cut, checksummed
    and masked by ``map``: no Python loop)."""
    n = len(data)
    cuts = map(slice, range(0, n, _CHUNK), range(_CHUNK, n + _CHUNK, _CHUNK))
    sums: Iterator[int] = map(_and, map(_adler32, map(data.__getitem__, cuts)), repeat(0xFFFF))
    return sum(sums) - (n + _CHUNK - 1) // _CHUNK


def traditional_count(text: str) -> int:
    """Frequent traditional-only Chinese characters in ``text``, estimated from every
    :data:`TRADITIONAL_STRIDE`-th character (a C-speed slice), times the stride.

    Counting all of them costs a regular-expression step per character, more than the
    rest of the estimate together; the sample is unbiased and, on text with any real
    amount of traditional Chinese, close (the fitted weight is ~1 token per character).
    """
    if text.isascii():
        return 0
    return TRADITIONAL_STRIDE * len(_TRADITIONAL.findall(text[::TRADITIONAL_STRIDE]))


# Fitted by benchmarks/fit_tokens.py against tiktoken's o200k_base and cl100k_base counts
# of the FIT split of benchmarks/token_corpus.py: standard-library docstrings and code,
# installed distributions' READMEs, licences and code, JSON serialisations of package
# metadata and directory listings, and Debian's manpages-ja / manpages-zh pages — each
# restricted to the files or distributions whose name hashes even; the accuracy benchmark
# evaluates on the other half only. Row = this character's class, column = the next
# character's class (CLASSES order); values in 1/SCALE tokens, −OFFSET to 255 − OFFSET.
# Regenerate with
# `python -m benchmarks.fit_tokens --write`.
PAIR_WEIGHTS: Final[dict[Family, tuple[tuple[int, ...], ...]]] = {
    "o200k": (
        (3, 53, 45, 49, 84, 40, 42, 30, 51, 58, 36, 42, 82, 15, 43, 43),
        (13, 9, 63, 28, 113, 42, 96, 50, 27, 53, 47, 44, 56, 61, 48, 48),
        (106, 175, 9, 93, 80, 36, 60, 44, 56, 67, 65, 71, 54, 66, 66, 66),
        (5, -2, 82, 1, 34, 83, 22, 48, 26, 31, 50, 64, 52, 43, 36, 29),
        (68, 65, 57, 97, -10, 87, 59, 65, 44, 52, 52, 54, 22, 44, 51, 51),
        (15, 11, 34, 20, 49, 2, 34, 25, 78, 28, 29, 27, 28, 28, 28, 28),
        (60, 36, -10, 65, 12, 3, 19, -9, 19, 24, 25, 17, 64, 24, 24, 24),
        (59, 62, 97, 39, -18, 25, 24, 16, 30, 36, 37, 47, 31, 35, 42, 36),
        (45, 48, 75, 49, 13, 75, -7, 58, 10, 41, 47, 56, 42, 43, 41, 41),
        (52, 33, 33, 31, 33, 33, 33, 33, 32, 10, 33, 34, 34, 33, 33, 33),
        (35, 38, 39, 52, 40, 40, 40, 41, 44, 40, 14, 33, 44, 32, 40, 40),
        (16, 44, 78, 19, 28, 48, 39, 103, 38, 49, 45, 42, 69, 56, 48, 48),
        (86, 46, -7, 36, 99, 60, 93, 81, 78, 60, 51, 32, 46, 80, 60, 60),
        (76, 78, 65, 56, 90, 56, 46, 54, 52, 56, 58, 49, -4, 48, 56, 56),
        (87, 87, 87, 87, 87, 87, 87, 93, 87, 87, 87, 87, 87, 87, 105, 87),
        (88, 88, 88, 81, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88),
    ),
    "cl100k": (
        (3, 41, 49, 53, 85, 36, 45, 33, 52, 57, 31, 37, 98, 13, 43, 43),
        (21, 11, 86, 22, 107, 28, 99, 47, 34, 57, 52, 47, 44, 81, 50, 50),
        (107, 178, 8, 103, 85, 34, 55, 31, 56, 66, 63, 52, 59, 70, 65, 65),
        (2, -8, 82, 0, 34, 87, 28, 55, 23, 37, 56, 84, 55, 51, 40, 41),
        (58, 52, 43, 94, -22, 92, 63, 72, 36, 48, 52, 50, 28, 35, 48, 48),
        (20, 8, 25, 2, 43, 4, 26, 26, 73, 24, 26, 22, 24, 24, 24, 24),
        (57, 29, -8, 53, 23, 1, 16, -20, 11, 19, 21, 8, 40, 19, 19, 19),
        (53, 56, 109, 44, -6, 28, 31, 11, 24, 39, 41, 56, 44, 38, 42, 39),
        (43, 43, 79, 52, 17, 76, -8, 61, 10, 41, 37, 61, 38, 41, 40, 40),
        (61, 42, 42, 43, 42, 42, 42, 42, 42, 26, 42, 43, 43, 42, 42, 42),
        (28, 34, 33, 48, 37, 36, 34, 35, 32, 34, 14, 22, 36, 27, 34, 34),
        (33, 64, 72, 31, 43, 59, 51, 108, 59, 60, 55, 62, 71, 71, 59, 59),
        (95, 46, -10, 58, 104, 67, 83, 98, 100, 67, 55, 44, 63, 87, 67, 67),
        (109, 114, 89, 73, 94, 78, 66, 77, 73, 78, 75, 80, 29, 68, 78, 78),
        (77, 77, 77, 77, 77, 77, 77, 80, 77, 77, 77, 77, 77, 77, 87, 77),
        (97, 97, 97, 98, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97),
    ),
}
TRADITIONAL_WEIGHT: Final[dict[Family, float]] = {"o200k": 1.0052, "cl100k": 2.0356}


def _weight_tables(family: Family) -> tuple[bytes, bytes]:
    """Pair byte (this class << 4 | next class) → its weight + OFFSET, split in two
    tables: the high nibble and the low nibble (see :func:`estimate`)."""
    rows = PAIR_WEIGHTS[family]
    units = [rows[code >> 4][code & 15] + OFFSET for code in range(256)]
    return bytes(u >> 4 for u in units), bytes(u & 15 for u in units)


_TABLES: Final[dict[Family, tuple[bytes, bytes]]] = {f: _weight_tables(f) for f in FAMILIES}


def estimator(family: Family) -> Callable[[str], int]:
    """:func:`estimate` for ``family`` as one function, what the default counter calls:
    the family's tables bound in a closure and the ASCII path inlined (a counted text
    pays one Python call, not four).

    The pairs' weights are summed as 16 × (sum of high nibbles) + (sum of low nibbles):
    a nibble sum stays below adler32's modulus over 4,368 bytes, so texts up to that
    length cost two ``adler32`` calls and no chunking.
    """
    high, low = _TABLES[family]
    traditional = TRADITIONAL_WEIGHT[family]
    unhex, adler, hex_class, chunk = _unhex, _adler32, _HEX_CLASS, _CHUNK
    bias = 17 + OFFSET  # adler32's two initial 1s (the high one counts 16 times) + offset

    def count(text: str) -> int:
        if not text:
            return 0
        if text.isascii():
            hexes, han = text.encode("ascii").translate(hex_class), False
        else:
            hexes, han = _hex_classes(text)
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
        tokens = units / SCALE
        if han:
            tokens += traditional * traditional_count(text)
        rounded = int(tokens + 0.5)
        floor = (len(text) + CHARS_PER_TOKEN_CEILING - 1) // CHARS_PER_TOKEN_CEILING
        return rounded if rounded > floor else floor

    return count


_ESTIMATORS: Final[dict[Family, Callable[[str], int]]] = {f: estimator(f) for f in FAMILIES}


def estimate(text: str, family: Family = "o200k") -> int:
    """Estimated tokens of ``text`` for ``family``'s tokenizer: ≥ 1 for any non-empty text."""
    return _ESTIMATORS[family](text)


CHARS_PER_TOKEN_CEILING: Final = 8
"""No real text averages more than 8 characters per token (English ≈ 4.5, code ≈ 3.5,
JSON ≈ 3, CJK < 1.5); degenerate text does get close — ``"x" * 2000`` is 250 o200k
tokens — and the pair model, which never saw such runs, would say far less."""


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
