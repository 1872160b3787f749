"""Exact values a summary must not lose, and the "Facts kept verbatim" list.

Summarisers paraphrase, and paraphrase is where numbers drift: "about 1,500 yen",
"the order from last week", "the config file". The exact value is usually what the user
asks about next. So after every summarisation ctxstack scans the folded messages for
values whose exact form matters — URLs, e-mail addresses, file paths, dates and times,
version strings, IP addresses, UUIDs and other identifiers, amounts of money, numbers with
units, multi-digit numbers — and re-attaches those that the summary does not contain,
verbatim, under a ``Facts kept verbatim:`` heading.

The list is bounded by a token cap so it can never blow the budget. When there are more
candidates than room, the order of preference is: facts the *user* wrote and facts the
previous summary already carried (they state the task and its constraints, and they must
survive every later compaction, not just the next one), then the assistant's, then tool
output (bulk data, usually re-fetchable); newer before older within each tier. Without the
tiers, a few large JSON tool results crowd the user's early constraints out of the list by
the second or third rolling compaction. Duplicates and facts already contained in a kept
fact are dropped. Matching is deliberately ASCII-bounded so it works inside CJK text,
where there are no spaces between a number and the words around it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxstack.messages import ChatMessage
from ctxstack.tokens import TokenCounter

FACTS_HEADING = "Facts kept verbatim:"
MAX_FACT_CHARS = 200

_MONTHS = (
    r"Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
    r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?"
)
_UNITS = (
    r"%|円|万円|億円|万|億|元|ドル|ユーロ|件|個|人|名|泊|日間|時間|回|歳|kg|mg|km|cm|mm|ms|GB|MB|KB|TB|GiB|MiB"
    r"|USD|EUR|JPY|GBP|CNY|px|kWh|Hz|MHz|GHz"
)
_EXTENSIONS = (
    r"py|js|ts|tsx|jsx|json|csv|tsv|txt|md|yaml|yml|toml|ini|cfg|conf|pdf|png|jpe?g|gif|svg"
    r"|xlsx?|docx?|pptx?|html?|css|sql|log|sh|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|zip|gz|tar"
    r"|parquet|ipynb"
)

# Order matters: at a given position the first alternative that matches wins, so the
# specific forms (URL, e-mail, date, IP, version) come before the generic ones (ID, number).
_PATTERNS = [
    r"(?:https?|ftp)://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+",
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
    r"\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}",
    r"\d{4}年\d{1,2}月(?:\d{1,2}日)?|\d{1,2}月\d{1,2}日",
    rf"(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?(?:, \d{{4}})?|\d{{1,2}} (?:{_MONTHS}) \d{{4}}",
    r"\d{1,2}:\d{2}(?::\d{2})?(?: ?[AaPp]\.?[Mm]\.?)?",
    r"\d{1,3}(?:\.\d{1,3}){3}(?::\d{2,5})?",
    r"v?\d+(?:\.\d+){2,}(?:[-+][0-9A-Za-z.-]+)?|v\d+(?:\.\d+)?",
    r"(?:[A-Za-z]:\\|~/|\.{1,2}/|/)[A-Za-z0-9._\-/\\]*[A-Za-z0-9_\-]",
    r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_-]+\.[A-Za-z0-9]{1,8}",
    rf"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.(?:{_EXTENSIONS})",
    r"[$€£¥₹] ?\d[\d,]*(?:\.\d+)?(?: ?(?:[kKMB]|million|billion|thousand))?",
    rf"\d[\d,]*(?:\.\d+)? ?(?:{_UNITS})",
    r"#\d+",
    r"(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)+",
    r"(?!\d+(?:st|nd|rd|th)(?![A-Za-z0-9]))(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]{3,}",
    r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d{2,}",
]
_FACT_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:" + "|".join(f"(?:{p})" for p in _PATTERNS) + r")(?![A-Za-z0-9_])"
)
_TRAILING = ".,;:!?'\""


def extract_facts(text: str) -> list[str]:
    """Exact-value facts in ``text``, in order of appearance (duplicates kept)."""
    out = []
    for match in _FACT_RE.finditer(text):
        fact = match.group().rstrip(_TRAILING)
        while fact.endswith(")") and fact.count(")") > fact.count("("):
            fact = fact[:-1].rstrip(_TRAILING)
        if fact and len(fact) <= MAX_FACT_CHARS:
            out.append(fact)
    return out


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


@dataclass(frozen=True, slots=True)
class _Candidate:
    fact: str
    key: str
    rank: tuple[int, int, int]  # (tier: user/previous, assistant, tool; newest; offset)


_TIERS = {"user": 0, "system": 1, "assistant": 1, "tool": 2}


def select_facts(
    messages: Sequence[ChatMessage],
    summary: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    previous_summary: str | None = None,
) -> list[str]:
    """Facts from ``messages`` (and the previous summary) missing from ``summary``.

    At most ``max_tokens`` worth (as rendered by :func:`format_facts`); user facts first,
    then newer before older; returned most important first (tool output capped at a
    third of the room), which is the order the next compaction reads them back in.
    """
    if max_tokens <= 0:
        return []
    present = normalize(summary)
    sources: list[tuple[str, int, int]] = []
    if previous_summary:
        # What earlier compactions kept must survive this one too, or a rolling summary
        # forgets a little more every round: the previous facts list ranks with the user's
        # facts (ahead of the previous prose, which ranks next), newer user facts first.
        body, _, kept = previous_summary.partition(FACTS_HEADING)
        sources.append((kept, 0, -1))
        sources.append((body, 0, -2))
    sources.extend((message_fact_text(m), _TIERS[m.role], i) for i, m in enumerate(messages))

    seen: dict[str, _Candidate] = {}
    for text, tier, position in sources:
        for offset, fact in enumerate(extract_facts(text)):
            key = normalize(fact)
            if key in present:
                continue
            rank = (tier, -position, offset)
            candidate = _Candidate(fact, key, rank)
            best = seen.get(key)
            if best is None or candidate.rank < best.rank:
                seen[key] = candidate

    chosen: list[_Candidate] = []
    used = counter.count_text(FACTS_HEADING)
    tool_used, tool_cap = 0, max_tokens // 3
    for cand in sorted(seen.values(), key=lambda c: c.rank):
        if any(cand.key in c.key for c in chosen):
            continue
        cost = counter.count_text(f"- {cand.fact}") + 1
        is_tool = cand.rank[0] == _TIERS["tool"]
        if used + cost > max_tokens or (is_tool and tool_used + cost > tool_cap):
            continue
        chosen.append(cand)
        used += cost
        tool_used += cost if is_tool else 0
    # Most important first: the next compaction reads this list back in this order.
    facts = [c.fact for c in chosen]
    while facts and counter.count_text(format_facts(facts)) > max_tokens:
        facts.pop()
    return facts


def format_facts(facts: Sequence[str]) -> str:
    """The block appended to a summary (empty string for no facts)."""
    if not facts:
        return ""
    return FACTS_HEADING + "\n" + "\n".join(f"- {f}" for f in facts)
