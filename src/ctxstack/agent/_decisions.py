"""The agent's decisions as pure functions: no I/O, no clock, unit-testable in isolation.

The loop in :mod:`ctxstack.agent._react` only drives: it asks these functions what to do
(is this a cycle? does a final answer need the checklist? what messages does a tool turn
append?) and performs the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ctxstack.agent import _prompts as prompts
from ctxstack.agent._result import ToolTraceEntry
from ctxstack.agent._tools import ToolOutcome
from ctxstack.messages import ChatMessage, ToolCall

# ----------------------------------------------------------------- assembling the context


def initial_messages(
    system_prompt: str, history: Sequence[ChatMessage], query: str
) -> list[ChatMessage]:
    """System prompt + history + the query pinned with kind "query".

    History is taken as it comes from memory, including any ``[Conversation summary]``
    system message a memory produced: dropping it would silently lose everything it
    stands for. A history message that is itself pinned as the *query* (a stale one, from
    a memory that recorded it so) is unpinned so exactly one message is the current query.
    """
    kept = [context_message(m) if m.kind == "query" else m for m in history]
    out = [ChatMessage.system(system_prompt)] if system_prompt else []
    out.extend(kept)
    out.append(query_message(query))
    return out


def context_message(message: ChatMessage) -> ChatMessage:
    """A history message as :func:`initial_messages` puts it in the context: a stale
    *query* is unpinned and loses its kind; any other message is itself. Idempotent: a
    history already passed through it is left as it is (a caller may do it ahead, e.g.
    the chat service, which keeps the copies of its stored questions between turns)."""
    if message.kind != "query":
        return message
    return message.replace(pinned=False, metadata={k: v for k, v in message.metadata.items()
                                                   if k != "kind"})


def query_message(query: str) -> ChatMessage:
    return ChatMessage.query(query)


def inject_message(text: str) -> ChatMessage:
    """A message the user sent mid-run: pinned so compaction cannot drop it before it is
    answered (the guard's pinned cap unpins the oldest ones if they pile up)."""
    return ChatMessage.inject(text)


def tool_turn_messages(
    assistant: ChatMessage, outcomes: Sequence[ToolOutcome]
) -> list[ChatMessage]:
    """The assistant's tool-call message followed by one tool message per call, in call order.

    Providers require every tool call to be answered by a tool message directly after it,
    so results are appended in the order of ``assistant.tool_calls`` whatever order the
    calls finished in.
    """
    by_id = {o.call_id: o for o in outcomes}
    out = [assistant]
    for call in assistant.tool_calls or ():
        outcome = by_id[call.id]
        out.append(ChatMessage.tool(call.id, outcome.content, name=call.name))
    return out


def trace_entries(iteration: int, outcomes: Iterable[ToolOutcome]) -> list[ToolTraceEntry]:
    return [
        ToolTraceEntry(
            iteration=iteration, call_id=o.call_id, tool=o.tool, arguments=o.arguments,
            result_preview=o.preview, duration_s=o.duration_s, error=o.error,
        )
        for o in outcomes
    ]


# ----------------------------------------------------------------- cycles


def call_key(name: str, arguments: dict[str, Any]) -> str:
    """A canonical identity for "the same tool with the same arguments" (key order ignored)."""
    return name + "\x00" + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


class CycleHit(BaseModel):
    """The same call repeated ``repeats`` times in a row."""

    model_config = ConfigDict(frozen=True)

    tool: str
    arguments: dict[str, Any]
    repeats: int


def detect_cycle(
    calls: Sequence[ToolCall], new_calls: int, threshold: int | None
) -> CycleHit | None:
    """Did one of the last ``new_calls`` calls complete a run of identical calls?

    ``calls`` is every tool call of the run in order; the last ``new_calls`` are this
    turn's. A warning is due when an identical streak reaches ``threshold``, and again at
    each further multiple of it (a model that ignores the warning hears it again, but not
    on every single repeat). ``threshold`` ``None`` or < 2 disables detection (one call
    cannot be a cycle).
    """
    if threshold is None or threshold < 2 or new_calls <= 0:
        return None
    keys = [call_key(c.name, c.arguments) for c in calls]
    hit: CycleHit | None = None
    streak = 0
    start = len(keys) - new_calls
    for i, key in enumerate(keys):
        streak = streak + 1 if i > 0 and keys[i - 1] == key else 1
        if i >= start and streak % threshold == 0:
            hit = CycleHit(tool=calls[i].name, arguments=calls[i].arguments, repeats=streak)
    return hit


def cycle_warning_message(hit: CycleHit) -> ChatMessage:
    text = prompts.CYCLE_WARNING.format(
        tool=hit.tool, repeats=hit.repeats,
        arguments=json.dumps(hit.arguments, ensure_ascii=False, default=str),
    )
    return ChatMessage.warning(text)


# ----------------------------------------------------------------- final answers

AnswerAction = Literal["finish", "defer_for_inject", "checklist"]


def on_final_answer(
    *,
    pending_injections: bool,
    tool_calls_run: int,
    checklist_threshold: int | None,
    checklist_done: bool,
    iterations_left: int,
) -> AnswerAction:
    """What to do with a final answer (an assistant turn without tool calls).

    * ``defer_for_inject``: a message was injected while the model was answering; the
      answer is set aside and the model answers again with the message in view.
    * ``checklist``: at least ``checklist_threshold`` tool calls ran and the checklist has
      not run in this request: inject it and loop once more.
    * ``finish`` otherwise — and always when no iteration is left, because a real answer
      beats an honest "I ran out of steps".
    """
    if iterations_left <= 0:
        return "finish"
    if pending_injections:
        return "defer_for_inject"
    if (
        checklist_threshold is not None
        and not checklist_done
        and tool_calls_run >= checklist_threshold
    ):
        return "checklist"
    return "finish"


def checklist_message() -> ChatMessage:
    return ChatMessage.checklist(prompts.CHECKLIST_PROMPT)


def partial_answer(
    iterations: int, trace: Sequence[ToolTraceEntry], last_note: str | None
) -> str:
    """The honest answer at the iteration limit: says it stopped, and what it found."""
    lines = [prompts.PARTIAL_ANSWER_HEADER.format(iterations=iterations)]
    if trace:
        lines.append("")
        lines.append("What I did so far:")
        for entry in trace[-10:]:
            args = json.dumps(entry.arguments, ensure_ascii=False, default=str)
            status = f"failed ({entry.error})" if entry.error else entry.result_preview
            lines.append(f"- {entry.tool}({args}): {status}")
        if len(trace) > 10:
            lines.append(f"  (and {len(trace) - 10} earlier tool calls)")
    if last_note and last_note.strip():
        lines.append("")
        lines.append(f"My last note: {last_note.strip()}")
    return "\n".join(lines)


# ----------------------------------------------------------------- synthesis


def synthesis_messages(
    query: str,
    injected: Sequence[str],
    trace: Sequence[ToolTraceEntry],
    brief_answer: str,
    *,
    partial: bool = False,
) -> list[ChatMessage]:
    """The two messages the streamed synthesis is written from.

    The query is pinned (kind "query") so the guard keeps it if the trace must be cut.
    """
    parts = [f"Request:\n{query}"]
    if injected:
        parts.append("Follow-up messages from the user:\n" + "\n".join(f"- {t}" for t in injected))
    if trace:
        rows = []
        for i, entry in enumerate(trace, 1):
            args = json.dumps(entry.arguments, ensure_ascii=False, default=str)
            outcome = f"ERROR ({entry.error}): " if entry.error else ""
            rows.append(f"{i}. {entry.tool}({args}) -> {outcome}{entry.result_preview}")
        parts.append("Tool calls and results:\n" + "\n".join(rows))
    else:
        parts.append("Tool calls and results: none")
    label = "Brief answer (partial: the agent hit its step limit)" if partial else "Brief answer"
    parts.append(f"{label}:\n{brief_answer}")
    return [
        ChatMessage.system(prompts.SYNTHESIS_SYSTEM_PROMPT),
        ChatMessage.query("\n\n".join(parts)),
    ]


# ----------------------------------------------------------------- tool selection


def tool_selection_messages(query: str, tools: Sequence[tuple[str, str]]) -> list[ChatMessage]:
    listing = "\n".join(f"- {name}: {desc.splitlines()[0] if desc else ''}" for name, desc in tools)
    return [
        ChatMessage.system(prompts.TOOL_SELECTION_PROMPT),
        ChatMessage.user(f"Tools:\n{listing}\n\nRequest:\n{query[:4000]}"),
    ]


def parse_tool_selection(text: str, available: Sequence[str]) -> list[str] | None:
    """Tool names from a selector's reply, or ``None`` when it is unusable (use all tools).

    Accepts a JSON array anywhere in the text (models like to add prose or code fences);
    unknown names are dropped; an empty selection is treated as unusable because an agent
    without tools cannot do what it was built for.
    """
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(value, list):
        return None
    known = set(available)
    chosen = [n for n in dict.fromkeys(v for v in value if isinstance(v, str)) if n in known]
    return chosen or None
