"""The seed's ``step_dependency`` rule: a dependency result over its cut is summarised.

A DAG step starts from its task and its dependencies' results, and the whole message must
fit the guard's ``max_message_chars`` (:func:`ctxstack.dag._context.build_step_context`).
A result longer than its fair share used to lose its middle to a character cut — often
exactly the data the next step needs. Before cutting, the executor now asks the compact
(fast) model for a summary written with the ``step_dependency`` hint ("results, not the
story of how they were found": item/value lines and conclusions, exact values re-attached
under "Facts kept verbatim"). The summary replaces the result in the step's starting
message only; the step's own stored result is unchanged.

The summariser is asked with the producing step's own conversation first: the messages its
last model call sent, its answer, then the summary instruction, with that call's tools
(:mod:`ctxstack.compaction._prefix_request`) — so the provider serves all but the answer
and the instruction from its cache. The transcript request of the result alone is the
fallback (the conversation is unknown, would not fit, or the call fails).

The character cut stays as the fallback: no compact model, a summariser failure (error,
timeout, empty answer) or a summary that is still too long all end in
:func:`~ctxstack.dag._context.cut_middle`. Each attempt is reported as a
:class:`~ctxstack.guard.CompactionEvent` (hint ``"step_dependency"``; method
``"llm"`` when the summary was used, ``"truncate"`` with a ``reason`` otherwise), so the
caller can see and count them like the guard's own compactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from ctxstack.compaction import cut_text
from ctxstack.compaction._summarize import build_summary_message, previous_text, summarize
from ctxstack.dag._context import dependency_shares
from ctxstack.dag._plan import PlanStep
from ctxstack.dag._results import StepResult
from ctxstack.guard import CompactionEvent
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ToolSpec, Usage
from ctxstack.tokens import TokenCounter

HINT = "step_dependency"
MIN_SUMMARY_TOKENS = 64
FACTS_SHARE = 0.25
"""Share of a summary's room given to the "Facts kept verbatim" list."""

Report = Callable[[CompactionEvent], None]


@dataclass(frozen=True, slots=True)
class StepConversation:
    """A finished step's context as its model last saw it, its answer last, and the tools
    that call carried (:attr:`ctxstack.agent.AgentResult.messages` / ``tools``)."""

    messages: Sequence[ChatMessage]
    tools: Sequence[ToolSpec] | None = None

    @classmethod
    def of(cls, messages: Sequence[ChatMessage],
           tools: Sequence[Mapping[str, object]] | None) -> StepConversation:
        return cls(tuple(messages), cast("tuple[ToolSpec, ...]", tuple(tools)) if tools
                   else None)

    def head(self) -> Sequence[ChatMessage] | None:
        """The messages a cache-aligned request starts with: all of them, when they end
        with the step's answer (an assistant message without tool calls)."""
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != "assistant" or last.tool_calls:
            return None
        return self.messages


def _room_tokens(text: str, share: int, counter: TokenCounter) -> int:
    """Tokens that ``share`` characters of ``text`` are worth (the summary's room)."""
    total = counter.count_text(text)
    return max(MIN_SUMMARY_TOKENS, total * share // max(1, len(text)))


async def summarize_dependency(
    result: StepResult,
    share: int,
    llm: LLM,
    *,
    counter: TokenCounter,
    timeout: float | None = None,  # noqa: ASYNC109 (the summariser call only; expiry means the cut)
    conversation: StepConversation | None = None,
) -> tuple[str | None, CompactionEvent]:
    """A ``step_dependency`` summary of ``result.answer`` within ``share`` characters.

    ``conversation``: the producing step's (see the module doc); without it, the
    transcript request only. Returns ``(text, event)``: ``text`` is ``None`` when the
    character cut must be used instead (the event's ``reason`` says why). Never raises
    for a model failure.
    """
    started = time.perf_counter()
    room = _room_tokens(result.answer, share, counter)
    facts_room = max(16, int(room * FACTS_SHARE))
    answer_room = max(MIN_SUMMARY_TOKENS, room - facts_room)
    source = ChatMessage.user(f"Result of step {result.step_id} ({result.task}):\n"
                              f"{result.answer}")
    before = counter.count_text(result.answer)
    outcome = await summarize(
        [source], None, llm, hint=HINT, prompt=None, timeout=timeout, answer_tokens=answer_room,
        counter=counter, head=conversation.head() if conversation is not None else None,
        tools=conversation.tools if conversation is not None else None)
    text: str | None = None
    reason = outcome.reason
    if outcome.text is not None:
        # Bound the prose by characters too: its tokens may be worth more characters than
        # the result's were (a long-winded or repetitive answer), and the share is in chars.
        prose = cut_text(outcome.text, max(1, int(share * (1 - FACTS_SHARE))))
        message = build_summary_message(prose, [source], None, hint=HINT,
                                        answer_tokens=answer_room, facts_tokens=facts_room,
                                        counter=counter)
        summary = previous_text(message)
        if len(summary) <= share:
            text = summary
        else:
            reason = f"summary_too_long: {len(summary)} > {share} characters"
    event = CompactionEvent(
        hint=HINT, method="llm" if text is not None else "truncate", reason=reason,
        budget=room, messages_before=1, messages_after=1, tokens_before=before,
        tokens_after=counter.count_text(text) if text is not None else room,
        summarized=1 if text is not None else 0, usage=outcome.usage or Usage(),
        duration_s=time.perf_counter() - started,
    )
    return text, event


async def condense_dependencies(
    step: PlanStep,
    results: dict[str, StepResult],
    max_chars: int,
    llm: LLM | None,
    *,
    counter: TokenCounter,
    report: Report | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (each summariser call; expiry means the cut)
    conversations: Mapping[str, StepConversation] | None = None,
) -> dict[str, StepResult]:
    """``results`` with every dependency of ``step`` that is over its cut summarised.

    Only the dependencies' entries change, and only their ``answer``; without ``llm``
    nothing changes (the cut applies). ``report`` gets one event per attempt.
    ``conversations``: the finished steps' contexts by step id (a summary reuses its
    step's cached prefix).
    """
    if llm is None or not step.dependencies:
        return results
    shares = dependency_shares(step, results, max_chars)
    out = dict(results)
    for dep_id, share in zip(step.dependencies, shares, strict=True):
        result = results[dep_id]
        if len(result.answer) <= share or share <= 0:
            continue
        text, event = await summarize_dependency(
            result, share, llm, counter=counter, timeout=timeout,
            conversation=(conversations or {}).get(dep_id))
        if report is not None:
            report(event)
        if text is not None:
            out[dep_id] = result.model_copy(update={"answer": text})
    return out


__all__ = ["HINT", "StepConversation", "condense_dependencies", "summarize_dependency"]
