"""Phases 1–2: the conversation history and the current query become ``enriched_query``.

The planner reads its whole input in one pass — there is no iterative compaction while
planning — so the input is bounded here, before planning: when history + query exceed
``threshold_tokens`` (16,000), the *history* is summarised with the ``planner_input``
prompt on the fast LLM (keep the user's evolving intent, decisions, constraints; drop
dialogue detail). If that call fails or answers nothing, older history is dropped with
``CompactUtils.smart_truncate`` instead (logged). The query itself is never cut: the
history gets whatever room the query leaves (none, if the query alone is over the
threshold — then the history is left out, with a warning).

The text has the shape::

    Previous conversation:
    User: …
    Assistant: …

    Current request:
    <query>

and is just the query when there is no history.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ctxstack.compaction import SUMMARY_PREFIX, CompactUtils
from ctxstack.compaction._prompts import compaction_prompt, strip_scratchpad
from ctxstack.dag._context import cut_middle
from ctxstack.dag._events import EnrichMethod
from ctxstack.errors import CtxstackError, InputError
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.messages._model import binary_note
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import HEURISTIC, TokenCounter
from ctxstack.tokens._counter import effective_budget

log = logging.getLogger(__name__)

PLANNER_INPUT_THRESHOLD_TOKENS = 16_000
HISTORY_PREFIX = "Previous conversation:"
QUERY_PREFIX = "Current request:"
SUMMARISER_MIN_INPUT_TOKENS = 4_000
_ROUNDING_MARGIN = 8

_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool result", "system": "System"}


class EnrichedQuery(BaseModel):
    """The planner's input and how it was obtained.

    ``summarized`` is true when an LLM summary replaced the history (``method="llm"``);
    ``method="truncate"`` means older history was dropped instead. ``usage`` covers every
    LLM call of phases 1–2: the summary call, plus ``load_usage`` — what the memory spent
    loading the history, when it reports it (``DbMemory.usage``: its own compaction).
    """

    model_config = ConfigDict(frozen=True)

    text: str
    query: str
    history: str = ""
    summarized: bool = False
    method: EnrichMethod = "none"
    usage: Usage = Usage()
    load_usage: Usage = Usage()
    history_messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0


def format_message(message: ChatMessage) -> str:
    """One history message as ``Role: text`` (images, audio, files and tool calls noted,
    not dumped)."""
    label = _LABELS[message.role]
    if message.role == "system" and message.kind == "summary":
        label = "Summary of earlier conversation"
    elif message.role == "tool" and message.name:
        label = f"Tool result ({message.name})"
    parts = [message.text.strip()]
    if message.images:
        parts.append(f"[{len(message.images)} image(s) attached]")
    parts.extend(binary_note(p) for p in message.binary_parts)
    if message.tool_calls:
        names = ", ".join(c.name for c in message.tool_calls)
        parts.append(f"[called tool(s): {names}]")
    return f"{label}: " + " ".join(p for p in parts if p)


def format_history(messages: Sequence[ChatMessage]) -> str:
    """The history block: ``Previous conversation:`` then one paragraph per message;
    empty when there are no messages."""
    if not messages:
        return ""
    return HISTORY_PREFIX + "\n" + "\n\n".join(format_message(m) for m in messages)


def combine(history_block: str, query: str) -> str:
    """``enriched_query`` from a history block (possibly empty) and the query."""
    if not history_block:
        return query
    return f"{history_block}\n\n{QUERY_PREFIX}\n{query}"


def fit_text(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """``text`` cut head+tail until it counts at most ``max_tokens`` (empty if ≤ 0)."""
    if max_tokens <= 0:
        return ""
    for _ in range(6):
        tokens = counter.count_text(text)
        if tokens <= max_tokens:
            return text
        text = cut_middle(text, max(0, int(len(text) * max_tokens / tokens * 0.95)))
    return text


class _EmptySummary(CtxstackError):
    """The summariser answered with nothing usable (treated like a failed call)."""


async def _load_history(
    memory: BaseMemory | None, history: Sequence[ChatMessage] | None
) -> tuple[list[ChatMessage], Usage]:
    if memory is not None and history is not None:
        raise InputError("build_enriched_query: pass either memory or history, not both")
    if memory is not None:
        messages = list(await memory.get_messages())
        spent = getattr(memory, "usage", None)  # DbMemory reports its compaction's usage
        return messages, spent if isinstance(spent, Usage) else Usage()
    return list(history or []), Usage()


async def _summarise(
    messages: list[ChatMessage], llm: LLM, counter: TokenCounter
) -> tuple[str, Usage]:
    """Summarise ``messages`` with the ``planner_input`` prompt; raise on failure/empty."""
    prompt = compaction_prompt("planner_input")
    # The summariser sees at most what the fast model can take; the newest part wins.
    room = max(
        SUMMARISER_MIN_INPUT_TOKENS,
        llm.context_size - llm.max_output_tokens - counter.count_text(prompt) - 64,
    )
    if counter.count_messages(messages) > effective_budget(room, counter):
        log.info("planner_input summary: history over the fast model's input, truncating first")
        messages = CompactUtils.smart_truncate(messages, room, counter=counter)
    body = "\n\n".join(format_message(m) for m in messages)
    request = [
        ChatMessage.system(prompt),
        ChatMessage.user(f"Messages to summarise:\n\n{body}"),
    ]
    result = await llm.chat(request)
    summary = strip_scratchpad(result.text)
    if not summary:
        raise _EmptySummary("the summariser returned an empty answer")
    return summary, result.usage


async def build_enriched_query(
    query: str,
    *,
    memory: BaseMemory | None = None,
    history: Sequence[ChatMessage] | None = None,
    fast_llm: LLM | None = None,
    threshold_tokens: int = PLANNER_INPUT_THRESHOLD_TOKENS,
    counter: TokenCounter | None = None,
) -> EnrichedQuery:
    """Build the planner's input from the history (``memory`` or ``history``) and ``query``.

    Args:
        query: the user's current request; never cut.
        memory: where to load the history from (e.g. ``DbMemory``, which already drops the
            current query from what it loads). Mutually exclusive with ``history``.
        history: the history as messages (must not contain the current query).
        fast_llm: summarises an over-threshold history; without one the history is
            truncated instead.
        threshold_tokens: the planner input bound (16,000 by default).
        counter: token counter (the heuristic by default).

    Raises:
        ValueError: ``query`` is empty, both ``memory`` and ``history`` were given, or
            ``threshold_tokens`` is not positive.
    """
    if not query.strip():
        raise InputError("build_enriched_query: the query is empty")
    if threshold_tokens <= 0:
        raise InputError(f"threshold_tokens: must be positive, got {threshold_tokens}")
    counter = counter or HEURISTIC
    messages, load_usage = await _load_history(memory, history)
    block = format_history(messages)
    text = combine(block, query)
    tokens_before = counter.count_text(text)
    base = EnrichedQuery(
        text=text, query=query, history=block, history_messages=len(messages),
        tokens_before=tokens_before, tokens_after=tokens_before,
        usage=load_usage, load_usage=load_usage,
    )
    # "Fits" keeps the counter's margin free (see ctxstack.tokens._counter.effective_budget).
    limit = effective_budget(threshold_tokens, counter)
    if tokens_before <= limit or not messages:
        return base

    # Room for the history block once the query and the framing are in (less a few tokens:
    # counts of joined strings can exceed the sum of their parts' by rounding).
    framing = counter.count_text(combine(HISTORY_PREFIX + "\n", query))
    room = limit - framing - _ROUNDING_MARGIN
    if room <= 0:
        log.warning(
            "planner input: the query alone (%d tokens) leaves no room under %d tokens; "
            "the history (%d messages) is left out", counter.count_text(query),
            threshold_tokens, len(messages),
        )
        return _result(base, "", "truncate", Usage(), counter)

    if fast_llm is not None:
        try:
            summary, usage = await _summarise(messages, fast_llm, counter)
        except Exception as exc:  # any failure: fall back, never fail the run here
            log.warning("planner_input summary failed (%s: %s); truncating the history instead",
                        type(exc).__name__, exc)
        else:
            body = fit_text(f"{SUMMARY_PREFIX} {summary}", room, counter)
            return _result(base, f"{HISTORY_PREFIX}\n{body}", "llm", usage, counter)
    else:
        log.info("planner input over %d tokens and no fast LLM: truncating the history",
                 threshold_tokens)

    kept = CompactUtils.smart_truncate(messages, room, counter=counter)
    block = fit_text(format_history(kept), room, counter)
    return _result(base, block, "truncate", Usage(), counter)


def _result(
    base: EnrichedQuery, block: str, method: EnrichMethod, usage: Usage, counter: TokenCounter
) -> EnrichedQuery:
    text = combine(block, base.query)
    return base.model_copy(update={
        "text": text, "history": block, "method": method, "summarized": method == "llm",
        "usage": base.load_usage + usage, "tokens_after": counter.count_text(text),
    })
