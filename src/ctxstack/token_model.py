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
(one byte per character) and are mapped to class numbers by one ``bytes.translate``; the
class pairs come from one big-integer ``x | x >> 4`` (each byte then holds its class in the
low nibble and the next character's class in the high nibble); a second ``translate`` maps
each pair to its weight (in 1/64 token units) and ``zlib.adler32`` sums the bytes in C
(its low half is 1 + the byte sum modulo 65521, so the sum is taken over chunks of at most
256 bytes, where it cannot wrap). Non-ASCII text also pays one ``bytes.replace`` and one
regular-expression scan.
"""

from __future__ import annotations

import re
import zlib
from typing import Final, Literal

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
_CHUNK: Final = 65519 // 255  # bytes whose sum (+1) can never reach adler32's modulus
_CJK_PUNCT_MARK: Final = b"\xf8"  # never valid in UTF-8: stands for U+3000–U+303F


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
_CONTINUATION: Final = bytes(range(0x80, 0xC0))
# Frequent characters written differently in traditional Chinese (and mostly not in
# Japanese either).
_TRADITIONAL: Final = re.compile(
    "[這個們為說時會來對發與從檔於後統開無當將關設經過樣還麼動體數義長間問題實現認記錄"
    "態較閱讀據則應該環變網頁標準選項輸處並單屬員執結構際雙節鍵]"
)


def pair_codes(text: str) -> bytes:
    """One byte per character: its class (low nibble) | the next character's (high nibble).

    The last character's "next" class is 0. ``collections.Counter(pair_codes(t))`` is the
    feature vector the weights are fitted on.
    """
    if text.isascii():
        classes = text.encode("ascii").translate(_CLASS)
    else:
        raw = text.encode("utf-8", "surrogatepass")
        if b"\xe3\x80" in raw:
            raw = raw.replace(b"\xe3\x80", _CJK_PUNCT_MARK)
        classes = raw.translate(_CLASS, _CONTINUATION)
    x = int.from_bytes(classes, "little")
    return (x | (x >> 4)).to_bytes(len(classes), "little")


# Traditional Chinese text of any length almost always has one of these; checking for
# them (a C substring search) spares the regular-expression scan on all other text.
_TRADITIONAL_HINTS: Final = tuple(c.encode() for c in "這個們為時會說於")


def traditional_count(text: str) -> int:
    """How many of ``text``'s characters are frequent traditional-only Chinese ones."""
    if text.isascii():
        return 0
    raw = text.encode("utf-8", "surrogatepass")
    if not any(hint in raw for hint in _TRADITIONAL_HINTS):
        return 0
    return len(_TRADITIONAL.findall(text))


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
        (3, 46, 45, 40, 83, 23, 32, 26, 58, 60, 45, 62, 73, 24, 42, 42),
        (24, 12, 70, 20, 93, 35, 75, 67, 15, 56, 49, 51, 50, 80, 48, 48),
        (119, 167, 13, 70, 58, 77, 41, 55, 38, 63, 57, 70, 52, 45, 63, 63),
        (15, -1, 99, 1, 43, 75, 41, 45, 43, 39, 50, 30, 57, 53, 40, 36),
        (47, 38, 51, 67, -24, 73, 52, 66, 36, 39, 35, 34, 21, 24, 39, 39),
        (29, 5, 32, 79, 37, 12, 25, -22, 99, 31, 32, 31, 32, 32, 31, 31),
        (59, 36, -17, 55, 29, -1, 10, -11, 16, 19, 23, 28, 67, 19, 23, 19),
        (55, 58, 104, 39, 7, 36, 34, 12, 41, 39, 53, 39, 24, 23, 39, 39),
        (38, 45, 83, 41, 36, 50, -10, 59, 7, 39, 34, 48, 56, 43, 39, 39),
        (86, 63, 59, 66, 63, 63, 63, 63, 63, 65, 63, 64, 63, 63, 63, 63),
        (59, 52, 55, 59, 51, 55, 54, 61, 54, 54, 53, 54, 40, 49, 54, 54),
        (54, 69, 64, 75, 61, 60, 60, 100, 65, 61, 61, 43, 24, 62, 60, 60),
        (86, 64, -2, 33, 104, 67, 105, 106, 66, 65, 44, 64, 45, 69, 65, 65),
        (43, 58, 36, 22, 28, 40, 32, 52, 33, 40, 38, 43, 35, 35, 40, 40),
        (64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64),
        (88, 88, 88, 88, 88, 88, 80, 88, 88, 88, 88, 88, 88, 88, 88, 88),
    ),
    "cl100k": (
        (3, 41, 57, 49, 91, 24, 35, 34, 62, 62, 37, 55, 94, 7, 44, 44),
        (25, 14, 88, 15, 75, 36, 73, 73, 18, 56, 46, 47, 39, 85, 47, 47),
        (116, 176, 12, 66, 58, 61, 25, 51, 38, 61, 55, 67, 54, 53, 60, 60),
        (7, -6, 97, 0, 44, 77, 46, 49, 42, 44, 64, 55, 63, 44, 43, 40),
        (37, 26, 36, 67, -32, 74, 49, 76, 28, 36, 38, 21, 30, 33, 36, 36),
        (29, -8, 20, 76, 38, 11, 38, -24, 97, 29, 30, 29, 30, 29, 29, 29),
        (54, 33, -13, 43, 28, -5, 4, -17, 12, 14, 18, 19, 46, 8, 17, 14),
        (48, 52, 104, 44, 12, 44, 34, 7, 39, 42, 57, 55, 34, 44, 42, 42),
        (32, 36, 89, 44, 39, 50, -10, 62, 6, 37, 32, 49, 37, 33, 37, 37),
        (94, 71, 67, 75, 71, 71, 71, 71, 71, 77, 71, 71, 71, 71, 71, 71),
        (64, 63, 64, 77, 69, 66, 66, 73, 64, 66, 68, 66, 56, 61, 66, 66),
        (61, 74, 69, 79, 72, 69, 68, 108, 82, 69, 69, 64, 37, 68, 69, 69),
        (108, 80, 0, 56, 109, 77, 107, 122, 75, 77, 64, 74, 62, 84, 77, 77),
        (65, 84, 38, 22, 34, 45, 30, 40, 47, 45, 37, 30, 50, 43, 45, 45),
        (64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64),
        (90, 90, 90, 90, 91, 90, 84, 90, 90, 90, 90, 90, 90, 90, 90, 90),
    ),
}
TRADITIONAL_WEIGHT: Final[dict[Family, float]] = {"o200k": 1.0797, "cl100k": 2.1673}


def _weight_table(family: Family) -> bytes:
    rows = PAIR_WEIGHTS[family]
    # pair byte = this class | next class << 4
    return bytes(rows[code & 15][code >> 4] + OFFSET for code in range(256))


_TABLES: Final[dict[Family, bytes]] = {f: _weight_table(f) for f in FAMILIES}


def estimate(text: str, family: Family = "o200k") -> int:
    """Estimated tokens of ``text`` for ``family``'s tokenizer: ≥ 1 for any non-empty text."""
    if not text:
        return 0
    weights = pair_codes(text).translate(_TABLES[family])
    n = len(weights)
    if n <= _CHUNK:
        units = (zlib.adler32(weights) & 0xFFFF) - 1 - OFFSET * n
    else:
        view = memoryview(weights)
        chunks = [zlib.adler32(view[i:i + _CHUNK]) & 0xFFFF for i in range(0, n, _CHUNK)]
        units = sum(chunks) - len(chunks) - OFFSET * n
    tokens = units / SCALE
    if not text.isascii():
        tokens += TRADITIONAL_WEIGHT[family] * traditional_count(text)
    rounded = int(tokens + 0.5)
    floor = lower_bound(len(text))
    return rounded if rounded > floor else floor


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
