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
Non-ASCII text with kana or CJK punctuation also pays one same-length ``bytes.replace``,
and text with Han characters one regular-expression scan over every 4th character.
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
_CJK_PUNCT_MARK: Final = b"\xf8\x80"  # 0xF8 never valid in UTF-8: marks U+3000–U+303F


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
            cls = "kana"  # U+3040–U+3FFF: hiragana, katakana (U+3000–303F is marked apart)
        elif 0xE4 <= i <= 0xE9:
            cls = "han"  # U+4000–U+9FFF: CJK unified ideographs
        elif i in (0xEF, 0xF8):
            cls = "cjk_punct"  # full-width forms (，！？) and 、。「」 (marked 0xF8)
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
    if b"\xe3" in raw:  # U+3000–303F (、。「」) keeps 3 bytes, its lead byte marked
        raw = raw.replace(b"\xe3\x80", _CJK_PUNCT_MARK)
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
        (3, 52, 46, 49, 87, 41, 42, 31, 51, 59, 39, 40, 79, 23, 44, 44),
        (13, 9, 64, 28, 114, 42, 95, 48, 28, 53, 46, 45, 53, 60, 48, 48),
        (105, 176, 9, 91, 83, 36, 61, 44, 58, 67, 65, 75, 52, 64, 67, 67),
        (5, -2, 81, 1, 34, 83, 20, 48, 27, 31, 49, 43, 48, 64, 36, 29),
        (66, 63, 56, 95, -9, 84, 58, 61, 42, 48, 47, 39, 13, 34, 47, 47),
        (13, 12, 35, 20, 50, 2, 34, 25, 78, 29, 29, 29, 29, 28, 29, 29),
        (61, 39, -9, 67, 16, 5, 18, -8, 20, 26, 27, 28, 68, 22, 26, 26),
        (57, 64, 97, 38, -13, 25, 24, 15, 31, 36, 36, 43, 30, 37, 42, 36),
        (45, 48, 74, 48, 14, 77, -9, 60, 10, 41, 47, 56, 39, 46, 41, 41),
        (53, 33, 33, 31, 33, 33, 33, 33, 32, 11, 33, 34, 33, 33, 33, 33),
        (40, 41, 43, 55, 43, 43, 43, 44, 49, 43, 14, 43, 50, 32, 43, 43),
        (54, 64, 66, 52, 59, 61, 63, 110, 60, 62, 61, 41, 61, 58, 61, 61),
        (90, 48, -9, 40, 108, 60, 96, 86, 75, 60, 56, 36, 47, 53, 60, 60),
        (37, 50, 79, 24, 29, 44, 28, 48, 28, 44, 43, 77, 19, 39, 44, 44),
        (87, 87, 87, 87, 87, 87, 87, 93, 87, 87, 87, 87, 87, 87, 105, 87),
        (88, 88, 88, 81, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88, 88),
    ),
    "cl100k": (
        (3, 43, 50, 53, 83, 36, 45, 33, 52, 57, 33, 41, 95, 13, 44, 44),
        (19, 10, 86, 24, 110, 28, 99, 46, 39, 57, 52, 47, 42, 81, 50, 50),
        (105, 178, 9, 101, 87, 34, 55, 31, 58, 66, 64, 69, 56, 56, 65, 65),
        (3, -6, 78, 0, 35, 87, 26, 55, 24, 37, 55, 60, 53, 66, 40, 41),
        (55, 50, 43, 94, -22, 91, 63, 70, 35, 47, 49, 39, 26, 42, 47, 47),
        (20, 9, 26, 2, 44, 4, 26, 26, 74, 25, 26, 25, 25, 23, 25, 25),
        (58, 31, -7, 54, 26, 3, 15, -18, 14, 21, 23, 22, 44, 13, 21, 21),
        (53, 56, 107, 42, -5, 26, 27, 12, 25, 38, 40, 49, 43, 39, 41, 38),
        (42, 45, 77, 51, 15, 75, -10, 61, 10, 40, 37, 61, 37, 39, 40, 40),
        (61, 42, 42, 43, 42, 42, 42, 42, 42, 26, 42, 43, 43, 42, 42, 42),
        (34, 37, 37, 51, 39, 39, 38, 37, 36, 38, 14, 38, 41, 21, 38, 38),
        (61, 73, 71, 67, 79, 71, 71, 127, 68, 72, 71, 62, 75, 60, 71, 71),
        (98, 47, -9, 61, 108, 68, 87, 99, 93, 68, 60, 43, 64, 78, 68, 68),
        (70, 94, 83, 29, 33, 56, 43, 46, 49, 56, 50, 78, 24, 66, 56, 56),
        (77, 77, 77, 77, 77, 77, 77, 80, 77, 77, 77, 77, 77, 77, 87, 77),
        (97, 97, 97, 99, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97, 97),
    ),
}
TRADITIONAL_WEIGHT: Final[dict[Family, float]] = {"o200k": 1.0042, "cl100k": 2.0365}


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
