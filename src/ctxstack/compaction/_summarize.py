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

:func:`summarize` first tries the *cache-aligned* request when the caller knows the
conversation's previous call (:mod:`ctxstack.compaction._prefix_request`): that call's own
messages up to the end of the fold, the summary instruction last, the same tools — so the
provider's prompt cache serves all but the instruction. With tools it asks for no tool
call (``tool_choice="none"``, an OpenAI chat-completions option the protocol passes
through); a client that refuses the option, or an answer that calls a tool anyway, is a
failed prefix call. It falls back to the transcript request when the prefix request is no
valid request (the fold ends inside a tool group), would not fit the summariser's input,
or its call fails (any reason: error, timeout, empty or tool-call answer). The answer
goes through the same checks and the same finishing either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ctxstack.compaction._cut import cut_text_tokens
from ctxstack.compaction._facts import format_facts, select_facts
from ctxstack.compaction._prefix_request import prefix_request
from ctxstack.compaction._prompts import (
    SUMMARY_PREFIX,
    compaction_prompt,
    finalize_summary,
    strip_scratchpad,
    summary_instruction,
)
from ctxstack.compaction._summaries import strip_ref_note
from ctxstack.errors import LLMTimeoutError
from ctxstack.messages import ChatMessage
from ctxstack.messages._model import binary_note
from ctxstack.protocol import LLM, ToolSpec, Usage
from ctxstack.tokens import TokenCounter

logger = logging.getLogger("ctxstack.compaction")

DEFAULT_SUMMARIZER_INPUT = 16_000
"""Input tokens assumed for a summariser that does not report usable sizes."""
PER_MESSAGE_MAX = 4_000
PER_MESSAGE_MIN = 48
SUMMARY_SLACK = 8
"""Tokens allowed for rounding when the summary's parts are counted separately."""
THREAD_MIN_MESSAGES = 64
"""A transcript of more messages than this is built in a worker thread (off the loop)."""

_PREVIOUS_HEADER = "Previous summary (fold it into the new summary):\n"
_TRANSCRIPT_HEADER = "Conversation to fold in (oldest first):\n\n"
_CLOSING = "\n\nWrite the updated summary now."


RequestKind = Literal["prefix", "transcript"]


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """What summarising produced: ``text`` on success, else ``reason``.

    ``request`` is the request that produced the outcome (``"prefix"``: the cache-aligned
    one; ``"transcript"``), ``prefix_reason`` why the prefix request was not used or
    failed (``None`` when it was used, or never offered); ``usage`` sums every call.
    """

    text: str | None
    reason: str | None
    usage: Usage
    request: RequestKind = "transcript"
    prefix_reason: str | None = None


def previous_text(summary: ChatMessage) -> str:
    """A summary message's text without the ``[Conversation summary]`` prefix (and without
    the line naming its archive ref: the new summary gets its own)."""
    return strip_ref_note(summary.text.removeprefix(SUMMARY_PREFIX))


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


def transcript_entries(messages: Sequence[ChatMessage]) -> list[str]:
    """Each message as its labelled transcript entry (``[user] …``, ``[tool result: …] …``),
    uncut: what a model stub reads out of a cache-aligned request's messages."""
    tool_names = {c.id: c.name for m in messages for c in m.tool_calls or ()}
    return [_render(m, tool_names) for m in messages]


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


async def summarize(
    fold: Sequence[ChatMessage],
    previous: str | None,
    llm: LLM,
    *,
    hint: str,
    prompt: str | None,
    timeout: float | None,  # noqa: ASYNC109 (each summariser call; expiry means fallback)
    answer_tokens: int,
    counter: TokenCounter,
    head: Sequence[ChatMessage] | None = None,
    tools: Sequence[ToolSpec] | None = None,
) -> SummaryOutcome:
    """Summarise ``fold`` (after ``previous``): the prefix request first, then the
    transcript request (see the module doc). Never raises for a model failure.

    ``head`` is the previous call's start up to the end of the fold (``None``: unknown,
    the transcript request only); ``tools`` the tools that call carried. The prefix call
    and the transcript call each get ``timeout``.
    """
    why: str | None = None
    spent = Usage()
    if head is not None:
        request, why = prefix_request(head, summary_instruction(hint, prompt), tools,
                                      limit=summarizer_input_tokens(llm), counter=counter)
        if request is not None:
            outcome = await call_summarizer(request.messages, llm, timeout=timeout,
                                            answer_tokens=answer_tokens, tools=request.tools)
            if outcome.text is not None:
                return replace(outcome, request="prefix")
            why, spent = f"prefix call failed: {outcome.reason}", outcome.usage
            logger.info("summariser: the cache-aligned request failed (%s); sending the "
                        "transcript request", outcome.reason)
    if len(fold) > THREAD_MIN_MESSAGES:
        transcript = await asyncio.to_thread(build_request, fold, previous, llm, hint, prompt,
                                             counter)
    else:
        transcript = build_request(fold, previous, llm, hint, prompt, counter)
    outcome = await call_summarizer(transcript, llm, timeout=timeout,
                                    answer_tokens=answer_tokens)
    return replace(outcome, usage=spent + outcome.usage, prefix_reason=why)


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
    tools: Sequence[ToolSpec] | None = None,
) -> SummaryOutcome:
    """:func:`run_summarizer` with the request already built (see :func:`build_request`).

    With ``tools`` (a prefix request) the call carries them and ``tool_choice="none"``;
    an answer calling a tool is the failure ``"tool_call_answer"``.
    """
    try:
        if tools:
            call = llm.chat(request, tools=tools, tool_choice="none", max_tokens=answer_tokens)
        else:
            call = llm.chat(request, max_tokens=answer_tokens)
        result = await (asyncio.wait_for(call, timeout) if timeout is not None else call)
    except (TimeoutError, LLMTimeoutError):
        return SummaryOutcome(None, "timeout", Usage())
    except Exception as exc:
        return SummaryOutcome(None, f"llm_error: {type(exc).__name__}: {exc}", Usage())
    if result.message.tool_calls:
        return SummaryOutcome(None, "tool_call_answer", result.usage)
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
