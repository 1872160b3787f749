"""Texts that use the symbol blocks of the token estimator's correction: synthetic, by design.

Unlike :mod:`benchmarks.token_corpus` (real text only), these texts are *arranged* by us,
because no installed corpus holds enough spinners, progress bars, box-drawn tables or
emoji to fit or test anything on: what the terminal output of a CLI tool or a chat message
looks like is imitated from a handful of layouts (below). What is real: the characters,
every assigned code point of each block of ``ctxstack.tokens._model.SYMBOL_BLOCKS`` (from
Python's :mod:`unicodedata`), and the words around them, English prose of the
corresponding split of :func:`benchmarks.token_corpus.gather`.

Two disjoint splits, like the rest of the corpus: ``"fit"`` uses the blocks' **even** code
points, fit-split prose and one RNG seed (``benchmarks/fit_tokens.py --symbols`` fits
``SYMBOL_WEIGHTS`` on it); ``"eval"`` the **odd** code points, eval-split prose and
another seed (the accuracy benchmark's symbol rows and ``tests/test_token_symbols.py``).

Layouts, one per text, drawn at random: spinner lines (``⠋ Loading … 42%``), progress bars
(a run of one character, then the rest), runs of distinct characters of the block between
words, single characters inline in prose (``done ✓ → next``), and tables whose rules and
borders are the block's characters. Emoji texts also get ZWJ sequences and skin-tone
modifiers.
"""

from __future__ import annotations

import random
import re
import unicodedata
from functools import cache
from typing import Literal

from benchmarks.token_corpus import gather
from ctxstack.tokens._model import FREQUENT_SYMBOLS, SYMBOL_BLOCKS, SYMBOL_NAMES

Split = Literal["fit", "eval"]
LAYOUTS = ("spinner", "bar", "runs", "inline", "table")
_SEEDS = {"fit": 41, "eval": 43}
_FALLBACK_WORDS = ("the", "loading", "modules", "done", "file", "build", "step", "ok")
_SKIN_TONES = "".join(chr(c) for c in range(0x1F3FB, 0x1F400))


def _code_points(ranges: tuple[tuple[int, int, int], ...]) -> list[int]:
    """The code points whose UTF-8 encoding starts with one of ``ranges`` (lead byte,
    first and last second byte)."""
    out = []
    for lead, lo, hi in ranges:
        for second in range(lo, hi + 1):
            if lead < 0xF0:  # three bytes: 1110xxxx 10yyyyyy 10zzzzzz
                start = (lead & 0x0F) << 12 | (second & 0x3F) << 6
                out.extend(range(start, start + 64))
            else:  # four bytes: 11110www 10xxxxxx 10yyyyyy 10zzzzzz
                start = (lead & 0x07) << 18 | (second & 0x3F) << 12
                out.extend(range(start, start + 4096))
    return out


@cache
def block_chars(name: str, split: Split, frequent: bool = False) -> tuple[str, ...]:
    """The assigned, printable characters of symbol block ``name`` in ``split`` (even
    code points for ``"fit"``, odd for ``"eval"``), without ``FREQUENT_SYMBOLS`` unless
    ``frequent``; ``"frequent"``: those of ``FREQUENT_SYMBOLS`` in the split."""
    parity = 0 if split == "fit" else 1
    if name == "frequent":
        return tuple(c for c in FREQUENT_SYMBOLS if ord(c) % 2 == parity)
    ranges = dict(SYMBOL_BLOCKS)[name]
    chars = []
    for cp in _code_points(ranges):
        if cp % 2 != parity or cp > 0x10FFFF:
            continue
        ch = chr(cp)
        if unicodedata.category(ch) in ("Cn", "Co", "Cs", "Cc", "Cf", "Zs", "Mn", "Me"):
            continue
        if ch in FREQUENT_SYMBOLS and not frequent:
            continue
        chars.append(ch)
    return tuple(chars)


@cache
def _words(split: Split) -> tuple[str, ...]:
    pools, _missing = gather(split, 40)
    words = {w for text in pools.get("prose", []) for w in re.findall(r"[A-Za-z]{2,12}", text)}
    return tuple(sorted(words)) or _FALLBACK_WORDS


def _layout(kind: str, chars: tuple[str, ...], words: tuple[str, ...], emoji: bool,
            rng: random.Random) -> str:
    def phrase(lo: int = 1, hi: int = 6) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))

    def glyph() -> str:
        ch = rng.choice(chars)
        if emoji and rng.random() < 0.25:  # a ZWJ sequence or a skin tone
            ch += rng.choice(("\u200d" + rng.choice(chars), rng.choice(_SKIN_TONES)))
        return ch

    lines = []
    for i in range(rng.randint(4, 24)):
        match kind:
            case "spinner":
                frames = [rng.choice(chars) for _ in range(rng.randint(2, 10))]
                lines.append(f"{frames[i % len(frames)]} {phrase()} {rng.randint(0, 100)}%")
            case "bar":
                done, width = rng.randint(0, 30), 30
                full, empty = rng.choice(chars), rng.choice(chars)
                lines.append(f"{phrase(1, 2)} [{full * done}{empty * (width - done)}] "
                             f"{100 * done // width}%")
            case "runs":
                lines.append(" ".join("".join(glyph() for _ in range(rng.randint(1, 12)))
                                      if rng.random() < 0.5 else phrase(1, 3)
                                      for _ in range(rng.randint(1, 6))))
            case "inline":
                lines.append(" ".join(glyph() if rng.random() < 0.2 else rng.choice(words)
                                      for _ in range(rng.randint(3, 14))))
            case _:  # table
                rule, side = rng.choice(chars), rng.choice(chars)
                cells = [phrase(1, 2) for _ in range(rng.randint(2, 4))]
                if i % 3 == 0:
                    lines.append(side + side.join(rule * (len(c) + 2) for c in cells) + side)
                else:
                    lines.append(side + side.join(f" {c} " for c in cells) + side)
    return "\n".join(lines) + "\n"


def symbol_texts(split: Split, per_block: int) -> dict[str, list[str]]:
    """``per_block`` texts per symbol block (block name → texts) of ``split``: layouts
    drawn in turn, characters of that block only (plus ZWJ and skin tones for emoji)."""
    rng = random.Random(_SEEDS[split])
    words = _words(split)
    out: dict[str, list[str]] = {}
    for name in SYMBOL_NAMES:
        chars = block_chars(name, split)
        out[name] = [_layout(LAYOUTS[i % len(LAYOUTS)], chars, words,
                             name in ("emoji", "frequent"), rng)
                     for i in range(per_block)] if chars else []
    return out
