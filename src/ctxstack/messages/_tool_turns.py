"""Whether a list of chat messages is a valid chat-completions request, and its repair.

A request is valid when every ``tool`` message answers a call of the nearest assistant
message with ``tool_calls`` before it (only other tool results in between) and every such
call is answered before the next non-tool message. Real logs break this — an interrupted
run leaves a call without its result, an export loses a call but keeps its result, a
user interjects while a tool runs — and a provider rejects the whole request. Everything
that builds a request from history (``smart_truncate``, ``llm_compact``, the guard, the
memories) passes it through :func:`repair_tool_turns`; :func:`tool_turns_valid` is the
one tight pass that makes that free for a list that is already valid.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxstack.messages._model import ChatMessage

INTERRUPTED_RESULT = "[no result: the tool call was interrupted before it returned]"
"""Content of the tool result :func:`repair_tool_turns` adds for a call that has none."""
REPAIRED_KEY = "repaired"
"""Metadata key on a message :func:`repair_tool_turns` made (value: what it stands for)."""


def tool_turn_problems(messages: Sequence[ChatMessage]) -> list[str]:
    """What makes ``messages`` an invalid chat-completions request, one line per problem.

    A request is valid when every ``tool`` message answers a call of the nearest
    assistant message with ``tool_calls`` before it, with only other tool results in
    between, and every such call is answered before the next non-tool message. A call
    id an assistant message uses twice (some local servers number every call ``call_0``)
    expects two results. An empty list means valid.
    """
    problems: list[str] = []
    open_ids: list[str] = []  # unanswered call ids (a reused id once per call)
    where = 0  # index of their assistant message

    def close(at: int) -> None:
        for call_id in open_ids:
            problems.append(f"messages[{where}]: tool call {call_id!r} has no result "
                            f"before messages[{at}]" if at < len(messages) else
                            f"messages[{where}]: tool call {call_id!r} has no result")
        open_ids.clear()

    in_group = False
    for i, m in enumerate(messages):
        if m.role == "tool":
            if in_group and m.tool_call_id in open_ids:
                open_ids.remove(m.tool_call_id)
            else:
                problems.append(f"messages[{i}]: tool result {m.tool_call_id!r} answers no "
                                f"call of the assistant message before it")
            continue
        close(i)
        in_group = bool(m.role == "assistant" and m.tool_calls)
        if in_group:
            open_ids, where = [c.id for c in m.tool_calls or ()], i
    close(len(messages))
    return problems


def tool_turns_valid(messages: Sequence[ChatMessage]) -> bool:
    """Whether :func:`tool_turn_problems` is empty — the fast check (one tight pass)."""
    open_ids: list[str] = []
    for m in messages:
        role = m.role
        if role == "tool":
            if m.tool_call_id not in open_ids:
                return False
            open_ids.remove(m.tool_call_id)
            continue
        if open_ids:
            return False
        if role == "assistant":
            calls = m.tool_calls
            if calls:
                open_ids = [c.id for c in calls]
    return not open_ids


def repair_tool_turns(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``messages`` made a valid request (see :func:`tool_turn_problems`); a new list.

    What real logs need, decided so that nothing the model could use is lost and
    nothing invalid is sent:

    * a tool result that arrives after a user or system message interjected while its
      tool ran (its call is still unanswered, and no assistant message came between)
      moves back to its group, before the interjection — the only reordering;
    * a tool result that answers no call (an orphan: its call was lost, or it answers a
      call already answered) is dropped, pinned or not — a provider rejects it and the
      model could not tell what it answers;
    * a call that never got a result (an interrupted run) gets a ``tool`` result
      :data:`INTERRUPTED_RESULT`, so the call and the assistant's words stay visible.

    Messages made or moved here are new objects only where something changed; a valid
    list comes back as an equal copy (same message objects). Linear in ``len(messages)``.
    """
    msgs = list(messages)
    if tool_turns_valid(msgs):
        return msgs
    out: list[ChatMessage] = []
    group_end = -1  # index in `out` just past the current group's results
    open_ids: list[str] = []  # unanswered call ids of the newest assistant tool call

    def fill() -> None:
        nonlocal group_end
        for call_id in open_ids:
            out.insert(group_end, ChatMessage.tool(
                call_id, INTERRUPTED_RESULT, metadata={REPAIRED_KEY: "interrupted"}))
            group_end += 1
        open_ids.clear()

    for m in msgs:
        if m.role == "tool":
            if m.tool_call_id in open_ids:
                open_ids.remove(m.tool_call_id)
                out.insert(group_end, m)
                group_end += 1
            continue  # an orphan: dropped
        if m.role == "assistant" and m.tool_calls:
            fill()
            out.append(m)
            group_end = len(out)
            open_ids = [c.id for c in m.tool_calls]  # a reused id expects a result per call
            continue
        if m.role == "assistant":
            fill()  # the model moved on: a result arriving later answers nothing
        out.append(m)
    fill()
    return out
