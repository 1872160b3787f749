"""Fit the token estimator's weights (``ctxstack.tokens._model.PAIR_WEIGHTS``): deterministic.

Data: the ``"fit"`` split of :mod:`benchmarks.token_corpus` only (the accuracy benchmark
evaluates on the disjoint ``"eval"`` split). Exact counts: tiktoken's ``o200k_base`` and
``cl100k_base``, loaded offline from the ``bpe-openai`` package (:mod:`benchmarks.vocab`).

Model (see :mod:`ctxstack.tokens._model`): tokens = Σ over characters of W[class, next
class] + t × (traditional-Chinese characters). W is parametrised as U[class] + B[class,
next class], and B is ridge-penalised (``RIDGE``) so that a class pair seen rarely in the
fit data falls back to its class's own weight instead of an arbitrary one.

Method, per tokenizer family: least squares on the *relative* error — minimise
Σ ((features · w − exact) / exact)² — with each kind of text (prose, code, JSON, Chinese,
Japanese) weighted equally whatever its number of samples; then W is clipped to the
storable range [−OFFSET, 255 − OFFSET]/SCALE, rounded to 1/SCALE token, and the rounding is repaired by a
few greedy ±1 passes over the most frequent pairs (each kept only if it lowers the
objective). Deterministic: the corpus is chosen by stable hashes and a seeded RNG, and
every step is exact arithmetic or a unique least-squares solution.

    python -m benchmarks.fit_tokens            # print the fit-set errors
    python -m benchmarks.fit_tokens --write    # also rewrite the constants in tokens/_model.py

Digits: a run of L digits costs ⌈L / 3⌉ tokens in both vocabularies. The (digit, digit)
pair weighs nothing, the pair at a run's end carries its first piece, and the estimator
adds the rest (``digit_pieces``, a fixed feature with weight 1 here). ``--digits`` refits
only the pairs at a run's two ends (every other weight fixed) on the fit texts plus the
fit split of :mod:`benchmarks.number_corpus` (number-heavy tool output, which the real
corpus has little of), ridge-pulled to ``DIGIT_PRIOR``:

    python -m benchmarks.fit_tokens --digits            # print fit-set errors
    python -m benchmarks.fit_tokens --digits --write    # rewrite those pairs

Per-script corrections (``ctxstack.tokens._model.SCRIPT_WEIGHTS``), fitted *after* the pair
weights, which stay fixed (so English, code, JSON, Chinese and Japanese keep the pair
model's behaviour): ``--scripts``. Data: the ``"fit"`` split of
:func:`benchmarks.token_corpus.gather_scripts` (translations in other scripts) plus the
pair fit's own texts (so that a stray accent in English prose or a Greek letter in code
constrains the weights too). Method: ridge least squares (``SCRIPT_RIDGE``) of the
relative residual (exact − pair estimate) / exact on :func:`ctxstack.tokens._model.
script_features`, each language group and kind weighted equally; weights rounded to
1/10,000 token.

    python -m benchmarks.fit_tokens --scripts            # print fit-set errors per group
    python -m benchmarks.fit_tokens --scripts --write    # rewrite SCRIPT_WEIGHTS

Tool layouts (``LISTING_WEIGHTS``: tabs and arrows after a line number, ``\\n`` escapes,
backslashes, tabs between fields, runs of spaces between columns — see
``ctxstack.tokens._listings``), fitted last with every other weight
fixed: ``--listings``. Data: the fit texts, the same split laid out as agents' tools
show files (:func:`benchmarks.token_corpus.tool_views`), the fit split's tables, files
and code with tabs (:mod:`benchmarks.tabbed_corpus`) and its command output in
space-aligned columns (:mod:`benchmarks.aligned_corpus`), each group weighted equally.

    python -m benchmarks.fit_tokens --listings --write   # rewrite LISTING_WEIGHTS

Base64 (``ENCODED_WEIGHTS``: base64 blocks and (upper, upper) pairs of text past the
gate — see ``ctxstack.tokens._encoded``), fitted last with every other weight fixed:
``--encoded``. Data: the fit split of :mod:`benchmarks.encoded_corpus` (real files'
bytes as base64 in six layouts) beside the ordinary fit texts, each group weighted
equally; then both weights raised together (1% steps) until at most ``ENCODED_UNDER`` of
the base64 texts are under-counted by more than ``ENCODED_UNDER_BY``.

    python -m benchmarks.fit_tokens --encoded --write    # rewrite ENCODED_WEIGHTS

The decomposed text's weights (the ``combining`` group, Hangul jamo: ``DECOMPOSED_BLOCKS``) come
last, on the decomposed forms of the fit texts with every other weight fixed;
``--scripts --decomposed --write`` refits only them, keeping today's other weights.

Symbol blocks (``SYMBOL_WEIGHTS``: arrows and technical signs, box drawing, shapes,
dingbats, Braille, emoji, other four-byte characters), fitted last with the pair and
script weights fixed: ``--symbols``. Data: the ``"fit"`` split of
:mod:`benchmarks.symbol_corpus` (synthetic layouts of each block's even code points among
fit-split English words). Method as for the scripts (relative residual, each block weighted
equally, ``SCRIPT_RIDGE``; a repeat weight that comes out negative is dropped and the rest
refitted: only a few repeated symbols merge — ``─`` does, ``●`` does not — and a negative
weight would under-count the others), then each block's per-character weight is raised until at most
``SYMBOL_UNDER`` of its fit texts are under-counted by more than ``SYMBOL_UNDER_BY``: these
characters cost 1–4 tokens each, a text made of them is counted far off when it is
under-counted at all, and an under-count is what makes a budget overflow.

    python -m benchmarks.fit_tokens --symbols            # print fit-set errors per block
    python -m benchmarks.fit_tokens --symbols --write    # rewrite SYMBOL_WEIGHTS
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.aligned_corpus import aligned_texts
from benchmarks.encoded_corpus import encoded_texts
from benchmarks.tabbed_corpus import tabbed_texts
from benchmarks.token_corpus import DECOMPOSED, gather, gather_scripts, tool_views
from benchmarks.vocab import ensure_offline
from ctxstack.tokens._encoded import ENCODED_UNDER, ENCODED_UNDER_BY
from ctxstack.tokens._model import (
    CLASSES,
    ENCODED_FEATURES,
    ENCODED_WEIGHTS,
    LISTING_FEATURES,
    LISTING_WEIGHTS,
    OFFSET,
    SCALE,
    SCRIPT_FEATURES,
    SCRIPT_WEIGHTS,
    Family,
    _hex_classes,
    digit_pieces,
    encoded_features,
    estimator,
    listing_features,
    pair_codes,
    pair_units,
    script_features,
    symbol_features,
    traditional_count,
)
from ctxstack.tokens._scripts import DECOMPOSED_BLOCKS

ENCODING_OF: dict[Family, str] = {"o200k": "o200k_base", "cl100k": "cl100k_base"}
DIGIT = CLASSES.index("digit")
SAMPLES_PER_KIND = 400
RIDGE = 1e-5
LOW, HIGH = -OFFSET, 255 - OFFSET  # storable pair weights, in 1/SCALE token units
PRIOR = {"two_byte": 0.6, "symbol": 1.0, "kana": 0.7, "han": 0.9, "cjk_punct": 1.0,
         "other3": 1.0, "four_byte": 1.5}
"""Tokens per character a class is pulled towards when the fit data has (almost) none of
it (emoji, Thai…): the same ridge penalty applies, so classes with data ignore it."""
MODEL_FILE = Path(__file__).resolve().parent.parent / "src" / "ctxstack" / "tokens" / "_model.py"
SCRIPTS_FILE = MODEL_FILE.with_name("_scripts.py")  # SCRIPT_ and SYMBOL_WEIGHTS


def feature_rows(texts: Sequence[str]) -> np.ndarray:
    """Per text: 256 class-pair counts, the traditional-character count, then the digit
    pieces the estimator adds with weight 1 (``digit_pieces``; not fitted)."""
    rows = np.zeros((len(texts), 258))
    for i, text in enumerate(texts):
        for code, count in Counter(pair_codes(text)).items():
            rows[i, code] = count
        rows[i, 256] = traditional_count(text)
        hexes = _hex_classes(text)[0]
        rows[i, 257] = digit_pieces(hexes)
    return rows


def exact_counts(texts: Sequence[str], family: Family) -> np.ndarray:
    import tiktoken

    reason = ensure_offline(ENCODING_OF[family])
    if reason is not None:
        raise SystemExit(f"cannot fit {family}: {reason}")
    enc = tiktoken.get_encoding(ENCODING_OF[family])
    return np.array([len(enc.encode(t, disallowed_special=())) for t in texts], float)


def _design(x: np.ndarray) -> np.ndarray:
    """Columns: U (16, per class), B (256, per pair), t (1)."""
    unigram = np.zeros((len(x), 16))
    for code in range(256):
        unigram[:, code >> 4] += x[:, code]  # pair byte = this class << 4 | next
    return np.hstack([unigram, x[:, :256], x[:, 256:257]])


def solve(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """(W as 256 pair weights in tokens, traditional weight)."""
    d = _design(x) * (w / y)[:, None]
    penalty = np.sqrt(RIDGE) * np.eye(d.shape[1])[:272]
    prior = np.zeros(272)
    for i, name in enumerate(CLASSES):
        prior[i] = np.sqrt(RIDGE) * PRIOR.get(name, 0.25)
    coef, *_ = np.linalg.lstsq(np.vstack([d, penalty]),
                               np.concatenate([w * (y - x[:, 257]) / y, prior]), rcond=None)
    pair = np.array([coef[c >> 4] + coef[16 + c] for c in range(256)])
    return pair, float(coef[272])


def objective(x: np.ndarray, y: np.ndarray, w: np.ndarray, units: np.ndarray, t: float) -> float:
    est = x[:, :256] @ units / SCALE + x[:, 256] * t + x[:, 257]
    return float(np.sum((w * (est - y) / y) ** 2))


def quantise(x: np.ndarray, y: np.ndarray, w: np.ndarray, pair: np.ndarray,
             t: float) -> np.ndarray:
    units = np.clip(np.round(pair * SCALE), LOW, HIGH)
    best = objective(x, y, w, units, t)
    order = np.argsort(-x[:, :256].sum(axis=0))[:64]
    for _ in range(3):
        for code in order:
            for step in (1, -1):
                trial = units.copy()
                trial[code] = min(HIGH, max(LOW, trial[code] + step))
                score = objective(x, y, w, trial, t)
                if score < best:
                    best, units = score, trial
    return units.astype(int)


def fit(texts: dict[str, list[str]], family: Family,
        rows: np.ndarray) -> tuple[np.ndarray, float, dict[str, float]]:
    """Quantised pair weights, traditional weight, and fit-set p95 |error| per kind."""
    kinds = [k for k, items in texts.items() for _ in items]
    y = exact_counts([t for items in texts.values() for t in items], family)
    w = np.array([1.0 / np.sqrt(len(texts[k])) for k in kinds])
    rows = rows.copy()
    rows[:, DIGIT << 4 | DIGIT] = 0  # weighs nothing: a run's pieces are counted apart
    pair, t = solve(rows, y, w)
    pair[DIGIT << 4 | DIGIT] = 0
    units = quantise(rows, y, w, pair, t)
    est = np.maximum(1, np.floor(rows[:, :256] @ units / SCALE + rows[:, 256] * t + 0.5)
                     + rows[:, 257])
    err = np.abs(est - y) / y
    p95 = {k: float(np.percentile(err[[kk == k for kk in kinds]], 95)) for k in texts}
    return units, t, p95


def write(params: dict[Family, tuple[np.ndarray, float]]) -> None:
    blocks = []
    for fam, (units, _t) in params.items():
        rows = "".join(
            "        (" + ", ".join(str(int(units[a << 4 | b])) for b in range(16)) + "),\n"
            for a in range(16))
        blocks.append(f'    "{fam}": (\n{rows}    ),')
    trad = ", ".join(f'"{fam}": {round(t, 4)!r}' for fam, (_u, t) in params.items())
    source = MODEL_FILE.read_text()
    source = re.sub(r"(PAIR_WEIGHTS: Final\[.*?\] = \{\n).*?(\n\})",
                    lambda m: m.group(1) + "\n".join(blocks) + m.group(2), source, flags=re.S)
    source = re.sub(r"(TRADITIONAL_WEIGHT: Final\[dict\[Family, float\]\] = )\{.*?\}",
                    lambda m: m.group(1) + "{" + trad + "}", source)
    MODEL_FILE.write_text(source)


SCRIPT_RIDGE = 1e-4
SCRIPT_SAMPLES = 400

DIGIT_PAIRS = [DIGIT << 4 | c for c in range(16) if c != DIGIT] \
    + [c << 4 | DIGIT for c in range(16) if c != DIGIT]
"""The pairs a digit run's ends make: (digit, next class) and (previous class, digit)."""
DIGIT_PRIOR = {"end": 1.5, "start": 0.5}
"""Tokens a pair at a digit run's end (which carries the run's first piece) and at its
start are pulled towards where the data has (almost) none of them."""
DIGIT_RIDGE = 1e-5


def fit_digits(texts: dict[str, list[str]], family: Family, rows: np.ndarray) -> np.ndarray:
    """The weights of :data:`DIGIT_PAIRS` (units of 1/SCALE token), every other weight
    fixed, with a run's pieces after its first counted as the estimator does
    (``digit_pieces``): ridge least squares of the relative residual. ``rows``: the
    texts' :func:`feature_rows`. The (digit, digit) pair stays 0; the pair at a run's
    end, one per run, carries its first piece (see the estimator's
    ``DIGITS_PER_TOKEN_CEILING``)."""
    from ctxstack.tokens._model import PAIR_WEIGHTS

    flat = [t for items in texts.values() for t in items]
    x = rows[:, DIGIT_PAIRS]
    current = np.array([PAIR_WEIGHTS[family][c >> 4][c & 15] for c in DIGIT_PAIRS], float)
    y = exact_counts(flat, family)
    base = np.array([estimator(family)(t) for t in flat]) - x @ current / SCALE
    w = np.array([1.0 / np.sqrt(len(texts[k])) for k, items in texts.items() for _ in items])
    n = len(DIGIT_PAIRS)
    ridge = np.sqrt(DIGIT_RIDGE)
    prior = np.array([DIGIT_PRIOR["end" if c >> 4 == DIGIT else "start"]
                      for c in DIGIT_PAIRS])
    coef, *_ = np.linalg.lstsq(
        np.vstack([x * (w / y)[:, None], ridge * np.eye(n)]),
        np.concatenate([(y - base) * w / y, ridge * prior]), rcond=None)
    units = np.clip(np.round(coef * SCALE), LOW, HIGH).astype(int)
    est = base + x @ units / SCALE
    err = np.abs(est - y) / y
    kinds = [k for k, items in texts.items() for _ in items]
    print(family, "fit-set p95 |error| with the digit pairs refitted:", ", ".join(
        f"{k} {100 * np.percentile(err[[kk == k for kk in kinds]], 95):.1f}%"
        for k in texts))
    return units


def main_digits(argv: Sequence[str]) -> int:
    from benchmarks.number_corpus import number_texts
    from ctxstack.tokens._model import PAIR_WEIGHTS, TRADITIONAL_WEIGHT

    texts, _missing = gather("fit", SAMPLES_PER_KIND)
    texts = {k: v for k, v in texts.items() if v}
    texts["numbers"] = number_texts("fit", SAMPLES_PER_KIND)
    rows = feature_rows([t for items in texts.values() for t in items])  # both families'
    params: dict[Family, tuple[np.ndarray, float]] = {}
    for family in ENCODING_OF:
        units = np.array([[PAIR_WEIGHTS[family][a][b] for b in range(16)] for a in range(16)],
                         int).reshape(256)
        units[DIGIT << 4 | DIGIT] = 0
        units[DIGIT_PAIRS] = fit_digits(texts, family, rows)
        params[family] = (units, TRADITIONAL_WEIGHT[family])
        print(family, "digit row:", list(units[DIGIT << 4:(DIGIT + 1) << 4]))
        print(family, "digit column:", list(units[DIGIT::16]))
    if "--write" in argv:
        write(params)
        print(f"wrote {MODEL_FILE}")
    return 0


def pair_only_estimate(text: str, family: Family) -> float:
    """The pair model's estimate without the script correction (what the correction is
    fitted on top of): the full estimate minus the correction currently in force, before
    rounding — recomputed from the features so rounding does not leak in."""
    raw = text.encode("utf-8", "surrogatepass")
    current = float(np.dot(SCRIPT_WEIGHTS[family], script_features(raw)))
    return estimator(family)(text) - current


def _ridge(texts: dict[str, list[str]], family: Family, columns: np.ndarray,
           fixed: np.ndarray) -> np.ndarray:
    """Ridge least squares of the relative residual — exact minus the pair estimate minus
    ``fixed`` · features — on the features ``columns`` selects; each group weighted
    equally."""
    flat = [(k, t) for k, items in texts.items() for t in items]
    x = np.array([script_features(t.encode("utf-8", "surrogatepass")) for _k, t in flat],
                 float)
    y = exact_counts([t for _k, t in flat], family)
    base = np.array([pair_only_estimate(t, family) for _k, t in flat]) + x @ fixed
    w = np.array([1.0 / np.sqrt(len(texts[k])) for k, _t in flat])
    a = x[:, columns] * (w / y)[:, None]
    b = (y - base) * w / y
    n = int(columns.sum())
    coef, *_ = np.linalg.lstsq(np.vstack([a, np.sqrt(SCRIPT_RIDGE) * np.eye(n)]),
                               np.concatenate([b, np.zeros(n)]), rcond=None)
    return np.asarray(coef)


def fit_scripts(texts: dict[str, list[str]], family: Family,
                keep: np.ndarray | None = None) -> np.ndarray:
    """The script weights, in two stages: every weight but the decomposed blocks' on the
    composed texts (or ``keep``, today's weights, with ``--decomposed``), then those of
    :data:`DECOMPOSED_BLOCKS` and the ``combining`` group on :data:`DECOMPOSED` with the
    rest fixed — decomposed
    text, which shares the group features, cannot move the weights composed text is
    counted with."""
    names = {f"{name}_chars" for name, _lead, _seconds in DECOMPOSED_BLOCKS} | {
        "combining_chars", "combining_runs", "combining_letters"}
    decomposed = np.array([feature in names for feature in SCRIPT_FEATURES])
    coef = np.zeros(len(SCRIPT_FEATURES))
    if keep is None:
        composed = {k: v for k, v in texts.items() if k != DECOMPOSED}
        coef[~decomposed] = _ridge(composed, family, ~decomposed, coef)
    else:
        coef[~decomposed] = keep[~decomposed]
    if texts.get(DECOMPOSED):
        coef[decomposed] = _ridge({DECOMPOSED: texts[DECOMPOSED]}, family, decomposed, coef)
    return np.round(coef, 4)


def _with_weights(source: str, table: str, params: dict[Family, np.ndarray]) -> str:
    """``source`` with the per-family weight table ``table`` replaced by ``params``."""
    import textwrap

    blocks = []
    for fam, coef in params.items():
        values = textwrap.fill(", ".join(repr(float(c)) for c in coef), 84,
                               initial_indent=" " * 8, subsequent_indent=" " * 8)
        blocks.append(f'    "{fam}": (\n{values},\n    ),')
    return re.sub(rf"({table}: Final\[.*?\] = \{{\n).*?(\n\}})",
                  lambda m: m.group(1) + "\n".join(blocks) + m.group(2), source, flags=re.S)


def write_scripts(params: dict[Family, np.ndarray]) -> None:
    SCRIPTS_FILE.write_text(_with_weights(SCRIPTS_FILE.read_text(), "SCRIPT_WEIGHTS", params))


def main_scripts(argv: Sequence[str]) -> int:
    texts = {k: v for k, v in gather_scripts("fit", SCRIPT_SAMPLES).items() if v}
    base, _missing = gather("fit", SCRIPT_SAMPLES)
    texts.update({k: v for k, v in base.items() if v})
    print("fit samples:", {k: len(v) for k, v in texts.items()})
    params: dict[Family, np.ndarray] = {}
    for family in ENCODING_OF:
        keep = np.array(SCRIPT_WEIGHTS[family]) if "--decomposed" in argv else None
        params[family] = coef = fit_scripts(texts, family, keep)
        print(family, ", ".join(f"{n} {c:+.3f}" for n, c in zip(SCRIPT_FEATURES, coef,
                                                                  strict=True)))
    if "--write" in argv:
        write_scripts(params)
        print(f"wrote {SCRIPTS_FILE}")
    return 0


SYMBOL_SAMPLES = 150
SYMBOL_UNDER = 0.01
SYMBOL_UNDER_BY = 0.06


def fit_symbols(texts: dict[str, list[str]], family: Family) -> np.ndarray:
    """Ridge least squares of the relative residual on the symbol features, then each
    block's character weight raised (by 1/64 token steps) until at most SYMBOL_UNDER of
    that block's texts are under-counted by more than SYMBOL_UNDER_BY."""
    from ctxstack.tokens._scripts import _SYMBOL_UNITS, SCRIPT_SCALE, SYMBOL_NAMES

    flat = [(k, t) for k, items in texts.items() for t in items]
    raws = [t.encode("utf-8", "surrogatepass") for _k, t in flat]
    x = np.array([symbol_features(r) for r in raws], float)
    y = exact_counts([t for _k, t in flat], family)
    current = x @ (np.array(_SYMBOL_UNITS[family], float) / SCRIPT_SCALE)
    base = np.array([estimator(family)(t) for _k, t in flat]) - current
    w = np.array([1.0 / np.sqrt(len(texts[k])) for k, _t in flat])
    n = x.shape[1]
    keep = np.ones(n, bool)
    while True:  # a negative repeat weight is dropped: most repeated symbols do not merge
        cols = x[:, keep]
        coef = np.zeros(n)
        coef[keep], *_ = np.linalg.lstsq(
            np.vstack([cols * (w / y)[:, None], np.sqrt(SCRIPT_RIDGE) * np.eye(keep.sum())]),
            np.concatenate([(y - base) * w / y, np.zeros(keep.sum())]), rcond=None)
        negative = [i for i in range(2 * n // 3, n) if keep[i] and coef[i] < 0]
        if not negative:
            break
        keep[negative] = False
    names = list(SYMBOL_NAMES)
    for b, name in enumerate(names):
        rows = np.array([k == name for k, _t in flat])
        while rows.any():
            err = (base[rows] + x[rows] @ coef - y[rows]) / y[rows]
            if np.mean(err < -SYMBOL_UNDER_BY) <= SYMBOL_UNDER:
                break
            coef[b] += 1 / 64
    return np.round(coef, 4)


def frequent_symbols() -> str:
    """The symbol blocks' characters that are one ``o200k_base`` token each, in code point
    order (``FREQUENT_SYMBOLS``)."""
    import tiktoken

    from benchmarks.symbol_corpus import block_chars
    from ctxstack.tokens._model import SYMBOL_BLOCKS

    ensure_offline(ENCODING_OF["o200k"])
    enc = tiktoken.get_encoding(ENCODING_OF["o200k"])
    return "".join(sorted({ch for name, _r in SYMBOL_BLOCKS for split in ("fit", "eval")
                           for ch in block_chars(name, split, frequent=True)
                           if len(enc.encode(ch)) == 1}))


def python_literal(chars: str, width: int = 84) -> str:
    """``chars`` as a parenthesised string literal of lines of at most ``width``
    characters; a character that NFC normalisation would change (U+2126 OHM SIGN) is
    written as an escape, so no editor can silently turn it into another."""
    import unicodedata

    pieces = [f"\\u{ord(c):04x}" if unicodedata.normalize("NFC", c) != c else c
              for c in chars]
    lines, line = [], ""
    for piece in pieces:
        if len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
    lines.append(line)
    return "(\n" + "".join(f'    "{x}"\n' for x in lines) + ")"


def write_symbols(params: dict[Family, np.ndarray], frequent: str) -> None:
    source = _with_weights(SCRIPTS_FILE.read_text(), "SYMBOL_WEIGHTS", params)
    source = re.sub(r"(FREQUENT_SYMBOLS: Final = )\(\n.*?\n\)",
                    lambda m: m.group(1) + python_literal(frequent), source, flags=re.S)
    SCRIPTS_FILE.write_text(source)


def main_symbols(argv: Sequence[str]) -> int:
    from benchmarks.symbol_corpus import symbol_texts
    from ctxstack.tokens._model import FREQUENT_SYMBOLS, SYMBOL_FEATURES, SYMBOL_WEIGHTS

    frequent = frequent_symbols()
    if frequent != FREQUENT_SYMBOLS:
        print(f"FREQUENT_SYMBOLS changes ({len(FREQUENT_SYMBOLS)} -> {len(frequent)} "
              "characters): write it (--write), then fit again")
        if "--write" in argv:
            write_symbols({f: np.array(SYMBOL_WEIGHTS[f]) for f in ENCODING_OF}, frequent)
        return 1
    texts = {k: v for k, v in symbol_texts("fit", SYMBOL_SAMPLES).items() if v}
    print("fit samples:", {k: len(v) for k, v in texts.items()})
    params: dict[Family, np.ndarray] = {}
    for family in ENCODING_OF:
        params[family] = coef = fit_symbols(texts, family)
        print(family, ", ".join(f"{n} {c:+.3f}" for n, c in zip(SYMBOL_FEATURES, coef,
                                                                  strict=True)))
    if "--write" in argv:
        write_symbols(params, frequent)
        print(f"wrote {SCRIPTS_FILE}")
    return 0


ENCODED_FILE = MODEL_FILE.with_name("_encoded.py")  # ENCODED_WEIGHTS
ENCODED_SAMPLES = 300


def fit_correction(texts: dict[str, list[str]], family: Family, x: np.ndarray,
                   current: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ridge least squares of the relative residual — exact minus today's estimate without
    this correction (``x @ current``) — on the feature columns ``x`` (one row per text of
    ``texts``, in order), every other weight fixed; each group of texts weighted equally.
    Returns the weights (unrounded), the estimates without the correction, the exact
    counts."""
    flat = [(k, t) for k, items in texts.items() for t in items]
    y = exact_counts([t for _k, t in flat], family)
    base = np.array([estimator(family)(t) for _k, t in flat]) - x @ np.array(current)
    w = np.array([1.0 / np.sqrt(len(texts[k])) for k, _t in flat])
    n = x.shape[1]
    coef, *_ = np.linalg.lstsq(np.vstack([x * (w / y)[:, None], np.sqrt(SCRIPT_RIDGE) * np.eye(n)]),
                               np.concatenate([(y - base) * w / y, np.zeros(n)]), rcond=None)
    return coef, base, y


def fit_encoded(texts: dict[str, list[str]], encoded: set[str], family: Family) -> np.ndarray:
    """:func:`fit_correction` on :data:`ENCODED_FEATURES`, then the weights raised together
    until at most ENCODED_UNDER of the ``encoded`` groups' texts are under-counted by more
    than ENCODED_UNDER_BY (see ``ctxstack.tokens._encoded``)."""
    flat = [(k, t) for k, items in texts.items() for t in items]
    x = np.array([encoded_features(t.encode("utf-8", "surrogatepass"), pairs,
                                   pair_units(pairs, family))
                  for _k, t in flat for pairs in (pair_codes(t),)], float)
    coef, base, y = fit_correction(texts, family, x, ENCODED_WEIGHTS[family])
    coef = np.maximum(coef, 0.0)  # a negative weight would under-count what passes the gate
    rows = np.array([k in encoded for k, _t in flat])
    while np.mean((base[rows] + x[rows] @ coef - y[rows]) / y[rows] < -ENCODED_UNDER_BY) \
            > ENCODED_UNDER:
        coef *= 1.01
    return np.round(coef, 4)


def report_and_write(argv: Sequence[str], params: dict[Family, np.ndarray],
                     names: Sequence[str], path: Path, table: str) -> int:
    """Print each family's fitted weights by name; with ``--write``, replace ``table`` in
    ``path`` by them."""
    for family, coef in params.items():
        print(family, ", ".join(f"{n} {c:+.4f}" for n, c in zip(names, coef, strict=True)))
    if "--write" in argv:
        path.write_text(_with_weights(path.read_text(), table, params))
        print(f"wrote {path}")
    return 0


def main_encoded(argv: Sequence[str]) -> int:
    encoded = {k: v for k, v in encoded_texts("fit", ENCODED_SAMPLES).items() if v}
    if not encoded:
        raise SystemExit("no payload files on this machine (benchmarks/encoded_corpus.py)")
    texts, _missing = gather("fit", ENCODED_SAMPLES)
    texts = {k: v for k, v in texts.items() if v} | encoded
    print("fit samples:", {k: len(v) for k, v in texts.items()})
    params = {family: fit_encoded(texts, set(encoded), family) for family in ENCODING_OF}
    return report_and_write(argv, params, ENCODED_FEATURES, ENCODED_FILE, "ENCODED_WEIGHTS")


LISTINGS_FILE = MODEL_FILE.with_name("_listings.py")  # LISTING_WEIGHTS
LISTING_SAMPLES = 300


def fit_listings(texts: dict[str, list[str]], family: Family) -> np.ndarray:
    """:func:`fit_correction` on :data:`LISTING_FEATURES`."""
    x = np.array([listing_features(t.encode("utf-8", "surrogatepass"), pair_codes(t))
                  for items in texts.values() for t in items], float)
    return np.round(fit_correction(texts, family, x, LISTING_WEIGHTS[family])[0], 4)


def main_listings(argv: Sequence[str]) -> int:
    texts, _missing = gather("fit", LISTING_SAMPLES)
    texts = {k: v for k, v in texts.items() if v}
    texts.update(tool_views(texts, LISTING_SAMPLES))
    texts.update((k, v) for k, v in tabbed_texts("fit", LISTING_SAMPLES).items() if v)
    texts.update((k, v) for k, v in aligned_texts("fit", LISTING_SAMPLES).items() if v)
    print("fit samples:", {k: len(v) for k, v in texts.items()})
    params = {family: fit_listings(texts, family) for family in ENCODING_OF}
    return report_and_write(argv, params, LISTING_FEATURES, LISTINGS_FILE, "LISTING_WEIGHTS")


def main(argv: Sequence[str]) -> int:
    if "--encoded" in argv:
        return main_encoded(argv)
    if "--listings" in argv:
        return main_listings(argv)
    if "--scripts" in argv:
        return main_scripts(argv)
    if "--symbols" in argv:
        return main_symbols(argv)
    if "--digits" in argv:
        return main_digits(argv)
    texts, missing = gather("fit", SAMPLES_PER_KIND)
    texts = {k: v for k, v in texts.items() if v}
    for kind, why in missing.items():
        print(f"{kind}: {why}", file=sys.stderr)
    print("fit samples:", {k: len(v) for k, v in texts.items()})
    rows = feature_rows([t for items in texts.values() for t in items])
    params: dict[Family, tuple[np.ndarray, float]] = {}
    for family in ENCODING_OF:
        units, t, p95 = fit(texts, family, rows)
        params[family] = (units, t)
        print(family, "fit-set p95 |error|:",
              ", ".join(f"{k} {100 * v:.1f}%" for k, v in p95.items()), f"traditional {t:.3f}")
    if "--write" in argv:
        write(params)
        print(f"wrote {MODEL_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
