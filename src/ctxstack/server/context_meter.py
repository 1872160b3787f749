"""The context meter: how full the context was at the last model call, by part.

A fuel gauge for the person chatting: of the usable input budget, how many tokens went to
the system prompt, the conversation summary, the stored history kept verbatim, this
turn's tool calls and results, and the question (with any messages injected while the
turn ran). Pure classification and counting; the turn feeds it the messages the guard
let through before each call (an ``on_check`` listener on its
:class:`~ctxstack.guard.ContextGuard`) and
emits the result as a ``context`` SSE event.

Parts are counted per message with the guard's counter, so they add up to ``used``
exactly; how a message is classified:

* ``summary``: a system message of kind ``"summary"`` (or starting ``[Conversation
  summary]``);
* ``system``: any other system message;
* ``history``: a stored message (it carries ``metadata["seq"]``);
* ``tools``: this turn's assistant and tool messages;
* ``question``: this turn's user messages (the question, its images, injects).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.messages import ChatMessage
from ctxstack.server.compactions import stored_seq
from ctxstack.server.sse import ContextData, ContextParts
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._calibration import message_counts

Part = Literal["system", "summary", "history", "tools", "question"]


def part_of(message: ChatMessage) -> Part:
    """Which part of the context ``message`` belongs to (see the module docstring)."""
    if message.role == "system":
        is_summary = (message.metadata.get("kind") == "summary"
                      or message.text.startswith(SUMMARY_PREFIX))
        return "summary" if is_summary else "system"
    if stored_seq(message) is not None:
        return "history"
    if message.role == "user":
        return "question"
    return "tools"


def measure(
    messages: Sequence[ChatMessage],
    budget: ModelBudget,
    *,
    counter: TokenCounter | None = None,
    model_calls: int = 0,
    at: Literal["load", "call"] = "call",
) -> ContextData:
    """The meter reading for ``messages`` against ``budget``. Runs before every model call
    over the whole context (~1,000 messages at the default 64K budget): a calibrating
    counter counts them in one pass (:func:`~ctxstack.tokens._calibration.message_counts`)."""
    counter = counter or DEFAULT_COUNTER
    totals: dict[Part, int] = {"system": 0, "summary": 0, "history": 0, "tools": 0,
                               "question": 0}
    for message, tokens in zip(messages, message_counts(counter, messages), strict=True):
        totals[part_of(message)] += tokens
    parts = ContextParts(**totals)
    return ContextData(budget=budget.usable_input_tokens, context_size=budget.context_size,
                       used=sum(totals.values()), parts=parts, model_calls=model_calls, at=at)


def meter_text(data: ContextData) -> str:
    """The meter as one line of text (the terminal chat's ``/context``)."""
    share = data.used / data.budget if data.budget else 0.0
    parts = data.parts
    return (f"context {data.used:,} / {data.budget:,} tokens ({share:.0%}) — "
            f"system {parts.system:,} · summary {parts.summary:,} · history "
            f"{parts.history:,} · tool outputs {parts.tools:,} · question {parts.question:,}")


__all__ = ["measure", "meter_text", "part_of"]
