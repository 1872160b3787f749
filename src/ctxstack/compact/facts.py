"""Exact values a summary must not lose, chosen by what they are, and the facts list.

Summarisers paraphrase, and paraphrase is where numbers drift: "about 1,500 yen",
"the order from last week", "the config file". The exact value is usually what the user
asks about next. So after every summarisation ctxstack scans the folded messages for
values whose exact form matters and re-attaches those the summary does not contain,
verbatim, under a ``Facts kept verbatim:`` heading.

**What a candidate is** (:func:`extract_candidates`). One linear scan finds every token
that starts with a digit, ``/``, ``\\``, ``@``, a currency sign or ``#`` (plus quoted
phrases); each is widened left over identifier characters (``ORD-`` in ``ORD-99812-XK``,
``https:`` before ``//``, the local part of an e-mail) and right over CJK date and unit
suffixes, and a month name around a day number joins it. Then it is *classified*: URL,
e-mail, UUID, date (ISO, slashed, CJK ``2024年3月5日``, ``March 5, 2024``), time, IP,
version, path, money, decimal (with its unit: ``3.14159 kg``), identifier mixing letters
and digits with separators, issue number, large number, quoted constraint — or rejected
(``1st``, ``and/or``, a lone digit). Every regex here is linear: a scan never re-reads a
character, which a test checks on 100,000-character adversarial strings; throughput is in
``benchmarks/bench_recall.py``.

**Which candidates win** (:func:`select_facts`). Each kind has a *distinctiveness* score
(an order id or a URL outranks a bare ``17``); tokens whose *shape* (digits replaced by
``0``) recurs across many messages — ``word16``, ``word17``… from a loop, row numbers of a
table — are penalised, and bare small numbers rank last. What the user stated (and what
the previous summary already kept) comes first, then the assistant's, then tool output;
within a tier the more distinctive, then the newer. The list fills the token room it is
given (the caller gives it what the budget leaves), never a fixed count.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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

# The scan runs over the UTF-8 bytes, first translated to byte *classes* (a C table
# lookup per byte): "1" for the bytes a token must hold (digits, / @ \\ $ #), "a" for the
# other token bytes (letters, _ . : % + ~ , = ? & -). A *token* is a maximal run of those
# holding at least one "1" byte ("ORD-99812-XK"); the scan looks for a literal "1", so
# the engine skips prose at memchr speed instead of testing a character class per byte.
# Every repetition is possessive and no scan restarts inside a run: linear.
_T_NOT_S = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.:%+~,=?&-"
_T_NOT_S_SET = frozenset(_T_NOT_S)
_S_BYTES = b"0123456789/@\\$#"
_CLASSES = bytes(
    ord("1") if b in _S_BYTES else ord("a") if b in _T_NOT_S else ord(" ") if b == 0x20
    else ord("c") if 0xE4 <= b <= 0xE9 else ord("u") if b in (0xC2, 0xE3) else ord(".")
    for b in range(256))
_CLASS_TOKEN = re.compile(rb"1[1a]*+")  # a literal first byte: memchr-speed skipping
_UNIT_AFTER = re.compile(rb" (?:" + _UNIT_WORDS.encode() + rb")(?![A-Za-z0-9])")
# Month names start with one of eight capitals: a leading class lets the engine skip.
_MONTH_TAIL = (
    rb"(?:an(?:uary)?|eb(?:ruary)?|ar(?:ch)?|pr(?:il)?|ay|une?|uly?|ug(?:ust)?"
    rb"|ep(?:t(?:ember)?)?|ct(?:ober)?|ov(?:ember)?|ec(?:ember)?)"
)
# One pass per text for both orders: "March 5, 2024" / "Mar. 5th", and "5 March 2024"
# (matched from the month as "March 2024", its day then read from the two bytes before).
_MONTH_DATE = re.compile(
    rb"[ADFJMNOS]" + _MONTH_TAIL
    + rb"(?:\.? [0-9]{1,2}(?:st|nd|rd|th)?(?:, [0-9]{4})?(?![0-9])|(?P<year> [0-9]{4}))"
)
_DIGIT_BYTES = frozenset(b"0123456789")
_NOT_MONTH_CAPITALS = bytes(b for b in range(256) if b not in b"ADFJMNOS")
_CJK_ALT = "|".join(re.escape(c.encode()).decode("latin-1") for c in _CJK_SUFFIX).encode("latin-1")
# Tried only where a token is followed by a CJK character. It starts at the first digit
# of a run (the look-behind), so a long digit run is never re-read from each digit.
_CJK_NUMBER = re.compile(
    rb"[0-9](?<![0-9.,][0-9])[0-9.,]*+(?:(?:" + _CJK_ALT + rb")[0-9.,]*+)+")
# A quoted phrase: two words or more, not starting with JSON punctuation (so the stretch
# between two quoted JSON strings, '": 8.7, "', is not taken for one).
_QUOTE = re.compile(rb'"[^"\n :,;{}\[\]][^"\n ]{0,79}+ [^"\n]{1,80}+"')
_CJK_QUOTE = re.compile(r"[“「『][^\"“「『”」』\n]{2,160}+[”」』]")
_CURRENCY = re.compile(r"[€£¥₹] ?\d[\d,]*+(?:\.\d+)?")
_EXTENSION = re.compile(
    rb"\.(?:py|js|ts|tsx|jsx|json|csv|tsv|txt|md|yaml|yml|toml|ini|cfg|conf|pdf|png|jpe?g|gif"
    rb"|svg|xlsx?|docx?|pptx?|html?|css|sql|log|sh|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|zip|gz"
    rb"|tar|parquet|ipynb)(?![A-Za-z0-9_])"
)
_NAME_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
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
_TRAILING = ".,;:!?'\"=&?-"


class Candidate(NamedTuple):
    """One value found in a text: its exact form, kind and base distinctiveness."""

    fact: str
    kind: str
    score: int


_new_candidate = tuple.__new__  # a C call, where Candidate(...) runs a Python __new__


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


def _trim(token: str) -> str:
    token = token.rstrip(_TRAILING)
    while token.endswith(")") and token.count(")") > token.count("("):
        token = token[:-1].rstrip(_TRAILING)
    return token


# Classification never looks at *which* digit a token holds (every pattern uses \\d,
# [0-9] or a hex class), so tokens of the same *shape* — ASCII digits replaced by "0" —
# share one verdict: the thousand timestamps of a metrics dump are classified once.
_SHAPE = bytes.maketrans(b"123456789", b"000000000")
_shape = operator.methodcaller("translate", _SHAPE)
_KEEP, _KIND, _SCORE = (operator.itemgetter(i) for i in range(3))
_decode = operator.methodcaller("decode", "utf-8", "surrogatepass")  # as it was encoded


@functools.lru_cache(maxsize=65_536)
def _verdict(shape: bytes) -> tuple[int, str, int] | None:
    """(characters kept after trimming, kind, score) for a token of this digit shape."""
    token = _trim(shape.decode("utf-8", "replace"))
    kind = classify(token) if token else None
    return (len(token), *kind) if kind is not None else None


def clear_caches() -> None:
    """Forget every cached verdict (benchmarks measure first-time extraction)."""
    _verdict.cache_clear()


_A, _C, _SPACE = ord("a"), ord("c"), ord(" ")
# "p" for a byte that may begin a token before its first "1"-class byte (a letter prefix).
_PREFIXED = bytes(ord("p") if b in _T_NOT_S_SET else ord(".") for b in range(256))
# The classes of a byte that can start a unit: a letter or "%" ("a"), a lead byte of a
# CJK unit ("c"), of "°" or of ドル/ユーロ ("u").
_UNIT_START = bytes(1 if b in b"acu" else 0 for b in range(256))


def _tokens(data: bytes, *, cjk: bool = False) -> list[bytes]:
    """The tokens of ``data`` (see the scan comment), in order of appearance, then (with
    ``cjk``) the CJK dates and quantities.

    The scan finds each token's span in the class string; only a few tokens need more,
    each decided by the class of one byte: a letter prefix (``ORD-`` in ``ORD-99812-XK``)
    read back to the previous non-token byte (bounded by ``MAX_FACT_CHARS``: a longer
    token is no fact), a unit after a space (``3.14159 kg``), and a CJK date or quantity
    (``2024年3月5日``) read forward from the token's start.
    """
    classes = data.translate(_CLASSES)
    if b"1" not in classes:
        return []
    out: list[bytes] = []
    extra: list[bytes] = []
    marks = b""
    reached = 0
    size = len(data)
    for match in _CLASS_TOKEN.finditer(classes):
        start, end = match.span()
        token = data[start:end]
        if start and classes[start - 1] == _A:
            marks = marks or data.translate(_PREFIXED)  # "p" for prefix bytes
            floor = max(0, start - MAX_FACT_CHARS)
            whole = data[marks.rfind(b".", floor, start) + 1 or floor:start] + token
            if token[0] in b"/@\\" or _verdict(whole.translate(_SHAPE)) is not None:
                token = whole  # "and/or" is not a path, so "/or" is not tried alone
            # else keep the token alone: "x-12" may be a value without its prefix
        if end + 1 < size and classes[end] == _SPACE and _UNIT_START[classes[end + 1]]:
            unit = _UNIT_AFTER.match(data, end)
            if unit is not None:
                token += unit.group()
        out.append(token)
        if cjk and end < size and classes[end] == _C:
            found = _CJK_NUMBER.search(data, max(start, reached), start + MAX_FACT_CHARS)
            if found is not None:
                extra.append(found.group())
                reached = found.end()  # "3月5日" once, not "5日" again
    return out + extra


def _month_dates(data: bytes) -> Iterable[bytes]:
    """Dates with an English month name, either order (hits are rare)."""
    for match in _MONTH_DATE.finditer(data):
        if match.lastgroup != "year":
            yield match.group()  # month first: "March 5", "March 5, 2024", "Mar. 5th"
            continue
        start = match.start()  # "March 2024" is a date only after a day: "5 March 2024"
        if start >= 2 and data[start - 1] == 0x20 and data[start - 2] in _DIGIT_BYTES:
            day = start - 3 if start >= 3 and data[start - 3] in _DIGIT_BYTES else start - 2
            yield data[day:match.end()]


def _file_names(data: bytes) -> Iterable[bytes]:
    """``name.ext`` file names (no digit or slash needed); hits are rare, so widening the
    name leftwards byte by byte costs little."""
    for match in _EXTENSION.finditer(data):
        start = match.start()
        floor = max(0, start - MAX_NAME)
        while start > floor and data[start - 1] in _NAME_BYTES:
            start -= 1
        if start < match.start() and not (start and data[start - 1] in b"/\\"):
            yield data[start:match.end()].lstrip(b".")


def extract_candidates(text: str, *, quotes: bool = True) -> list[Candidate]:
    """The distinct fact candidates in ``text``, roughly in order of appearance.

    ``quotes=False`` skips quoted phrases (JSON tool output is full of quoted strings
    that are data, not constraints someone stated).
    """
    data = text.encode("utf-8", "surrogatepass")
    out: dict[str, Candidate] = {}
    ascii_only = data.isascii()
    raw = _tokens(data, cjk=not ascii_only)
    if raw and data.translate(None, _NOT_MONTH_CAPITALS):  # a month date needs a digit
        raw[:0] = _month_dates(data)  # and a month name its capital
    if b"." in data:
        raw.extend(_file_names(data))
    distinct = dict.fromkeys(raw)  # tokens recur (keys, repeated values)
    verdicts = list(map(_verdict, map(_shape, distinct)))
    if any(verdicts):
        # No Python-level loop per token: decode all at once (no token holds a NUL
        # byte), keep the judged ones, cut each to its trimmed length, build the tuples.
        texts = b"\0".join(distinct).decode("utf-8", "replace").split("\0")
        judged = list(filter(None, verdicts))
        facts = list(map(str.__getitem__, itertools.compress(texts, verdicts),
                         map(slice, map(_KEEP, judged))))
        rows = zip(facts, map(_KIND, judged), map(_SCORE, judged), strict=True)
        out = dict(zip(facts, map(_new_candidate, itertools.repeat(Candidate), rows),
                       strict=True))
    if quotes and b'"' in data:
        for quoted in map(_decode, _QUOTE.findall(data)):
            if quoted not in out:
                out[quoted] = Candidate(quoted, "quote", 6)
    if not ascii_only:
        if any(sign in text for sign in "€£¥₹"):
            for money in _CURRENCY.findall(text):
                if money not in out:
                    out[money] = Candidate(money, "money", 8)
        if quotes and ("「" in text or "“" in text or "『" in text):
            for quoted in _CJK_QUOTE.findall(text):
                if quoted not in out:
                    out[quoted] = Candidate(quoted, "quote", 6)
    return list(out.values())


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
_DIGITS = re.compile(r"\d")


@dataclass(frozen=True, slots=True)
class _Ranked:
    fact: str
    key: str
    tier: int
    score: float
    position: int

    @property
    def sort_key(self) -> tuple[bool, int, float, int]:
        # Weak candidates (bare small numbers, heavily repeated shapes) go last whatever
        # their tier; otherwise the tier, then distinctiveness, then recency.
        return (self.score < 3, self.tier, -self.score, -self.position)


def rank_candidates(
    sources: Sequence[tuple[str, int, int]], present: str
) -> list[_Ranked]:
    """Rank the candidates of ``(text, tier, position)`` sources not already in ``present``.

    Pure: distinctiveness by kind, minus a penalty for shapes repeated across many
    sources; the best occurrence of each value wins.
    """
    per_source = [extract_candidates(text, quotes=tier != _TIERS["tool"])
                  for text, tier, _ in sources]
    shapes: Counter[str] = Counter()
    for found in per_source:
        shapes.update({_DIGITS.sub("0", c.fact) for c in found})
    many = max(4, len(sources) // 10)
    best: dict[str, _Ranked] = {}
    for (_, tier, position), found in zip(sources, per_source, strict=True):
        for cand in found:
            key = normalize(cand.fact)
            if key in present:
                continue
            score = float(cand.score)
            spread = shapes[_DIGITS.sub("0", cand.fact)]
            if spread > many:
                score -= math.log2(spread / many) + 3
                if score <= 0:
                    continue  # a loop counter or table row number, not a fact
            ranked = _Ranked(cand.fact, key, tier, score, position)
            old = best.get(key)
            if old is None or ranked.sort_key < old.sort_key:
                best[key] = ranked
    return sorted(best.values(), key=lambda r: r.sort_key)


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
