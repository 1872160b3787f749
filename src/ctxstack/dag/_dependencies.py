"""The seed's ``step_dependency`` rule: a dependency result over its cut is summarised.

A DAG step starts from its task and its dependencies' results, and the whole message must
fit the guard's ``max_message_chars`` (:func:`ctxstack.dag._context.build_step_context`).
A result longer than its fair share used to lose its middle to a character cut — often
exactly the data the next step needs. Before cutting, the executor now asks the compact
(fast) model for a summary written with the ``step_dependency`` hint ("results, not the
story of how they were found": item/value lines and conclusions, exact values re-attached
under "Facts kept verbatim"). The summary replaces the result in the step's starting
message only; the step's own stored result is unchanged.

The character cut stays as the fallback: no compact model, a summariser failure (error,
timeout, empty answer) or a summary that is still too long all end in
:func:`~ctxstack.dag._context.cut_middle`. Each attempt is reported as a
:class:`~ctxstack.guard.CompactionEvent` (hint ``"step_dependency"``; method
``"llm"`` when the summary was used, ``"truncate"`` with a ``reason`` otherwise), so the
caller can see and count them like the guard's own compactions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ctxstack.compaction import cut_text
from ctxstack.compaction._summarize import build_summary_message, previous_text, run_summarizer
from ctxstack.dag._context import dependency_shares
from ctxstack.dag._plan import PlanStep
from ctxstack.dag._results import StepResult
from ctxstack.guard import CompactionEvent
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import TokenCounter

HINT = "step_dependency"
MIN_SUMMARY_TOKENS = 64
FACTS_SHARE = 0.25
"""Share of a summary's room given to the "Facts kept verbatim" list."""

Report = Callable[[CompactionEvent], None]


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
) -> tuple[str | None, CompactionEvent]:
    """A ``step_dependency`` summary of ``result.answer`` within ``share`` characters.

    Returns ``(text, event)``: ``text`` is ``None`` when the character cut must be used
    instead (the event's ``reason`` says why). Never raises for a model failure.
    """
    started = time.perf_counter()
    room = _room_tokens(result.answer, share, counter)
    facts_room = max(16, int(room * FACTS_SHARE))
    answer_room = max(MIN_SUMMARY_TOKENS, room - facts_room)
    source = ChatMessage.user(f"Result of step {result.step_id} ({result.task}):\n"
                              f"{result.answer}")
    before = counter.count_text(result.answer)
    outcome = await run_summarizer([source], None, llm, hint=HINT, prompt=None,
                                   timeout=timeout, answer_tokens=answer_room, counter=counter)
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
) -> dict[str, StepResult]:
    """``results`` with every dependency of ``step`` that is over its cut summarised.

    Only the dependencies' entries change, and only their ``answer``; without ``llm``
    nothing changes (the cut applies). ``report`` gets one event per attempt.
    """
    if llm is None or not step.dependencies:
        return results
    shares = dependency_shares(step, results, max_chars)
    out = dict(results)
    for dep_id, share in zip(step.dependencies, shares, strict=True):
        result = results[dep_id]
        if len(result.answer) <= share or share <= 0:
            continue
        text, event = await summarize_dependency(result, share, llm, counter=counter,
                                                 timeout=timeout)
        if report is not None:
            report(event)
        if text is not None:
            out[dep_id] = result.model_copy(update={"answer": text})
    return out


__all__ = ["HINT", "condense_dependencies", "summarize_dependency"]
