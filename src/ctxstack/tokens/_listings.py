"""How agents' tools lay text out, which the pair model cannot see: a correction of the
token estimator (its features, their fitted weights; :mod:`ctxstack.tokens._model` adds
it and re-exports these names).

Coding agents read files as *line-numbered listings* — ``cat -n`` and ``nl`` right-align
the number and follow it with a tab, Claude Code's Read tool writes ``12<TAB>line``,
other agents ``    12→line`` — and carry code inside *JSON strings*: a tool result
``{"path": …, "content": "…"}``, the arguments of a Write or Edit call. The vocabularies
split both more finely than the text they hold: a number's tab joins the line's
indentation instead of its word, and an escaped newline ``\\n`` is a backslash token and an
``n`` token where a real newline merges with what precedes it. The pair model sees a tab as
a space and a backslash as any punctuation, so on the eval split it counted tab listings
5.5–6.6% low at the median and files inside JSON strings 6.5–7.7% low (p95 |error| 14–15%):
half the default margin gone before any other error. With this correction: within 1% at
the median, p95 5–9%.

Three counts, each paid only by text that has the character it looks for (a ``bytes``
membership test first: a C ``memchr``): tabs that follow a digit, arrows (U+2192) that
follow a digit, and backslashes (a weight per ``\\n`` escape as well fitted no better).
Their weights are fitted last, with every other weight fixed, on the fit split's code,
prose and JSON texts laid out as those tools lay them out
(``benchmarks.token_corpus.tool_views``) beside the fit texts themselves
(``python -m benchmarks.fit_tokens --listings --write``); the accuracy benchmark evaluates
them on the eval split's texts laid out the same way. ``12:line`` listings (``grep -n``)
were 4–5% low at the median: the indentation after the colon is a run of spaces in the
line, counted since by ``space_runs`` (below).

Tabs between fields: a space merges with the word after it, a tab does not (or seldom:
``alpha<TAB>beta`` is ``alpha``, ``\\tb``, ``eta`` in both vocabularies), and a run of tabs
is a token per tab or two. Tab-separated tables (a data file, ``sqlite3 -separator``,
``cut``) were counted 25–27% low at the median, 91–94% of them by more than the default
margin; configuration, XML and C headers aligned with tabs 2% low at the median, one in
nine by more than the margin (real files and tables of the machine:
``benchmarks.tabbed_corpus``). Two more counts, on the same pass: tabs after a character
that is neither whitespace nor a digit (a field's end: ``word_tabs``; a digit's tab is
``digit_tabs`` already) and pairs of tabs in a run (``tab_runs``). Indentation — a tab
after a newline or another tab — pays only the second, and code indented with tabs
(``\\tif``, ``\\treturn`` are tokens) stays within 2%.

Columns aligned with spaces: a run of 2–80 spaces in the middle of a line is one token of
its own in both vocabularies (only the last space joins the word after it, and none joins
a number), where the pair model — whose runs of spaces were indentation — gives it next
to nothing. ``ls -la`` was counted 18% low, ``ps aux`` 22%, ``pip list`` 13%, ``od -c``
17%, a ``grep -n`` listing (``12:    code``) 5% (real output of the machine:
``benchmarks.aligned_corpus``). One more count, ``space_runs``: runs of two or more
spaces after a character that is neither a space, a tab nor a newline (a run after a
newline is indentation, fitted already). It is paid only by text whose (space, space) pairs are at
least one in :data:`COLUMN_SHARE` and not mostly indentation (fewer than one (newline,
space) pair in :data:`INDENT_SHARE` of them), both counted among the first
:data:`COLUMN_SAMPLE` pair codes the estimator has built (the even positions of the first
1,024 characters — a listing after 1,000 characters of prose is not looked for). Cost,
interleaved A/B: prose +7%, code +14%, JSON +5% of their time (a count over every pair
cost twice that).
"""

from __future__ import annotations

from typing import Final

from ctxstack.tokens._scripts import FAMILIES, SCRIPT_SCALE, Family

LISTING_FEATURES: Final[tuple[str, ...]] = ("digit_tabs", "digit_arrows", "backslashes",
                                             "word_tabs", "tab_runs", "space_runs")
"""What :func:`listing_features` counts, in order (see the module doc)."""

_TAB: Final = ord("\t")
_BACKSLASH: Final = ord("\\")
"""As ints: ``int in bytes`` is one ``memchr`` (~30 ns on 3 KB); ``bytes in bytes`` pays
a generic search set-up (~150 ns)."""
_ARROW: Final = "\u2192".encode()
_MARKS: Final = bytes(ord("d") if 0x30 <= b <= 0x39 else ord("t") if b == 0x09
                      else ord("s") if b in b" \n\r"
                      else ord("a") if b == 0xE2 else ord("r") if b == 0x86
                      else ord("w") if b == 0x92 else ord(".") for b in range(256))
"""Byte → ``d`` (a digit), ``t`` (a tab), ``s`` (a space or a newline), ``a r w`` (the
arrow's three bytes), else ``.``: one ``translate``, then a digit before a tab is ``dt``,
before an arrow ``darw``, a field's end ``.t`` and a pair of tabs ``tt`` (C-speed
``count`` calls, non-overlapping: linear whatever the text; splitting at every tab cost
36 ms on 200,000 tabs). A tab after a character whose last UTF-8 byte is the arrow's
second or third (``r``, ``w``) is not counted as a field's end (nor a run of spaces after
it): rare, a token at most."""
COLUMN_SHARE: Final = 64
INDENT_SHARE: Final = 16
COLUMN_SAMPLE: Final = 512
"""The ``space_runs`` gate (see the module doc): among the first 512 pair codes,
(space, space) pairs ≥ 1/64 of them, (newline, space) pairs < 1/16 of those."""
_SPACE_PAIR: Final = b"\x33"  # (space, space) in the pair model's codes: class 3 << 4 | 3
_NEWLINE_SPACE: Final = b"\x43"  # (newline, space)


def aligned(pairs: bytes) -> bool:
    """Whether text whose (class, next class) pair codes are ``pairs`` pays for its runs
    of spaces (the ``space_runs`` gate): at most two single-byte counts over the first
    :data:`COLUMN_SAMPLE` codes. The estimator inlines the same test (a call per text
    costs what the test does); ``tests/test_token_model.py`` holds both to its
    per-character reference."""
    spaces = pairs.count(_SPACE_PAIR, 0, COLUMN_SAMPLE)
    return spaces * COLUMN_SHARE >= min(len(pairs), COLUMN_SAMPLE) \
        and pairs.count(_NEWLINE_SPACE, 0, COLUMN_SAMPLE) * INDENT_SHARE < spaces


# Fitted by `python -m benchmarks.fit_tokens --listings --write` with PAIR_WEIGHTS,
# SCRIPT_WEIGHTS and SYMBOL_WEIGHTS fixed. Order: LISTING_FEATURES.
LISTING_WEIGHTS: Final[dict[Family, tuple[float, ...]]] = {
    "o200k": (
        0.7148, 0.5205, 0.1559, 1.097, 0.1194, 0.9059,
    ),
    "cl100k": (
        0.7483, -0.2506, 0.1309, 1.1429, 0.0909, 1.1215,
    ),
}
_LISTING_UNITS: Final[dict[Family, tuple[int, ...]]] = {
    f: tuple(round(w * SCRIPT_SCALE) for w in LISTING_WEIGHTS[f]) for f in FAMILIES}


def listing_features(raw: bytes, pairs: bytes) -> list[int]:
    """The counts of :data:`LISTING_FEATURES` in ``raw`` (UTF-8 bytes, as
    ``str.encode("utf-8", "surrogatepass")`` gives them) whose (class, next class) codes
    are ``pairs`` (:func:`ctxstack.tokens._model.pair_codes`); ``space_runs`` 0 unless the
    text passes :func:`aligned`, as the estimator counts them."""
    marks = raw.translate(_MARKS)
    return [marks.count(b"dt"), marks.count(b"darw"), raw.count(b"\\"), marks.count(b".t"),
            marks.count(b"tt"), space_runs(raw) if aligned(pairs) else 0]


_RUN_MARKS: Final = bytes(ord("s") if b == 0x20 else ord("n") if b in b"\t\n\r"
                          else ord("r") if b in (0x86, 0x92) else ord("x") for b in range(256))
"""Byte → ``s`` (a space), ``n`` (a tab or a newline), ``r`` (the arrow's last two bytes,
as in :data:`_MARKS`), else ``x``: a run of spaces in a line starts at ``xss``."""


def space_runs(raw: bytes) -> int:
    """Runs of two or more spaces after a character that is neither a space, a tab, a
    newline nor an arrow's last byte (:data:`_RUN_MARKS`): one ``translate``, one
    ``count``."""
    return raw.translate(_RUN_MARKS).count(b"xss")


def column_units(raw: bytes, family: Family) -> int:
    """``space_runs`` × its weight in 1/:data:`SCRIPT_SCALE` token: what the estimator adds
    to text that passes :func:`aligned` (it calls this for those only)."""
    return _LISTING_UNITS[family][5] * space_runs(raw)


def listing_units(raw: bytes, family: Family, *, arrows: bool) -> int:
    """Σ :data:`LISTING_WEIGHTS` × :func:`listing_features` but ``space_runs``
    (:func:`column_units`), in integer units of 1/:data:`SCRIPT_SCALE` token (each weight
    rounded to one): what the estimator adds to text with a tab, a backslash or an arrow
    (it calls this for those only).
    ``arrows``: whether ``raw`` holds an arrow — the estimator has looked already (never
    in ASCII text), so the search is not made twice."""
    tab, arrow, backslash, word_tab, tab_run, _runs = _LISTING_UNITS[family]
    units = backslash * raw.count(b"\\") if _BACKSLASH in raw else 0
    tabs = _TAB in raw
    if arrows or tabs:
        marks = raw.translate(_MARKS)
        if tabs:
            units += tab * marks.count(b"dt") + word_tab * marks.count(b".t") \
                + tab_run * marks.count(b"tt")
        if arrows:
            units += arrow * marks.count(b"darw")
    return units
