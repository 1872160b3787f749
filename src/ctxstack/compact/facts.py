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
import math
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

# The scan runs over the UTF-8 bytes (CPython's byte regexes run several times faster
# than str ones) and no pattern starts with a letter, so the engine skips prose in C.
# A *token* is a maximal run of _T bytes holding at least one _S byte ("ORD-99812-XK").
# Scanning forward from its first _S byte gives the token minus its letter prefix;
# scanning the reversed bytes from its last _S byte gives it minus its suffix. Each token
# yields exactly one match in each direction, so the two lists pair up and the token is
# rebuilt without any per-character Python. Every repetition is possessive: linear.
_T = rb"[A-Za-z0-9_./:@%+#~,=?&\\$-]"
_S = rb"[0-9/@\\$#]"
_T_NOT_S = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.:%+~,=?&-"
_MONTHS_B = _MONTHS.encode()
_FORWARD = re.compile(
    _S + _T + rb"*+(?: (?:" + _UNIT_WORDS.encode() + rb")(?![A-Za-z0-9]))?"
)
_BACKWARD = re.compile(_S + _T + rb"*+")
# Month names start with one of eight capitals: a leading class lets the engine skip.
_MONTH_TAIL = (
    rb"(?:an(?:uary)?|eb(?:ruary)?|ar(?:ch)?|pr(?:il)?|ay|une?|uly?|ug(?:ust)?"
    rb"|ep(?:t(?:ember)?)?|ct(?:ober)?|ov(?:ember)?|ec(?:ember)?)"
)
_MONTH_FIRST = re.compile(
    rb"[ADFJMNOS]" + _MONTH_TAIL + rb"\.? [0-9]{1,2}(?:st|nd|rd|th)?(?:, [0-9]{4})?(?![0-9])"
)
_MONTH_PREFIXES = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep",
                   b"Oct", b"Nov", b"Dec")
_DAY_MONTH = re.compile(rb"[0-9]{1,2} [ADFJMNOS]" + _MONTH_TAIL + rb" [0-9]{4}")
_CJK_ALT = "|".join(re.escape(c.encode()).decode("latin-1") for c in _CJK_SUFFIX).encode("latin-1")
_CJK_NUMBER = re.compile(rb"[0-9][0-9.,]*+(?:(?:" + _CJK_ALT + rb")[0-9.,]*+)+")
_QUOTE = re.compile(rb'"[^"\n ]{1,80}+ [^"\n]{1,80}+"')
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


@functools.lru_cache(maxsize=65_536)
def _judge(raw: bytes) -> Candidate | None:
    """The candidate a scanned byte span stands for, if any (cached: tokens recur)."""
    token = _trim(raw.decode("utf-8", "replace"))
    kind = classify(token) if token else None
    return Candidate(token, *kind) if kind is not None else None


def _tokens(data: bytes) -> Iterable[bytes]:
    """The distinct tokens of ``data`` (see the scan comment), in order of appearance."""
    forward = _FORWARD.findall(data)
    backward = _BACKWARD.findall(data[::-1])
    if len(forward) != len(backward):  # cannot happen by construction; stay correct anyway
        yield from dict.fromkeys(forward)
        return
    backward.reverse()
    for fwd, bwd in dict.fromkeys(zip(forward, backward, strict=True)):
        head = bwd[::-1]  # the token up to its last _S byte
        prefix = len(head) - len(head.lstrip(_T_NOT_S))
        if not prefix:
            yield fwd
            continue
        whole = head + fwd[len(head) - prefix:]
        if _judge(whole) is not None or fwd[0] in b"/@\\":
            yield whole  # "and/or" is not a path, so "/or" is not tried alone
        else:
            yield fwd  # "x-12" may be a value without its prefix


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
    raw: list[bytes] = []
    if any(month in data for month in _MONTH_PREFIXES):  # a few memchr-speed checks
        raw.extend(_MONTH_FIRST.findall(data))
        raw.extend(_DAY_MONTH.findall(data))
    raw.extend(_tokens(data))
    if b"." in data:
        raw.extend(_file_names(data))
    ascii_only = text.isascii()
    if not ascii_only:
        raw.extend(_CJK_NUMBER.findall(data))
    for token in raw:
        cand = _judge(token)
        if cand is not None and cand.fact not in out:
            out[cand.fact] = cand
    if quotes and b'"' in data:
        for quoted in _QUOTE.findall(data):
            out.setdefault(quoted.decode(), Candidate(quoted.decode(), "quote", 6))
    if not ascii_only:
        for money in _CURRENCY.findall(text):
            out.setdefault(money, Candidate(money, "money", 8))
        for quoted in _CJK_QUOTE.findall(text) if quotes else ():
            out.setdefault(quoted, Candidate(quoted, "quote", 6))
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
