"""Calling the summariser and turning its answer into the one summary message.

Shared by :func:`ctxstack.compaction.CompactUtils.compact_detailed` and
:class:`ctxstack.memory.SummaryMemory`, so there is exactly one summarising code path.

The summariser must never overflow itself: it receives a *transcript* of the messages to
fold (role labels, tool calls as ``name(arguments)``, tool results), each message cut
head+tail to a bounded size and the whole bounded to what the summariser model can read
(``context_size - max_output_tokens``, or :data:`DEFAULT_SUMMARIZER_INPUT` when the model
does not say). Its answer is capped with the ``max_tokens`` option, checked (exceptions,
timeout, empty or scratchpad-only answers are failures with a reason, never raised), passed
through :func:`ctxstack.compaction._prompts.finalize_summary`, bounded again, and completed with the
exact values it dropped (:mod:`ctxstack.compaction._facts`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from ctxstack.compaction._cut import cut_text_tokens
from ctxstack.compaction._facts import format_facts, select_facts
from ctxstack.compaction._prompts import (
    SUMMARY_PREFIX,
    compaction_prompt,
    finalize_summary,
    strip_scratchpad,
)
from ctxstack.errors import LLMTimeoutError
from ctxstack.messages import ChatMessage
from ctxstack.messages._model import binary_note
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import TokenCounter

DEFAULT_SUMMARIZER_INPUT = 16_000
"""Input tokens assumed for a summariser that does not report usable sizes."""
PER_MESSAGE_MAX = 4_000
PER_MESSAGE_MIN = 48
SUMMARY_SLACK = 8
"""Tokens allowed for rounding when the summary's parts are counted separately."""

_PREVIOUS_HEADER = "Previous summary (fold it into the new summary):\n"
_TRANSCRIPT_HEADER = "Conversation to fold in (oldest first):\n\n"
_CLOSING = "\n\nWrite the updated summary now."


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """What one summariser call produced: ``text`` on success, else ``reason``."""

    text: str | None
    reason: str | None
    usage: Usage


def previous_text(summary: ChatMessage) -> str:
    """A summary message's text without the ``[Conversation summary]`` prefix."""
    return summary.text.removeprefix(SUMMARY_PREFIX).strip()


def summarizer_input_tokens(llm: LLM) -> int:
    """What the summariser can read: ``context_size - max_output_tokens`` when sane."""
    try:
        usable = int(llm.context_size) - int(llm.max_output_tokens)
    except (AttributeError, TypeError, ValueError):
        return DEFAULT_SUMMARIZER_INPUT
    return usable if usable > 0 else DEFAULT_SUMMARIZER_INPUT


def summary_reserve(answer_tokens: int, facts_tokens: int, counter: TokenCounter) -> int:
    """Upper bound of a summary message's cost (what compaction budgets for it)."""
    prefix = counter.count_message(ChatMessage.system(SUMMARY_PREFIX))
    return prefix + answer_tokens + facts_tokens + SUMMARY_SLACK


def _render(message: ChatMessage, tool_names: dict[str, str]) -> str:
    text = message.text
    if message.images:
        text = f"{text} " + " ".join("[image]" for _ in message.images)
    if message.binary_parts:  # named, never dumped: the summariser cannot read base64
        text = f"{text} " + " ".join(binary_note(p) for p in message.binary_parts)
    match message.role:
        case "user":
            return f"[user] {text}".rstrip()
        case "system":
            return f"[system note] {text}".rstrip()
        case "tool":
            name = message.name or tool_names.get(message.tool_call_id or "", "tool")
            return f"[tool result: {name}] {text}".rstrip()
        case _:
            lines = [f"[assistant] {text}".rstrip()] if text.strip() else []
            lines.extend(
                f"[assistant -> tool call] {c.name}({c.arguments_json})"
                for c in message.tool_calls or ()
            )
            return "\n".join(lines) or "[assistant]"


def build_transcript(
    fold: Sequence[ChatMessage], max_tokens: int, counter: TokenCounter
) -> str:
    """The messages as labelled text within ``max_tokens``.

    Each message is cut head+tail to a per-message cap; the cap shrinks until the whole
    fits, and only at its floor are the oldest messages left out (with a note saying how
    many), since the newest folded messages matter most to what comes next.
    """
    tool_names = {c.id: c.name for m in fold for c in m.tool_calls or ()}
    rendered = [_render(m, tool_names) for m in fold]
    room = max(PER_MESSAGE_MIN, max_tokens)
    cap = min(PER_MESSAGE_MAX, max(PER_MESSAGE_MIN, room // 4))
    lines: list[str] = []
    costs: list[int] = []
    for _ in range(8):
        lines = [cut_text_tokens(r, cap, counter) for r in rendered]
        costs = [counter.count_text(line) + 1 for line in lines]
        total = sum(costs)
        if total <= room or cap == PER_MESSAGE_MIN:
            break
        cap = max(PER_MESSAGE_MIN, cap * room // total)
    start = 0
    total = sum(costs)
    while start < len(lines) and total > room:
        total -= costs[start]
        start += 1
    body = "\n\n".join(lines[start:])
    if start:
        note = f"[{start} earlier message(s) omitted]"
        body = f"{note}\n\n{body}" if body else note
    return cut_text_tokens(body, max_tokens, counter)


def build_request(
    fold: Sequence[ChatMessage],
    previous: str | None,
    llm: LLM,
    hint: str,
    prompt: str | None,
    counter: TokenCounter,
) -> list[ChatMessage]:
    """The two messages sent to the summariser, bounded to what it can read."""
    system = ChatMessage.system(compaction_prompt(hint, custom=prompt))
    room = summarizer_input_tokens(llm) - counter.count_message(system)
    room -= counter.count_text(_PREVIOUS_HEADER + _TRANSCRIPT_HEADER + _CLOSING) + 16
    room = max(room, 2 * PER_MESSAGE_MIN)
    parts = []
    if previous:
        prev = cut_text_tokens(previous, room // 3, counter)
        parts.append(f"{_PREVIOUS_HEADER}{prev}\n\n")
        room -= counter.count_text(prev)
    parts.append(_TRANSCRIPT_HEADER)
    parts.append(build_transcript(fold, room, counter))
    parts.append(_CLOSING)
    return [system, ChatMessage.user("".join(parts))]


async def run_summarizer(
    fold: Sequence[ChatMessage],
    previous: str | None,
    llm: LLM,
    *,
    hint: str,
    prompt: str | None,
    timeout: float | None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    answer_tokens: int,
    counter: TokenCounter,
) -> SummaryOutcome:
    """One summariser call. Never raises for a model failure: returns a reason instead.

    Reasons: ``"timeout"``, ``"llm_error: <Type>: <message>"``, ``"empty_summary"``
    (nothing left after removing analysis/scratchpad blocks). Cancellation propagates.
    """
    request = build_request(fold, previous, llm, hint, prompt, counter)
    return await call_summarizer(request, llm, timeout=timeout, answer_tokens=answer_tokens)


async def call_summarizer(
    request: list[ChatMessage],
    llm: LLM,
    *,
    timeout: float | None,  # noqa: ASYNC109 (the summariser call only; expiry means fallback)
    answer_tokens: int,
) -> SummaryOutcome:
    """:func:`run_summarizer` with the request already built (see :func:`build_request`)."""
    try:
        call = llm.chat(request, max_tokens=answer_tokens)
        result = await (asyncio.wait_for(call, timeout) if timeout is not None else call)
    except (TimeoutError, LLMTimeoutError):
        return SummaryOutcome(None, "timeout", Usage())
    except Exception as exc:
        return SummaryOutcome(None, f"llm_error: {type(exc).__name__}: {exc}", Usage())
    text = strip_scratchpad(result.message.text)
    text = text.removeprefix(SUMMARY_PREFIX).strip()
    if not text:
        return SummaryOutcome(None, "empty_summary", result.usage)
    return SummaryOutcome(text, None, result.usage)


def build_summary_message(
    text: str,
    fold: Sequence[ChatMessage],
    previous: str | None,
    *,
    hint: str,
    answer_tokens: int,
    facts_tokens: int,
    counter: TokenCounter,
    note: str | None = None,
) -> ChatMessage:
    """The ``[Conversation summary]`` system message (kind ``"summary"``).

    Its cost stays within :func:`summary_reserve` of the same sizes (plus ``note``, a
    line placed before the facts, e.g. that archived messages can be recalled).
    """
    final = finalize_text(text, previous, hint=hint, answer_tokens=answer_tokens,
                          counter=counter)
    return assemble_summary(final, fold, previous, facts_tokens=facts_tokens, counter=counter,
                            note=note)


def finalize_text(
    text: str, previous: str | None, *, hint: str, answer_tokens: int, counter: TokenCounter
) -> str:
    """The summariser's answer through the ``finalize_summary`` hook, bounded."""
    final = finalize_summary(hint, previous, text).strip() or text
    return cut_text_tokens(final, answer_tokens, counter)


def assemble_summary(
    final: str,
    fold: Sequence[ChatMessage],
    previous: str | None,
    *,
    facts_tokens: int,
    counter: TokenCounter,
    note: str | None = None,
) -> ChatMessage:
    """The summary message from finalized text, a note and the facts that fit."""
    facts = select_facts(fold, final, facts_tokens, counter, previous_summary=previous)
    if note and note not in final:
        final = f"{final}\n\n{note}"
    body = f"{final}\n\n{format_facts(facts)}" if facts else final
    return ChatMessage.summary(f"{SUMMARY_PREFIX}\n{body}")
