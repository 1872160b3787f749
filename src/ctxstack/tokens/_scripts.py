"""The per-script and per-symbol-block correction of the token estimator (its features,
their fitted weights): see :mod:`ctxstack.tokens._model`, which adds it to the pair model
and re-exports these names.

Why a correction: the pair model's 16 classes put every two-byte character in one class,
every three-byte one outside CJK in another, every symbol in a third, and its weights were
fitted on English, code, JSON, Chinese and Japanese only. Its features here are counted by
whole-string ``bytes``/``str`` methods (``translate``, ``count``, slices, ``unhexlify``,
one regular expression for the symbol blocks): no Python step per character.
"""

from __future__ import annotations

import re
from binascii import unhexlify as _unhex
from itertools import pairwise
from typing import Final, Literal

Family = Literal["o200k", "cl100k"]
FAMILIES: Final[tuple[Family, ...]] = ("o200k", "cl100k")
_CONTINUATION: Final = bytes(range(0x80, 0xC0))


SCRIPT_GROUPS: Final[tuple[str, ...]] = (
    "latin1", "latin_ext", "greek", "cyrillic", "hebrew", "arabic", "brahmic_thai", "e1", "hangul",
    "four_byte", "combining",
)
"""Script groups of the per-script correction (:func:`script_correction`), by UTF-8 lead
byte: Latin-1 letters and signs (C2–C3: French, German, Spanish, Portuguese…), the
other accented Latin letters (C4–CB: Polish, Czech, Turkish…), Greek
(CD–CF), Cyrillic (D0–D4), Armenian and Hebrew (D5–D7), Arabic, Persian, Syriac, Thaana
(D8–DF), Brahmic scripts and Thai/Lao/Tibetan (E0), U+1000–U+1FFF — Myanmar, Georgian,
Ethiopic, Khmer, Vietnamese letters of Latin Extended Additional, Greek Extended (E1),
Hangul syllables and other U+A000–U+DFFF (EA–ED), four-byte characters — emoji, rare
ideographs (F0–F4), and combining marks U+0300–U+033F (CC): an accent written after its
letter, as decomposed text has them (see :data:`DECOMPOSED_BLOCKS`), fitted last."""
_GROUP_LEADS: Final = ((0xC2, 0xC3), (0xC4, 0xCB), (0xCD, 0xCF), (0xD0, 0xD4), (0xD5, 0xD7),
                       (0xD8, 0xDF), (0xE0, 0xE0), (0xE1, 0xE1), (0xEA, 0xED), (0xF0, 0xF4),
                       (0xCC, 0xCC))
SUB_BLOCKS: Final[tuple[tuple[str, int, tuple[int, ...]], ...]] = (
    ("devanagari", 0xE0, (0xA4, 0xA5)),
    ("bengali", 0xE0, (0xA6, 0xA7)),
    ("gurmukhi", 0xE0, (0xA8, 0xA9)),
    ("gujarati", 0xE0, (0xAA, 0xAB)),
    ("oriya", 0xE0, (0xAC, 0xAD)),
    ("tamil", 0xE0, (0xAE, 0xAF)),
    ("telugu", 0xE0, (0xB0, 0xB1)),
    ("kannada", 0xE0, (0xB2, 0xB3)),
    ("malayalam", 0xE0, (0xB4, 0xB5)),
    ("sinhala", 0xE0, (0xB6, 0xB7)),
    ("thai_lao", 0xE0, (0xB8, 0xB9, 0xBA, 0xBB)),
    ("myanmar", 0xE1, (0x80, 0x81)),
    ("georgian", 0xE1, (0x82, 0x83)),
    ("vietnamese", 0xE1, (0xBA, 0xBB)),
)
"""Blocks inside a three-byte group whose scripts tokenize differently enough to get a
weight of their own: (name, lead byte, second bytes). Counted only when their group
occurs (see :class:`_BlockPass`): at most 15 segments of second bytes fit its hex-digit
pass; Khmer, Ethiopic and the rest of
U+1000–U+1FFF share the ``e1`` group's weights, Lao and Thai one block (see
:class:`_BlockPass`)."""
TWO_BYTE_BLOCKS: Final[tuple[tuple[str, int, tuple[int, ...]], ...]] = (
    ("latin1_capital", 0xC3, tuple(range(0x80, 0x9F))),
    ("german", 0xC3, (0x9F, 0xA4, 0xB6, 0xBC)),
    ("greek_capital", 0xCE, tuple(range(0x86, 0xAC))),
    ("cyrillic_capital", 0xD0, tuple(range(0x80, 0xB0))),
    ("ukrainian", 0xD1, (0x94, 0x95, 0x96, 0x97)),  # є ѕ і ї
    ("ukrainian_ghe", 0xD2, (0x90, 0x91)),
)
"""Letters of the two-byte alphabets counted again, the same way: capitals (À–Þ, Ά–Ϋ,
Ѐ–Я) cost more than small letters in every vocabulary (fewer merges learnt), and text in
capitals — headings, character-name tables — is where the plain group weights
under-counted most (Cyrillic tables by up to 39%); ß ä ö ü and Ukrainian є і ї ґ mark
languages whose words the vocabularies split more finely than French or Russian ones
(German and Ukrainian were under-counted by 9% and 7% at the median where French and
Russian were over-counted)."""
DECOMPOSED_BLOCKS: Final[tuple[tuple[str, int, tuple[int, ...]], ...]] = (
    ("hangul_jamo", 0xE1, (0x84, 0x85, 0x86, 0x87)),
)
"""What decomposed text (Unicode normal form D) is made of besides the ``combining`` group's
marks (U+0300–U+033F, an accent written after its letter: é as e + U+0301), counted the
same way: Hangul jamo U+1100–U+11FF (a Korean syllable as its two or three letters).
Both vocabularies split them into far more tokens than the composed letters — a mark
costs 1.4–2 ``o200k_base`` tokens, decomposed Korean 7.5× its composed form — so the group
weights, fitted on composed text, under-counted decomposed Vietnamese, Greek and Polish
by 11–25% and Korean by 77%. Their weights and the ``combining`` group's (whose marks
also vouch for the ASCII letters around them, :data:`LETTER_CUES`, as the accented
letters they replace do) are fitted last, on the decomposed forms of the fit split's
texts (``benchmarks.token_corpus.DECOMPOSED``), with every other weight fixed: composed
text is counted exactly as before."""
LETTER_CUES: Final[tuple[str, ...]] = ("german", "latin1", "latin_ext", "combining")
"""Features whose characters mark the language of the ASCII letters around them (see
:data:`VOUCH`): German's ß ä ö ü, any Latin-1 character (French, Spanish, Portuguese…),
the other accented Latin letters (Polish, Czech, Turkish…), combining marks (the same
languages in normal form D)."""
VOUCH: Final = 200
"""ASCII letters each cue character vouches for: a ``*_letters`` feature is
``min(ASCII letters, VOUCH × cue characters)``. Why: a German or Polish text is mostly
ASCII letters, split into more tokens than English words of the same letters (compounds,
inflections), so its under-count grows with its length while its accented letters (≈ 1%
of German text) are few and vary — a weight per accented letter over-corrected texts with
many of them and missed texts with few. A text whose cues are at least 1/VOUCH of its
letters counts all its letters once per cue group; a stray "café" in 4,000 characters of
English vouches for at most VOUCH letters."""
SCRIPT_FEATURES: Final[tuple[str, ...]] = (
    tuple(f"{g}_chars" for g in SCRIPT_GROUPS) + tuple(f"{g}_runs" for g in SCRIPT_GROUPS)
    + tuple(f"{name}_chars" for name, _lead, _seconds
            in SUB_BLOCKS + TWO_BYTE_BLOCKS + DECOMPOSED_BLOCKS)
    + tuple(f"{cue}_letters" for cue in LETTER_CUES)
)
"""What :func:`script_features` counts, in order: characters per group, runs per group
(maximal runs of the group's characters, ≈ words), characters per sub-block and per
two-byte block."""
_GROUP_CODES: Final = tuple(bytes([0x41 + i]) for i in range(len(SCRIPT_GROUPS)))
_OTHER_CODE: Final = b"."


def _group_tables() -> tuple[bytes, bytes]:
    """(byte → its group's letter, or ``.``; the bytes that are no group's lead byte)."""
    lead_code = bytearray(_OTHER_CODE * 256)
    for i, (lo, hi) in enumerate(_GROUP_LEADS):
        for b in range(lo, hi + 1):
            lead_code[b] = _GROUP_CODES[i][0]
    grouped = {b for lo, hi in _GROUP_LEADS for b in range(lo, hi + 1)}
    not_lead = bytes(b for b in range(256) if b not in grouped)
    return bytes(lead_code), not_lead


_GROUP_CODE, _NOT_GROUP_LEAD = _group_tables()
_ASCII_TO_SPACE: Final = b" " * 0x80 + bytes(range(0x80, 0x100))
_NOT_ASCII: Final = bytes(range(0x80, 0x100))
COMPACT_BELOW: Final = 8
"""Text with fewer than one group character (:func:`script_features`) or one non-ASCII
byte (:func:`symbol_features`) in this many bytes is read as :func:`_compact` gives it."""


def _compact(raw: bytes) -> bytes:
    """``raw``'s runs of non-ASCII bytes, one space between runs (C calls only)."""
    return b" ".join(raw.translate(_ASCII_TO_SPACE).split())


class _BlockPass:
    """Counts characters per block of ``blocks`` — (name, lead byte, second bytes) — in C:
    the lead-byte digits and the next bytes' segment digits are interleaved by two strided
    slice assignments, ``unhexlify`` turns each (byte, next byte) into one byte, a
    ``translate`` keeps the blocks' codes, and each code present is one ``count`` (a loop
    over every block cost ~7 µs even on two bytes). Exact; at most
    15 lead bytes and 15 segments of second bytes (one hex digit each; a segment is a
    maximal range of second bytes that no block boundary cuts)."""

    def __init__(self, blocks: tuple[tuple[str, int, tuple[int, ...]], ...]) -> None:
        leads = tuple(dict.fromkeys(lead for _name, lead, _seconds in blocks))
        cuts = sorted({b for _n, _l, seconds in blocks for s in seconds
                       for b in (s, s + 1) if (b - 1 in seconds) != (b in seconds)})
        if len(leads) > 15 or len(cuts) > 16:
            raise ValueError("too many lead bytes or second-byte segments for one pass")
        lead_digit = bytearray(b"0" * 256)
        for i, lead in enumerate(leads):
            lead_digit[lead] = b"0123456789abcdef"[i + 1]
        segment_digit = bytearray(b"f" * 256)
        for j, (lo, hi) in enumerate(pairwise(cuts)):
            segment_digit[lo:hi] = b"0123456789abcdef"[j:j + 1] * (hi - lo)
        self.lead_digit, self.segment_digit = bytes(lead_digit), bytes(segment_digit)
        self.codes = tuple(
            tuple(bytes([(leads.index(lead) + 1) << 4 | d])
                  for d in sorted({int(chr(segment_digit[b]), 16) for b in seconds}))
            for _name, lead, seconds in blocks)
        code_blocks: dict[bytes, list[int]] = {}
        for k, codes in enumerate(self.codes):
            for code in codes:
                code_blocks.setdefault(code, []).append(k)
        self.code_blocks = tuple((code, tuple(ks)) for code, ks in code_blocks.items())
        self.not_codes = bytes(b for b in range(256) if bytes([b]) not in code_blocks)
        self.groups = frozenset(i for i, (lo, hi) in enumerate(_GROUP_LEADS)
                                if any(lo <= lead <= hi for lead in leads))

    def count(self, raw: bytes, out: list[int], start: int) -> None:
        """Characters per block added to ``out[start:]`` (zeros there: a fresh vector)."""
        n = len(raw)
        digits = bytearray(2 * n)
        digits[0::2] = raw.translate(self.lead_digit)
        digits[1::2] = raw[1:].translate(self.segment_digit) + b"f"
        # the blocks' pair codes only (one translate): most text has none, or a few kinds
        kept = _unhex(digits).translate(None, self.not_codes)
        if kept:
            for code, ks in self.code_blocks:
                if code in kept:
                    found = kept.count(code)
                    for k in ks:
                        out[start + k] += found


_SUB_PASS: Final = _BlockPass(SUB_BLOCKS)
_LATIN_GROUPS: Final = frozenset(SCRIPT_GROUPS.index(g)
                                 for g in ("latin1", "latin_ext", "combining"))
_NOT_ASCII_LETTER: Final = bytes(b for b in range(256) if not chr(b).isascii()
                                 or not chr(b).isalpha())
_LETTERS_AT: Final = SCRIPT_FEATURES.index(f"{LETTER_CUES[0]}_letters")
_CUE_AT: Final = tuple(SCRIPT_FEATURES.index(f"{cue}_chars") for cue in LETTER_CUES)
_TWO_BYTE_PASS: Final = _BlockPass(TWO_BYTE_BLOCKS)
_DECOMPOSED_PASS: Final = _BlockPass(DECOMPOSED_BLOCKS)
_DECOMPOSED_LEADS: Final = re.compile(rb"\xe1[\x84-\x87]")
"""A jamo's first bytes: other U+1000–U+1FFF text skips the decomposed blocks' pass after
this one search."""


def script_features(raw: bytes) -> list[int]:
    """The counts of :data:`SCRIPT_FEATURES` in ``raw`` (UTF-8 bytes, as
    ``str.encode("utf-8", "surrogatepass")`` gives them): all zero for ASCII text.

    C-speed passes only: one ``bytes.translate`` keeps the lead bytes of the groups (as a
    letter per group) and drops every other byte; only when some remain, a second one maps
    every character to its group letter or ``.`` (continuation bytes dropped), where a run
    starts wherever a group letter follows a ``.`` (a run adjoining another group's run
    is not counted again: rare, e.g. a combining accent after a Greek letter). Bytes that
    are not valid UTF-8 are classified by their value like the pair model's classes.

    Text whose group characters are few (under one byte in :data:`COMPACT_BELOW`) is
    first cut to its runs of non-ASCII bytes, one space between runs (:func:`_compact`):
    a group character holds no ASCII byte, a run of them stays a run and a block character
    — a lead byte and the continuation byte after it — stays whole, so the counts are the
    same, and prose with a few accented letters (a name, a quotation) pays for those bytes,
    not for its thousands of ASCII ones (~20 µs on 3 KB before). Text mostly in a script
    skips the cut: splitting it at every space costs more than it saves.
    """
    groups = len(SCRIPT_GROUPS)
    out = [0] * len(SCRIPT_FEATURES)
    leads = raw.translate(_GROUP_CODE, _NOT_GROUP_LEAD)
    if not leads:
        return out
    full = raw
    if len(leads) * COMPACT_BELOW < len(raw):
        raw = _compact(raw)
    chars = _OTHER_CODE + raw.translate(_GROUP_CODE, _CONTINUATION)
    present = set()
    for i, code in enumerate(_GROUP_CODES):
        if code in leads:  # memchr: absent groups cost next to nothing
            out[i] = leads.count(code)
            out[groups + i] = chars.count(_OTHER_CODE + code)
            present.add(i)
    if not _SUB_PASS.groups.isdisjoint(present):
        _SUB_PASS.count(raw, out, 2 * groups)
    if not _TWO_BYTE_PASS.groups.isdisjoint(present):
        _TWO_BYTE_PASS.count(raw, out, 2 * groups + len(SUB_BLOCKS))
    if not _DECOMPOSED_PASS.groups.isdisjoint(present) and _DECOMPOSED_LEADS.search(raw):
        _DECOMPOSED_PASS.count(raw, out,
                               2 * groups + len(SUB_BLOCKS) + len(TWO_BYTE_BLOCKS))
    if not _LATIN_GROUPS.isdisjoint(present):
        letters = len(full.translate(None, _NOT_ASCII_LETTER))
        for k, at in enumerate(_CUE_AT):
            out[_LETTERS_AT + k] = min(letters, VOUCH * out[at])
    return out


SYMBOL_BLOCKS: Final[tuple[tuple[str, tuple[tuple[int, int, int], ...]], ...]] = (
    ("technical", ((0xE2, 0x84, 0x93),)),
    ("box_drawing", ((0xE2, 0x94, 0x95),)),
    ("shapes", ((0xE2, 0x96, 0x97),)),
    ("dingbats", ((0xE2, 0x98, 0x9F), (0xE2, 0xA4, 0xAF))),
    ("braille", ((0xE2, 0xA0, 0xA3),)),
    ("emoji", ((0xF0, 0x9F, 0x9F),)),
    ("astral", ((0xF0, 0x90, 0x9E), (0xF0, 0xA0, 0xBF), (0xF1, 0x80, 0xBF), (0xF2, 0x80, 0xBF),
                (0xF3, 0x80, 0xBF), (0xF4, 0x80, 0xBF))),
)
"""Symbol blocks the pair model under-counts, as (name, (lead byte, first, last second
byte) ranges): letterlike, arrows, mathematical and technical signs, enclosed
alphanumerics (U+2100–U+24FF); box drawing (U+2500–U+257F); block elements and
geometric shapes (U+2580–U+25FF); miscellaneous symbols, dingbats, other arrows and
mathematical symbols (U+2600–U+27FF, U+2900–U+2BFF); Braille (U+2800–U+28FF); emoji and
other pictographs (U+1F000–U+1FFFF); every other four-byte character (historic scripts,
CJK extensions B–G, private use). The pair model gives a run of symbols ~0.2 token a
character (its fit texts' symbols were mostly dashes and box-drawing rules, which merge),
where most of these cost 1.5–3 (a Braille spinner frame is three byte tokens in both
vocabularies): a spinner or a progress bar was under-counted 3–10x. General punctuation
(— “ ” … •), currency and the CJK-adjacent blocks stay the pair model's alone."""
FREQUENT_SYMBOLS: Final = (
    "℃№™\u2126ⅠⅡⅤⅴⅼ←↑→↓⇒∀∆−∙√∞∨≈≤≥≫①②③④⑤─━│┃├┣═║╗╝▀▄█▋░▒▓■□▪▫▬▲△▶▷►▼▽◆◇○◎●★☆☎☴☺♀♂♡♥♦♪♫✅✓✔"
    "✨❤➡⠀⭐⭕🏻🏼👇👉👌👍👏💕🔥😀😁😂😉😊😍😘😭🙂🙏🤣"
)
"""The symbol blocks' characters that are one ``o200k_base`` token each (listed by
``benchmarks/fit_tokens.py --symbols``): the box-drawing rules, bars, arrows, checks and
emoji that real text uses, which cost a third of what the rest of their blocks do. They
form a block of their own (``frequent``) whatever block they are in."""
SYMBOL_NAMES: Final[tuple[str, ...]] = (*(name for name, _ranges in SYMBOL_BLOCKS), "frequent")
SYMBOL_FEATURES: Final[tuple[str, ...]] = (
    tuple(f"{name}_chars" for name in SYMBOL_NAMES)
    + tuple(f"{name}_runs" for name in SYMBOL_NAMES)
    + tuple(f"{name}_repeats" for name in SYMBOL_NAMES))
"""What :func:`symbol_features` counts: characters per symbol block (the frequent ones
apart, :data:`FREQUENT_SYMBOLS`), runs per block (maximal sequences of symbol blocks'
characters, by the block of their first one), and repeats per block (characters equal
to the one before them: a rule ``────`` or a bar ``████`` merges into long tokens where
distinct symbols do not)."""


def _code_point_ranges(ranges: tuple[tuple[int, int, int], ...]) -> list[tuple[int, int]]:
    """(first, last) code points of the UTF-8 (lead byte, first, last second byte) ranges."""
    out = []
    for lead, lo, hi in ranges:
        if lead < 0xF0:  # 1110xxxx 10yyyyyy 10zzzzzz
            base, shift, span = (lead & 0x0F) << 12, 6, 0x3F
        else:  # 11110www 10xxxxxx 10yyyyyy 10zzzzzz
            base, shift, span = (lead & 0x07) << 18, 12, 0xFFF
        out.append((base | (lo & 0x3F) << shift, min(base | (hi & 0x3F) << shift | span,
                                                     0x10FFFF)))
    return out


def _symbol_patterns() -> tuple[re.Pattern[str], tuple[tuple[
        re.Pattern[str], re.Pattern[str], re.Pattern[str]], ...]]:
    frequent = set(map(ord, FREQUENT_SYMBOLS))
    classes = []
    for _name, ranges in SYMBOL_BLOCKS:
        parts = []
        for first, last in _code_point_ranges(ranges):
            start = first
            for cp in [*sorted(c for c in frequent if first <= c <= last), last + 1]:
                if start < cp:
                    parts.append(f"{re.escape(chr(start))}-{re.escape(chr(cp - 1))}")
                start = cp + 1
        classes.append("[" + "".join(parts) + "]")
    classes.append("[" + "".join(map(re.escape, FREQUENT_SYMBOLS)) + "]")
    # every symbol block together is exactly U+2100–U+2BFF and U+10000–U+10FFFF: a class
    # of two ranges, which the regular expression engine tests at once (the blocks'
    # classes, with holes for the frequent characters, are range lists it walks)
    every = "[\u2100-\u2bff\U00010000-\U0010ffff]+"
    return re.compile(every), tuple(
        (re.compile(f"{c}+"), re.compile(c), re.compile(f"({c})(?=\\1)")) for c in classes)


_SYMBOL_SPANS, _SYMBOL_RUNS = _symbol_patterns()


def _symbol_marks() -> tuple[bytes, bytes]:
    """(byte → a mark, the bytes to drop): the symbol blocks' lead bytes (E2 → ``E``, F0 →
    ``F``, F1–F4 → ``G``) and the continuation bytes by range (80–83 → ``a``, 84–8F →
    ``b``, 90–AF → ``c``, B0–BF → ``d``) are kept, every other byte dropped; a text has a
    symbol block character iff its marks contain ``G``, ``Eb``, ``Ec``, ``Fc`` or ``Fd``
    (E2 84–AF, F0 90–BF, F1–F4: :data:`SYMBOL_BLOCKS`, checked by the tests). Exact for
    valid UTF-8: the byte after a lead byte is a continuation byte, never dropped."""
    marks = bytearray(b"." * 256)
    marks[0x80:0x84] = b"a" * 4
    marks[0x84:0x90] = b"b" * 12
    marks[0x90:0xB0] = b"c" * 32
    marks[0xB0:0xC0] = b"d" * 16
    marks[0xE2], marks[0xF0] = ord("E"), ord("F")
    marks[0xF1:0xF5] = b"G" * 4
    return bytes(marks), bytes(b for b in range(256) if marks[b] == ord("."))


_SYMBOL_MARKS, _NOT_SYMBOL_MARKED = _symbol_marks()


def has_symbol(raw: bytes) -> bool:
    """Whether ``raw`` (UTF-8) has a character of a symbol block: one ``translate`` that
    keeps only the marked bytes (a few per symbol or punctuation character in most text),
    then substring tests of that (a regular expression search cost ~100x more)."""
    marks = raw.translate(_SYMBOL_MARKS, _NOT_SYMBOL_MARKED)
    if b"G" in marks:
        return True
    if b"E" in marks and (b"Ec" in marks or b"Eb" in marks):
        return True
    return b"F" in marks and (b"Fc" in marks or b"Fd" in marks)


def symbol_features(raw: bytes) -> list[int]:
    """The counts of :data:`SYMBOL_FEATURES` in ``raw`` (UTF-8 bytes): :func:`has_symbol`
    first (most text has none and stops there), then, on the decoded text, per block one
    scan for its characters and, when some are adjacent, one for its repeats; and one
    scan for the runs of symbols of any block, each counted as a run of its first
    character's block (the run weight stands for how a run joins the text around it:
    ``▁▂▃▄`` is one run, not four)."""
    blocks = len(SYMBOL_NAMES)
    out = [0] * (3 * blocks)
    if not has_symbol(raw):
        return out
    # mostly ASCII: the regular expression reads the runs of non-ASCII characters only, a
    # space between them — a symbol run holds no ASCII character, so the spans are the
    # same, and a few box-drawing rules or emoji in 3 KB of prose cost ~2 µs, not ~40
    if (len(raw) - len(raw.translate(None, _NOT_ASCII))) * COMPACT_BELOW < len(raw):
        raw = _compact(raw)
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not from a str: bytes that are no character count as none
        text = raw.decode("utf-8", "replace")
    spans = _SYMBOL_SPANS.findall(text)
    firsts = "".join(span[0] for span in spans)
    text = "\n".join(spans)  # the blocks' scans then read the symbols only
    for k, (pattern, char_pattern, repeat_pattern) in enumerate(_SYMBOL_RUNS):
        runs = pattern.findall(text)
        if runs:
            out[k] = chars = sum(map(len, runs))
            out[blocks + k] = len(char_pattern.findall(firsts))
            if chars > len(runs):
                out[2 * blocks + k] = len(repeat_pattern.findall(text))
    return out


def script_units(raw: bytes, family: Family) -> int:
    """:func:`script_correction` in integer units of 1/:data:`SCRIPT_SCALE` token, what
    the estimators add: Σ :data:`SCRIPT_WEIGHTS` (rounded to that unit) × the counts of
    :func:`script_features`, plus Σ :data:`SYMBOL_WEIGHTS` × those of
    :func:`symbol_features`; 0 for text with none of the groups and none of the symbol
    blocks (both checked first)."""
    return _group_units(raw, family) + _symbol_units(raw, family)


def _group_units(raw: bytes, family: Family) -> int:
    if not raw.translate(None, _NOT_GROUP_LEAD):  # no group at all: the common case
        return 0
    return sum(w * c for w, c in zip(_SCRIPT_UNITS[family], script_features(raw), strict=True)
               if c)


def _symbol_units(raw: bytes, family: Family) -> int:
    if not has_symbol(raw):
        return 0
    return sum(w * c for w, c in zip(_SYMBOL_UNITS[family], symbol_features(raw), strict=True)
               if c)


def script_correction(raw: bytes, family: Family) -> float:
    """Tokens to add to the pair model's estimate of the text whose UTF-8 bytes are
    ``raw`` (negative for scripts it over-counts): Σ :data:`SCRIPT_WEIGHTS` × the counts
    of :func:`script_features`, each weight rounded to 1/:data:`SCRIPT_SCALE` token
    (:func:`script_units` / ``SCRIPT_SCALE``). Pure; 0.0 for ASCII and for text with
    none of the groups (Chinese, Japanese, symbols), whose behaviour stays the pair
    model's alone.

    Why: the pair model sees every three-byte character outside CJK as one class and
    every two-byte character as another, and was fitted on English, code, JSON, Chinese
    and Japanese only, so Devanagari or Thai (≈ 0.3–0.4 o200k tokens per character) were
    counted like rare symbols (≈ 1.4), and Greek or Hebrew like accented Latin. A weight
    per character and per run (≈ word) of each group, fitted after the pair weights on
    translated text (``benchmarks/fit_tokens.py --scripts``), corrects both directions.
    """
    return script_units(raw, family) / SCRIPT_SCALE


# Fitted by `python -m benchmarks.fit_tokens --scripts --write` on the FIT split of
# benchmarks/token_corpus.gather_scripts (Debian's gettext catalogs and localised manual
# pages, messages and pages whose hash is even) plus the pair weights' own fit texts, with
# PAIR_WEIGHTS fixed. Order: SCRIPT_FEATURES.
SCRIPT_WEIGHTS: Final[dict[Family, tuple[float, ...]]] = {
    "o200k": (
        -0.1053, -0.159, 0.2977, -0.0349, -0.1499, 0.0982, -0.9932, -0.9701, -1.318,
        -0.0143, 0.9797, -0.7219, 0.4338, -1.101, 0.1899, 1.3594, -0.0258, -0.5313,
        -0.4041, 1.0853, -0.0143, -0.8249, -0.1487, -0.1384, 0.1344, -0.0919, -0.0,
        -0.189, -0.0684, -0.1289, -0.1741, -0.0, -0.1882, -0.0541, -0.2368, -0.7454,
        1.2804, -0.1439, 0.599, 0.5691, 1.1711, 0.0004, 2.4756, 0.0287, 0.0194,
        0.045, 0.043,
    ),
    "cl100k": (
        -0.1182, 0.0879, 0.5382, -0.1224, 0.5014, 0.22, 0.2175, 0.4277, -0.7015,
        -0.0138, 0.4975, -0.412, 0.6285, -0.2923, 0.3288, 0.6006, 0.3712, 0.1094,
        -0.0505, 1.1502, -0.0138, 0.4853, -0.4448, -0.2358, 0.3386, 0.3445, 0.0,
        -0.101, 0.3804, 0.379, 0.1896, 0.0, -0.633, 0.285, 0.2968, -1.2911, 1.1979,
        -0.0045, 0.9474, 0.6789, 2.3557, 0.001, 1.1596, 0.0429, 0.0366, 0.0501,
        0.0504,
    ),
}
SCRIPT_SCALE: Final = 4096
"""The correction is summed in integers of 1/SCRIPT_SCALE token (each weight rounded to
that unit, ≤ 0.00013 token per counted character): a float sum would depend on the order
of its terms, an integer sum does not, so the estimate is the same integer however its
features are grouped (and the tests' per-character reference computes it exactly). A
multiple of :data:`SCALE`, so pair units convert exactly."""
_SCRIPT_UNITS: Final[dict[Family, tuple[int, ...]]] = {
    f: tuple(round(w * SCRIPT_SCALE) for w in SCRIPT_WEIGHTS[f]) for f in FAMILIES}

# Fitted by `python -m benchmarks.fit_tokens --symbols --write` (see there: synthetic
# texts of each block's even code points in contexts of the pair fit's English prose),
# with PAIR_WEIGHTS and SCRIPT_WEIGHTS fixed. Order: SYMBOL_FEATURES.
SYMBOL_WEIGHTS: Final[dict[Family, tuple[float, ...]]] = {
    "o200k": (
        2.2292, 1.9886, 1.9839, 2.5784, 2.7258, 1.3835, 2.9225, 0.7208, -0.6717,
        -0.83, -0.8098, -0.8834, -0.8586, 0.02, 0.4701, -0.3462, 0.0, 0.0505,
        0.0561, 0.0089, 0.0619, 0.0459, 0.0038, 0.0,
    ),
    "cl100k": (
        2.5559, 2.1045, 2.1802, 2.7232, 2.7771, 1.4816, 2.6142, 1.7459, -0.9614,
        -0.8723, -0.8706, -0.9141, -0.9117, -0.1805, 0.2203, -0.5804, 0.0278,
        0.0457, 0.0484, 0.0293, 0.0484, 0.0, 0.0071, 0.0,
    ),
}
_SYMBOL_UNITS: Final[dict[Family, tuple[int, ...]]] = {
    f: tuple(round(w * SCRIPT_SCALE) for w in SYMBOL_WEIGHTS[f]) for f in FAMILIES}
