"""Exact values a summary must not lose, chosen by what they are, and the facts list.

Summarisers paraphrase, and paraphrase is where numbers drift: "about 1,500 yen",
"the order from last week", "the config file". The exact value is usually what the user
asks about next. So after every summarisation ctxstack scans the folded messages for
values whose exact form matters and re-attaches those the summary does not contain,
verbatim, under a ``Facts kept verbatim:`` heading.

**What a candidate is** (:func:`extract_candidates`). One compiled scan (``_SCAN``) finds
every *token*: a run of identifier characters holding a digit, ``/``, ``\\``, ``@``, ``$``
or ``#`` (``ORD-99812-XK``, ``https://x.io/a``, the local part of an e-mail), with a unit
after a space (``3.14159 kg``) or CJK date and unit suffixes (``2024年3月5日``), and month-name
dates (``March 5, 2024``, ``5 March 2024``); quoted phrases, currency amounts and
``name.ext`` file names have their own scans. The regex engine walks past everything
else in C, so Python never touches a plain word. Each distinct token is then
*classified* by its digit shape: URL, e-mail, UUID, date, time, IP, version, path, money,
decimal, identifier mixing letters and digits with separators, issue number, large
number, quoted constraint — or rejected (``1st``, ``and/or``, a lone digit). Every regex
here is linear, which a test checks on 100,000-character adversarial strings; throughput
is in ``benchmarks/bench_recall.py``.

**Which candidates win** (:func:`select_facts`). Each kind has a *distinctiveness* score
(an order id or a URL outranks a bare ``17``); tokens whose *shape* (digits replaced by
``0``) recurs across many messages — ``word16``, ``word17``… from a loop, row numbers of a
table — are penalised, and bare small numbers rank last. What the user stated (and what
the previous summary already kept) comes first, then the assistant's, then tool output;
within a tier the more distinctive, then the newer. The list fills the token room it is
given (the caller gives it what the budget leaves), never a fixed count.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ctxstack.messages import ChatMessage
from ctxstack.tokens import TokenCounter

FACTS_HEADING = "Facts kept verbatim:"
MAX_FACT_CHARS = 200

_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_CJK_SUFFIX = "年月日時分秒円元件個人名泊回歳万億度号枚台本"
_UNIT_WORDS = (
    r"%|kg|g|mg|km|m|cm|mm|ms|s|GB|MB|KB|TB|GiB|MiB|USD|EUR|JPY|GBP|CNY|px|kWh|W|Hz|MHz|GHz"
    r"|ドル|ユーロ|日間|時間|lb|lbs|oz|mi|ft|L|ml|°C|°F|yen|dollars|euros"
)

# The scan is one compiled pattern, so the regex engine (C) walks past everything that
# can never be a fact and Python only sees real candidates. Characters fall in three
# sets: S, those a token must hold (digits, / @ \\ $ #); L, the other token characters
# (ASCII letters, _ . : % + ~ , = ? & -); N, the rest (spaces, quotes, brackets, CJK).
# A *token* is a maximal run of S and L characters holding at least one S ("ORD-99812-XK",
# "https://x.io/a", "2026-03-14T09:30Z"), less the punctuation a value never ends with
# ("630.33," → "630.33"), plus a unit after a space ("3.14159 kg") or CJK date and unit
# suffixes ("2024年3月5日", "42名"); a month name before a day ("March 5, 2024") and a day
# before a month and year ("5 March 2024") are tokens too.
#
# Each match runs to the next S character in one tight loop (``[^S]*``: prose, JSON keys
# and CJK text cost no per-word step) and backs off only over the letters of the token's
# prefix ("ORD-"), to a position no L character precedes. A day that a month name
# precedes ("March 5") refuses to start a token (``_AFTER_MONTH``, which is the month
# alternative read backwards), so the back-off goes on to the month. The text gets a
# sentinel token (" #", never a fact) so every match finds an S ahead and succeeds.
# No match ends inside a run that still holds an S (a unit or an ordinal suffix is not
# taken when one follows), so a match never has to restart: the scan is linear.
_L_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.:%+~,=?&-"
_L_SET = frozenset(_L_CHARS)
_L = r"[A-Za-z_.:%+~,=?&\-]"
_S = r"[0-9/@\\$#]"
_T = r"[A-Za-z_.:%+~,=?&\-0-9/@\\$#]"
_T_END = r"[A-Za-z_%+~0-9/@\\$#]"  # a token character a value may end with
_NOT_S = r"[^0-9/@\\$#]"
_NOT_TOKEN_AHEAD = r"(?!" + _L + r"*+" + _S + r")"  # no S later in this run
_SENTINEL = " #"
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")
# Grouped by first letter: the engine rejects a word on its first character.
_MONTH = (
    r"(?:J(?:an(?:uary)?|une?|uly?)|F(?:eb(?:ruary)?)|M(?:ar(?:ch)?|ay)"
    r"|A(?:pr(?:il)?|ug(?:ust)?)|S(?:ep(?:t(?:ember)?)?)|O(?:ct(?:ober)?)"
    r"|N(?:ov(?:ember)?)|D(?:ec(?:ember)?))"
)
_DAY = r"[0-9]{1,2}(?:(?:st|nd|rd|th)" + _NOT_TOKEN_AHEAD + r")?(?:, [0-9]{4})?(?![0-9])"
_MONTH_FIRST = _MONTH + r"\.? " + _DAY


# The spellings ``_MONTH`` accepts: "Mar", "March", "Sept"…
_MONTH_SPELLINGS = frozenset(name[:n] for name in _MONTH_NAMES for n in (3, 4, len(name))
                             if n == 3 or n == len(name) or name[:n] == "Sept")


def _after_month() -> str:
    """A look-behind true where ``_MONTH_FIRST`` matches from the month name before: the
    spellings ``_MONTH`` accepts, with or without a dot, then a space, not preceded by an
    L character, grouped by width (a look-behind needs a fixed width)."""
    by_width: dict[int, list[str]] = {}
    for spelling in _MONTH_SPELLINGS:
        for dot in ("", "."):
            by_width.setdefault(len(spelling) + len(dot) + 1, []).append(
                re.escape(spelling + dot + " "))
    alternatives = []
    for width in sorted(by_width):
        names = "|".join(sorted(by_width[width]))
        alternatives.append(f"(?<={names})(?<!{_L}(?:{names}))")
    return r"(?<=[a-z.] )(?:" + "|".join(alternatives) + r")(?=" + _DAY + r")"


_AFTER_MONTH = _after_month()
_DAY_FIRST = r"[0-9]{1,2} " + _MONTH + r" [0-9]{4}(?![0-9])"
_UNIT_AFTER = r" (?:" + _UNIT_WORDS + r")(?![A-Za-z0-9])" + _NOT_TOKEN_AHEAD
_CJK_AFTER = r"[" + _CJK_SUFFIX + r"]"
# The token alternative comes before the month-first date: they never match at the same
# place (a month name's letters run into the space after them, where a token needs an S),
# and the token is by far the more common. Optional parts are spelled ``(?:X|)`` rather
# than ``(?:X)?``: the same greedy choice, but a branch, which the engine tries (and
# rejects on its first character) without the bookkeeping of a repeat.
_SCAN = re.compile(
    _NOT_S + r"*(?<!" + _L + r")("
    + r"(?!" + _AFTER_MONTH + r")(?:" + _DAY_FIRST
    + r"|" + _L + r"*+" + _S + r"(?:" + _T + r"*" + _T_END + r"|)"
    + r"(?:" + _UNIT_AFTER + r"|(?:" + _CJK_AFTER + r"(?:[0-9]++(?:[.,][0-9]++)*+|))++|))"
    + r"|" + _MONTH_FIRST + r")"
    + r"|" + _NOT_S + r"*+\Z"  # the end: without it, a text with no S left fails slowly
)
# A quoted phrase: two words or more, not starting with JSON punctuation (so the stretch
# between two quoted JSON strings, '": 8.7, "', is not taken for one).
_QUOTE = re.compile(r'"[^"\n :,;{}\[\]][^"\n ]{0,79}+ [^"\n]{1,80}+"')
_CJK_QUOTE = re.compile(r"[“「『][^\"“「『”」』\n]{2,160}+[”」』]")
_CURRENCY = re.compile(r"[€£¥₹] ?\d[\d,]*+(?:\.\d+)?")
# A file extension; the look-ahead rejects the dots of decimals and sentence ends at once.
_EXTENSIONS = (
    "py", "js", "ts", "tsx", "jsx", "json", "csv", "tsv", "txt", "md", "yaml", "yml", "toml",
    "ini", "cfg", "conf", "pdf", "png", "jpg", "jpeg", "gif", "svg", "xls", "xlsx", "doc",
    "docx", "ppt", "pptx", "htm", "html", "css", "sql", "log", "sh", "go", "rs", "java",
    "kt", "rb", "php", "c", "cc", "cpp", "h", "hpp", "zip", "gz", "tar", "parquet", "ipynb",
)
_EXTENSION = re.compile(r"\.(?=[a-z])(?:" + "|".join(_EXTENSIONS) + r")(?![A-Za-z0-9_])")
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
MAX_NAME = 128

# Classification: anchored full matches over one short candidate (≤ MAX_FACT_CHARS).
_KINDS: list[tuple[str, str, int, re.Pattern[str]]] = [
    (leads, kind, score, re.compile(pattern))
    for leads, kind, score, pattern in [
        ("a", "url", 9, r"(?:https?|ftp)://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"),
        ("ad", "email", 9, r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"),
        ("ad", "uuid", 9, r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),  # noqa: E501
        ("d", "date", 8, r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"),  # noqa: E501
        ("d", "date", 8, r"\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}\.\d{1,2}\.\d{4}"),
        ("d", "date", 8, r"(?:\d{4}年)?\d{1,2}月(?:\d{1,2}日)?|\d{4}年"),
        ("a", "date", 8, rf"(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?(?:, \d{{4}})?"),
        ("d", "date", 8, rf"\d{{1,2}} (?:{_MONTHS}) \d{{4}}"),
        ("d", "time", 5, r"\d{1,2}:\d{2}(?::\d{2})?"),
        ("d", "ip", 7, r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?"),
        ("ad", "version", 6, r"v?\d+(?:\.\d+){2,}(?:[-+][0-9A-Za-z.-]+)?|v\d+(?:\.\d+)?"),
        ("o", "money", 8, r"[$€£¥₹] ?\d[\d,]*(?:\.\d+)?(?: ?(?:[kKMB]|million|billion))?"),
        ("d", "money", 8, r"\d[\d,]*(?:\.\d+)?(?:円|万円|億円|元|ドル|ユーロ| ?(?:USD|EUR|JPY|GBP|CNY|yen))"),  # noqa: E501
        ("ao", "path", 7, r"(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[A-Za-z0-9._\-/\\]*[A-Za-z0-9_\-]"),
        ("ado", "path", 7, r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_-]+\.[A-Za-z0-9]{1,8}"),  # noqa: E501
        ("ad", "file", 6, r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.[A-Za-z][A-Za-z0-9]{0,7}"),
        ("ad", "identifier", 9, r"(?=[A-Za-z0-9_-]*[A-Za-z])(?=[A-Za-z_-]*\d)[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+"),  # noqa: E501
        ("d", "quantity", 6, rf"\d[\d,]*+(?:\.\d++)? ?(?:{_UNIT_WORDS})|\d[\d,]*+(?:\.\d++)?[{_CJK_SUFFIX}]+"),  # noqa: E501
        ("d", "decimal", 6, r"\d[\d,]*\.\d+"),
        ("o", "issue", 5, r"#\d+"),
        ("d", "number", 5, r"\d{1,3}(?:,\d{3})+"),
        ("ad", "code", 4, r"(?!\d+(?:st|nd|rd|th)$)(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{4,}"),
        ("d", "number", 3, r"\d{4,}"),
        ("d", "small_number", 1, r"\d{2,3}"),
    ]
]


class Candidate(tuple[str, str, int]):
    """One value found in a text: ``(fact, kind, score)`` — its exact form, kind and base
    distinctiveness. Built from that one tuple, ``Candidate((fact, kind, score))``: a plain
    tuple subclass is constructed in C, where a ``NamedTuple`` runs a Python ``__new__``
    (the extractor builds one per value of a tool output)."""

    __slots__ = ()

    @property
    def fact(self) -> str:
        return self[0]

    @property
    def kind(self) -> str:
        return self[1]

    @property
    def score(self) -> int:
        return self[2]

    def __repr__(self) -> str:
        return f"Candidate(fact={self[0]!r}, kind={self[1]!r}, score={self[2]!r})"


# Per leading character class ("d" digit, "a" letter, "o" other), one alternation of
# the kinds that can start that way, tried in priority order: one C call per token.
_CLASSIFIERS = {
    lead: re.compile("|".join(
        f"(?P<k{i}>{k[3].pattern})" for i, k in enumerate(_KINDS) if lead in k[0]))
    for lead in "dao"
}
_KIND_OF = {f"k{i}": (kind, score) for i, (_, kind, score, _) in enumerate(_KINDS)}


def classify(token: str) -> tuple[str, int] | None:
    """(kind, distinctiveness) of one candidate token, or None when it is not a fact."""
    if len(token) > MAX_FACT_CHARS:
        return None
    first = token[0]
    if first.isascii() and first.isdigit():
        if token.isdigit() and token.isascii():  # the common case in tool output
            size = len(token)
            return ("number", 3) if size >= 4 else ("small_number", 1) if size >= 2 else None
        head, dot, tail = token.partition(".")
        if dot and head.isdigit() and tail.isdigit() and token.isascii():
            return "decimal", 6
        lead = "d"
    else:
        lead = "a" if first.isascii() and first.isalpha() else "o"
    match = _CLASSIFIERS[lead].fullmatch(token)
    if match is None or match.lastgroup is None:
        return None
    return _KIND_OF[match.lastgroup]


# Classification never looks at *which* digit a token holds (every pattern uses \\d,
# [0-9] or a hex class), so tokens of the same *shape* — ASCII digits replaced by "0" —
# share one verdict: the thousand timestamps of a metrics dump are classified once.
_SHAPE = bytes.maketrans(b"123456789", b"000000000")


def _judge(shape: str) -> tuple[str, int] | tuple[()] | None:
    """(kind, score) for a token of this digit shape; when it is not a fact,
    ``_PREFIXED`` if it starts with a letter prefix (it is retried without), else None."""
    verdict = classify(shape) if shape else None
    return _PREFIXED if verdict is None and shape and shape[0] in _L_SET else verdict


_PREFIXED: tuple[()] = ()  # falsy like None, told apart by identity
_MISSING = object()
_VERDICTS: dict[str, Any] = {}  # shape → verdict; a plain dict: ``get`` maps in C
MAX_VERDICTS = 65_536


def _verdicts(shapes: list[str]) -> list[Any]:
    """The verdict of each shape: cached ones by one C-level ``map``; each new shape is
    judged once, however many of the tokens have it (the first metrics dump's thousand
    timestamps cost one judgement), then filled in by a second ``map``."""
    try:  # the common case, every shape cached: one map, no scan of the list for misses
        return list(map(_VERDICTS.__getitem__, shapes))
    except KeyError:
        pass
    verdicts = list(map(_VERDICTS.get, shapes, itertools.repeat(_MISSING)))
    if _MISSING in verdicts:
        if len(_VERDICTS) > MAX_VERDICTS:
            _VERDICTS.clear()
        missing = map(operator.is_, verdicts, itertools.repeat(_MISSING))
        new = {shape: _judge(shape)
               for shape in dict.fromkeys(itertools.compress(shapes, missing))}
        _VERDICTS.update(new)
        verdicts = list(map(new.get, shapes, verdicts))  # a cached shape is not in new
    return verdicts


def clear_caches() -> None:
    """Forget every cached verdict (benchmarks measure first-time extraction)."""
    _VERDICTS.clear()


def _shapes(tokens: list[str]) -> list[str]:
    """The digit shape of each token, in one pass over all of them (no token holds NUL).
    Shapes are ``str`` so the verdict cache keys on them directly (its fast path)."""
    # bytes.translate (one 256-byte table) is far cheaper than str.translate, which looks
    # each distinct character up in its dict anew on every call (~1 µs a call).
    joined = "\0".join(tokens)
    if joined.isascii():  # encoding and decoding ASCII are plain copies
        return joined.encode().translate(_SHAPE).decode().split("\0")
    data = joined.encode("utf-8", "surrogatepass").translate(_SHAPE)
    return data.decode("utf-8", "surrogatepass").split("\0")


def _file_names(text: str) -> list[str]:
    """``name.ext`` file names (no digit or slash needed): the name is read back from the
    extension over at most ``MAX_NAME`` name characters (hits are rare)."""
    names = []
    for match in _EXTENSION.finditer(text):
        start = match.start()
        floor = max(0, start - MAX_NAME)
        begin = floor + len(text[floor:start].rstrip(_NAME_CHARS))
        if begin < start and not (begin and text[begin - 1] in "/\\"):
            names.append(text[begin:match.end()].lstrip("."))
    return names


def _without_prefix(rejected: Iterable[str]) -> list[str]:
    """Rejected tokens with a letter prefix, retried from their first S character: "x-12"
    is no identifier, but "12" may be a value. A token whose first S character is ``/``,
    ``@`` or ``\\`` is not retried ("and/or" is no path, so neither is "/or")."""
    return [token for token in (whole.lstrip(_L_CHARS) for whole in rejected)
            if token and token[0] not in "/@\\"]


def _of_kind(found: list[str], verdict: tuple[str, int]) -> list[Candidate]:
    """Candidates of one kind for the distinct ``found`` values, first occurrence first."""
    rows = map(operator.add, zip(dict.fromkeys(found)), itertools.repeat(verdict))
    return list(map(Candidate, rows))


def _candidates(tokens: list[str], verdicts: list[Any]) -> list[Candidate]:
    """The candidates of the tokens whose verdict is a ``(kind, score)``, in order."""
    facts = itertools.compress(tokens, verdicts)
    return list(map(Candidate, map(operator.add, zip(facts), filter(None, verdicts))))


def _retried(prefixed: Iterable[str], seen: Any) -> list[Candidate]:
    """Candidates among rejected tokens with a letter prefix, retried without it (a
    retried token already ``seen`` keeps its first place)."""
    retry = [t for t in dict.fromkeys(_without_prefix(prefixed)) if t not in seen]
    return _candidates(retry, _verdicts(_shapes(retry))) if retry else []


def _token_candidates(text: str, names: list[str]) -> list[Candidate]:
    """Candidates of the scan's tokens, then of ``names``."""
    found = _SCAN.findall(text + _SENTINEL)
    del found[-2:]  # the sentinel token and the empty end match
    found += names
    if not found:
        return []
    tokens = list(dict.fromkeys(found))  # values recur (keys, repeated ids)
    # No Python-level loop per token: shapes, verdicts and the candidate tuples are
    # built by C calls over whole lists; only rejected tokens with a letter prefix are
    # retried.
    verdicts = _verdicts(_shapes(tokens))
    out = _candidates(tokens, verdicts)
    if _PREFIXED in verdicts:
        prefixed = map(operator.is_, verdicts, itertools.repeat(_PREFIXED))
        out += _retried(itertools.compress(tokens, prefixed), set(tokens))
    return out


_QUOTE_VERDICT = ("quote", 6)


def extract_candidates(text: str, *, quotes: bool = True) -> list[Candidate]:
    """The distinct fact candidates in ``text``, roughly in order of appearance.

    ``quotes=False`` skips quoted phrases (JSON tool output is full of quoted strings
    that are data, not constraints someone stated).
    """
    out = _token_candidates(text, _file_names(text) if "." in text else [])
    # Quoted phrases and currency amounts hold characters no token does ('"', '€',
    # '「'): they never collide with a token, only with their own repetitions.
    if quotes and '"' in text:
        out += _of_kind(_QUOTE.findall(text), _QUOTE_VERDICT)
    if not text.isascii():  # (a substring test is far cheaper than a scan)
        if "€" in text or "£" in text or "¥" in text or "₹" in text:
            out += _of_kind(_CURRENCY.findall(text), ("money", 8))
        if quotes and ("「" in text or "“" in text or "『" in text):
            out += _of_kind(_CJK_QUOTE.findall(text), ("quote", 6))
    return out


def extract_facts(text: str) -> list[str]:
    """Exact-value facts in ``text`` (bare small numbers excluded), in scan order."""
    return [c.fact for c in extract_candidates(text) if c.kind != "small_number"]


def normalize(text: str) -> str:
    """Form used to test whether a fact is present: case-folded, thousands commas dropped."""
    return text.casefold().replace(",", "")


def _values(obj: Any) -> Iterable[str]:
    """String and number leaves of decoded tool-call arguments."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _values(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _values(v)
    elif isinstance(obj, str | int | float) and not isinstance(obj, bool):
        yield str(obj)


def message_fact_text(message: ChatMessage) -> str:
    """The text facts are read from: content text plus tool-call argument values."""
    if not message.tool_calls:
        return message.text
    args = " ".join(v for c in message.tool_calls for v in _values(c.arguments))
    return f"{message.text} {args}"


_TIERS = {"user": 0, "system": 1, "assistant": 1, "tool": 2}
# Any decimal digit (what ``\\d`` matches) → "0": the shape a candidate's repetition is
# counted by ("word16", "word17" … share one).
_ZERO_DIGITS = {c: "0" for c in range(0x110000) if chr(c).isdecimal()}


class _Ranked(tuple[str, str, int, float, int]):
    """A ranked candidate ``(fact, key, tier, score, position)`` (a tuple built in C)."""

    __slots__ = ()

    @property
    def fact(self) -> str:
        return self[0]

    @property
    def key(self) -> str:
        return self[1]

    @property
    def tier(self) -> int:
        return self[2]

    @property
    def score(self) -> float:
        return self[3]

    @property
    def position(self) -> int:
        return self[4]

    @property
    def sort_key(self) -> tuple[bool, int, float, int]:
        # Weak candidates (bare small numbers, heavily repeated shapes) go last whatever
        # their tier; otherwise the tier, then distinctiveness, then recency.
        return (self[3] < 3, self[2], -self[3], -self[4])


def _each(texts: list[str], transform: Any) -> list[str]:
    """``transform`` applied to every text in one call (none holds NUL): C, not a loop."""
    return list(transform("\0".join(texts)).split("\0"))




def rank_candidates(
    sources: Sequence[tuple[str, int, int]], present: str
) -> list[_Ranked]:
    """Rank the candidates of ``(text, tier, position)`` sources not already in ``present``.

    Pure: distinctiveness by kind, minus a penalty for shapes repeated across many
    sources; the best occurrence of each value wins. Every per-candidate step is a C call
    over a whole list (shapes, normalised keys, the spread Counter, the sort); Python
    only loops over the distinct shapes.
    """
    per_source = [extract_candidates(text, quotes=tier != _TIERS["tool"])
                  for text, tier, _ in sources]
    found = list(itertools.chain.from_iterable(per_source))
    if not found:
        return []
    facts = list(map(_FACT, found))
    shapes = _each(facts, operator.methodcaller("translate", _ZERO_DIGITS))
    sizes = list(map(len, per_source))
    spread: Counter[str] = Counter()
    for start, end in itertools.pairwise(itertools.accumulate(sizes, initial=0)):
        spread.update(set(shapes[start:end]))  # a shape counts once per source
    many = max(4, len(sources) // 10)
    penalty = {shape: math.log2(count / many) + 3
               for shape, count in spread.items() if count > many}
    scores = list(map(float.__sub__, map(float, map(_SCORE_OF, found)),
                      map(penalty.get, shapes, itertools.repeat(0.0))))
    keys = _each(facts, normalize)
    tiers = list(itertools.chain.from_iterable(
        map(itertools.repeat, (tier for _, tier, _ in sources), sizes)))
    positions = list(itertools.chain.from_iterable(
        map(itertools.repeat, (position for _, _, position in sources), sizes)))
    # Kept: not in ``present``, and not penalised to nothing (a loop counter, a table's
    # row numbers); unpenalised scores are at least 1.
    kept = list(map(operator.and_, map(operator.not_, map(present.__contains__, keys)),
                    map((0.0).__lt__, scores)))
    rows = list(itertools.compress(zip(facts, keys, tiers, scores, positions, strict=True),
                                   kept))
    keys = list(itertools.compress(keys, kept))
    scores = list(itertools.compress(scores, kept))
    # _Ranked.sort_key, for all rows at once.
    sort_keys = list(zip(map((3.0).__gt__, scores), itertools.compress(tiers, kept),
                         map(operator.neg, scores),
                         map(operator.neg, itertools.compress(positions, kept)), strict=True))
    # The best occurrence of each key is its first in sort order (a stable sort: the
    # earliest of equal ones); the keys then rank by it, ties by first appearance.
    order = sorted(range(len(rows)), key=sort_keys.__getitem__)
    best = dict(zip(map(keys.__getitem__, reversed(order)), reversed(order), strict=True))
    first_seen = dict(zip(dict.fromkeys(keys), itertools.count(), strict=False))
    winners = list(best.values())
    ranked = sorted(zip(map(sort_keys.__getitem__, winners),
                        map(first_seen.__getitem__, best), winners, strict=True))
    return list(map(_Ranked, map(rows.__getitem__, map(_LAST, ranked))))


_FACT, _SCORE_OF, _LAST = operator.itemgetter(0), operator.itemgetter(2), operator.itemgetter(-1)


def select_facts(
    messages: Sequence[ChatMessage],
    summary: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    previous_summary: str | None = None,
) -> list[str]:
    """Facts from ``messages`` (and the previous summary) missing from ``summary``.

    At most ``max_tokens`` worth (as rendered by :func:`format_facts`), best first (see
    the module doc): the order the next compaction reads them back in. Tool output may
    take at most half the room, so bulk data cannot crowd out what the user said.
    """
    if max_tokens <= 0:
        return []
    sources: list[tuple[str, int, int]] = []
    if previous_summary:
        # What earlier compactions kept must survive this one too, or a rolling summary
        # forgets a little more every round: the previous facts list ranks with the user.
        body, _, kept = previous_summary.partition(FACTS_HEADING)
        sources.append((kept, 0, len(messages) + 1))
        sources.append((body, 1, -1))
    sources.extend((message_fact_text(m), _TIERS[m.role], i) for i, m in enumerate(messages))
    ranked = rank_candidates(sources, normalize(summary))

    chosen: list[_Ranked] = []
    used = counter.count_text(FACTS_HEADING)
    tool_used, tool_cap = 0, max_tokens // 2
    for cand in ranked:
        if any(cand.key in c.key for c in chosen):
            continue
        cost = counter.count_text(f"- {cand.fact}") + 1
        is_tool = cand.tier == _TIERS["tool"]
        if used + cost > max_tokens or (is_tool and tool_used + cost > tool_cap):
            continue
        chosen.append(cand)
        used += cost
        tool_used += cost if is_tool else 0
    facts = [c.fact for c in chosen]
    while facts and counter.count_text(format_facts(facts)) > max_tokens:
        facts.pop()
    return facts


def format_facts(facts: Sequence[str]) -> str:
    """The block appended to a summary (empty string for no facts)."""
    if not facts:
        return ""
    return FACTS_HEADING + "\n" + "\n".join(f"- {f}" for f in facts)
