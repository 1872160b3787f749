"""Binary written as text — base64 — which the pair model cannot see: a correction of the
token estimator (its features, their fitted weights; :mod:`ctxstack.tokens._model` adds
it and re-exports these names).

Agents read base64 more often than it seems: a notebook's plotted PNG, a data URI in an
HTML or CSS file, a lockfile's ``integrity`` hashes, a PEM certificate, a JWT in a log, a
tool that returns a file's bytes in a JSON field. Both vocabularies cut base64 into pieces
of one to three characters, where the pair model — fitted on words and identifiers, in
which a change of case opens a token of several letters — expects longer ones: on real
files (gzipped pages, gettext catalogs, Python sources; ``benchmarks.encoded_corpus``,
eval split) it counted base64 11% low against ``o200k_base`` and 18% low against
``cl100k_base`` at the median, and up to 44–46% low where the bytes hold runs of zeros
(``AAAA…``): past the default margin, so a budget that "fit" could overflow.

**Gate**, in two steps. First, free: the pair model's own estimate of the text must be at
least a quarter token per character (:data:`RATE_FLOOR`) — base64's case changes and digits
cost it 0.25–0.8, English prose and code mostly less (median 0.22–0.23: four in five
texts stop here), while JSON, CJK and base64 mixed into prose (from a share of ~8%) go on.
Then: base64 is the only common text in which a lower-case letter is followed by an
upper-case one at every sixth character or so (``aGVsbG8gd29y…``); English prose has
one such pair in ~1,600, code one in ~370 (``camelCase``). The estimator has the text's
(class, next class) pairs already; every :data:`GATE_STRIDE`-th of them is looked at
(a strided slice and a ``count``), and text whose sample has at least one (lower, upper)
pair in :data:`GATE_SHARE` goes on. A text in which base64 is a small part (a short token
in a long message) is not corrected, and does not need to be: its share of the count is
small. The stride is odd so that binary tables' periodic layouts (a period of 32 base64
characters is common) do not alias. Cost (interleaved A/B against the estimator without
the correction): see ``CHANGELOG.md``, measured per kind of text.

**Features** (text past the gate only): runs of at least :data:`RUN` characters of the
base64 alphabet, counted as whole blocks of that length (one ``translate`` and one
``count``), and (upper, upper) pairs — the zero-filled tables, ``AAAAAQAAAA…``, whose
capitals the pair model takes for the cheap inside of a shouted word. Their weights are
fitted last with every other weight fixed, on the fit split's base64 texts beside its
ordinary texts (``python -m benchmarks.fit_tokens --encoded --write``), then raised
until at most :data:`ENCODED_UNDER` of the fit texts are under-counted by more than
:data:`ENCODED_UNDER_BY`: the payloads' kinds scatter ±9% around the least-squares fit,
and an under-count is what overflows a budget. Ordinary text that passes the gate (one
JSON text in ten, with ``camelCase`` keys) is over-counted a little, the safe side.
"""

from __future__ import annotations

from typing import Final

from ctxstack.tokens._scripts import FAMILIES, SCRIPT_SCALE, Family

ENCODED_FEATURES: Final[tuple[str, ...]] = ("base64_blocks", "upper_pairs")
"""What :func:`encoded_features` counts, in order (see the module doc)."""

GATE_STRIDE: Final = 7
GATE_SHARE: Final = 25
"""The gate: at least one sampled (lower, upper) pair in 25 (see the module doc)."""
RUN: Final = 24
"""Base64 runs count in whole blocks of this many characters: long enough that words,
paths and identifiers almost never fill one (``_``, ``-`` and ``.`` break a run)."""
RATE_FLOOR: Final = 16
"""The first step of the gate: pair-model units (1/64 token, the pair weights' scale) per
character, a quarter token."""
ENCODED_UNDER: Final = 0.05
ENCODED_UNDER_BY: Final = 0.05

_LOWER_UPPER: Final = b"\x01"  # the pair byte (lower, upper): class 0 << 4 | class 1
_UPPER_UPPER: Final = b"\x11"
_ALPHABET: Final = bytes(ord("b") if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "+/")
                         else ord(".") for b in range(256))
_BLOCK: Final = b"b" * RUN


# Fitted by `python -m benchmarks.fit_tokens --encoded --write` with every other weight
# fixed. Order: ENCODED_FEATURES.
ENCODED_WEIGHTS: Final[dict[Family, tuple[float, ...]]] = {
    "o200k": (
        0.9386, 0.2543,
    ),
    "cl100k": (
        2.4246, 0.1973,
    ),
}
_ENCODED_UNITS: Final[dict[Family, tuple[int, ...]]] = {
    f: tuple(round(w * SCRIPT_SCALE) for w in ENCODED_WEIGHTS[f]) for f in FAMILIES}


def looks_encoded(pairs: bytes, units: int) -> bool:
    """Whether text with these (class, next class) pair bytes, which the pair model
    counts as ``units`` (1/64 token), passes the gate."""
    n = len(pairs)
    if n < RUN or units < RATE_FLOOR * n:
        return False
    sample = pairs[::GATE_STRIDE]
    return sample.count(_LOWER_UPPER) * GATE_SHARE >= len(sample)


def encoded_features(raw: bytes, pairs: bytes, units: int) -> list[int]:
    """The counts of :data:`ENCODED_FEATURES` in text with UTF-8 bytes ``raw``, pair bytes
    ``pairs`` and pair-model ``units``, zeros unless it passes the gate
    (:func:`looks_encoded`)."""
    if not looks_encoded(pairs, units):
        return [0, 0]
    return [raw.translate(_ALPHABET).count(_BLOCK), pairs.count(_UPPER_UPPER)]


def encoded_units(raw: bytes, pairs: bytes, units: int, family: Family, *,
                  gated: bool = False) -> int:
    """Σ :data:`ENCODED_WEIGHTS` × :func:`encoded_features`, in integer units of
    1/:data:`SCRIPT_SCALE` token (each weight rounded to one): what the estimator adds.
    ``gated``: the caller has applied :func:`looks_encoded` already (the estimator does,
    inline, so that text which fails it pays no call)."""
    if not gated and not looks_encoded(pairs, units):
        return 0
    blocks, upper = _ENCODED_UNITS[family]
    return (blocks * raw.translate(_ALPHABET).count(_BLOCK)
            + upper * pairs.count(_UPPER_UPPER))
