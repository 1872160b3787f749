"""Scoring a compacted context: which planted facts survived verbatim, and is it valid?

**Verbatim, as a whole token.** A fact counts only if its exact value appears in the text
the model would receive (message texts and tool-call arguments) and is not part of a
longer token: ``48213.75`` is found in ``total 48213.75.`` or ``是48213.75。`` but not in
``148213.75``, ``48213.751`` or ``48213.75.2``; ``/srv/a/b.csv`` is not found in
``/x/srv/a/b.csv`` or ``/srv/a/b.csv.bak``. A near-miss (one digit changed, a path with a
different segment) is a different string and never counts: a summary that says "about
48,000" or quotes a wrong ID has lost the fact.

**Valid OpenAI sequence.** What a chat-completions endpoint accepts and a model can read
coherently: after the leading system messages the first message is a user turn; every tool
result answers a tool call of the assistant message right before it (no orphan results);
every tool call has its result before the conversation moves on; no duplicate results;
user and system messages have content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ctxstack.messages import ChatMessage


class _FactLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> str: ...


_W = "A-Za-z0-9_"
_JOINERS = r"./:\-"
FIRST_SENTENCE_MAX = 160
"""The lossy summariser's cap on a 'first sentence' (a JSON document has none)."""


@lru_cache(maxsize=4096)
def _pattern(value: str) -> re.Pattern[str]:
    if not value:
        raise ValueError("value: an empty value cannot be searched for")
    return re.compile(
        rf"(?<![{_W}])(?<![{_W}][{_JOINERS}])" + re.escape(value)
        + rf"(?![{_W}])(?![{_JOINERS}][{_W}])"
    )


def find_value(value: str, text: str) -> bool:
    """True if ``value`` occurs in ``text`` verbatim and as a whole token."""
    return _pattern(value).search(text) is not None


def count_value(value: str, text: str) -> int:
    """How many whole-token occurrences of ``value`` ``text`` has."""
    return len(_pattern(value).findall(text))


def context_text(messages: Sequence[ChatMessage]) -> str:
    """Everything the model would read: texts, tool-call names and JSON arguments."""
    parts: list[str] = []
    for m in messages:
        if m.text:
            parts.append(m.text)
        for call in m.tool_calls or ():
            parts.append(f"{call.name} {call.arguments_json}")
    return "\n".join(parts)


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？]")


def first_sentence(text: str, limit: int = FIRST_SENTENCE_MAX) -> str:
    """The first sentence of ``text`` (ASCII or CJK punctuation), at most ``limit`` chars."""
    text = text.strip()
    match = _SENTENCE_END.search(text)
    end = match.end() if match else len(text)
    return text[: min(end, limit)]


def near_misses(value: str) -> list[str]:
    """Strings one small edit away from ``value`` that must not count as the fact.

    One digit changed (each digit position tried once), one path segment renamed, and the
    value extended by a character on either side.
    """
    out: list[str] = []
    for i, ch in enumerate(value):
        if ch.isdigit():
            out.append(value[:i] + str((int(ch) + 1) % 10) + value[i + 1:])
    if "/" in value:
        segments = value.split("/")
        for i, seg in enumerate(segments):
            if seg:
                out.append("/".join([*segments[:i], seg + "x", *segments[i + 1:]]))
    out += [value + "0", "1" + value if value[0].isdigit() else "x" + value]
    return list(dict.fromkeys(v for v in out if v != value))


# ---------------------------------------------------------------------------- validity

ProblemCode = Literal[
    "empty", "no_user", "not_user_first", "orphan_tool_result", "unanswered_tool_call",
    "duplicate_tool_result", "empty_content",
]


class Problem(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: ProblemCode
    index: int
    detail: str


class Validity(BaseModel):
    model_config = ConfigDict(frozen=True)

    problems: list[Problem]

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def codes(self) -> set[str]:
        return {p.code for p in self.problems}


def check_sequence(messages: Sequence[ChatMessage]) -> Validity:
    """Check ``messages`` against the rules in the module docstring."""
    problems: list[Problem] = []
    if not messages:
        return Validity(problems=[Problem(code="empty", index=0, detail="no messages")])
    first = next((i for i, m in enumerate(messages) if m.role != "system"), None)
    if first is None or not any(m.role == "user" for m in messages):
        problems.append(Problem(code="no_user", index=0, detail="no user message"))
    elif messages[first].role != "user":
        problems.append(Problem(code="not_user_first", index=first,
                                detail=f"first message after the system prompt is "
                                       f"{messages[first].role!r}, not 'user'"))
    open_calls: dict[str, int] = {}  # tool call id → index of the assistant that made it
    answered: set[str] = set()
    for i, m in enumerate(messages):
        if m.role != "tool":
            for cid, at in open_calls.items():
                problems.append(Problem(code="unanswered_tool_call", index=at,
                                        detail=f"tool call {cid} has no result"))
            open_calls, answered = {}, set()
        if m.role == "tool":
            cid = m.tool_call_id or ""
            if cid in open_calls:
                del open_calls[cid]
                answered.add(cid)
            elif cid in answered:
                problems.append(Problem(code="duplicate_tool_result", index=i,
                                        detail=f"second result for tool call {cid}"))
            else:
                problems.append(Problem(code="orphan_tool_result", index=i,
                                        detail=f"tool result {cid} follows no matching call"))
        elif m.role == "assistant" and m.tool_calls:
            open_calls = {c.id: i for c in m.tool_calls}
        elif m.role in ("user", "system") and not m.text and not m.images:
            problems.append(Problem(code="empty_content", index=i,
                                    detail=f"{m.role} message without content"))
    for cid, at in open_calls.items():
        problems.append(Problem(code="unanswered_tool_call", index=at,
                                detail=f"tool call {cid} has no result"))
    return Validity(problems=problems)


# ---------------------------------------------------------------------------- scoring


class FactsScore(BaseModel):
    """Which planted facts a context still holds (ids), out of how many."""

    model_config = ConfigDict(frozen=True)

    kept: list[str]
    total: int
    kept_by_kind: dict[str, int]
    total_by_kind: dict[str, int]

    @property
    def share(self) -> float:
        return len(self.kept) / self.total if self.total else 1.0


def score_facts(facts: Sequence[_FactLike], messages: Sequence[ChatMessage]) -> FactsScore:
    """Count the facts whose value is in ``messages`` verbatim (see :func:`find_value`)."""
    text = context_text(messages)
    kept = [f.id for f in facts if find_value(f.value, text)]
    kept_set = set(kept)
    total_by_kind: dict[str, int] = {}
    kept_by_kind: dict[str, int] = {}
    for f in facts:
        total_by_kind[f.kind] = total_by_kind.get(f.kind, 0) + 1
        kept_by_kind[f.kind] = kept_by_kind.get(f.kind, 0) + (f.id in kept_set)
    return FactsScore(kept=kept, total=len(facts), kept_by_kind=kept_by_kind,
                      total_by_kind=total_by_kind)


def survived(original: ChatMessage, messages: Sequence[ChatMessage]) -> bool:
    """True if a message with the same role and content as ``original`` is in ``messages``."""
    return any(m.role == original.role and m.content == original.content for m in messages)
