"""The texts the ReAct agent adds to a conversation.

Kept apart from the loop so they can be read, reviewed and replaced in one place. Notices
the agent injects mid-run (cycle warning, checklist) are sent as *user* messages with a
bracketed tag rather than as system messages: several OpenAI-compatible servers (and the
chat templates of many open models) reject or silently drop a system message that is not
first in the list.
"""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = (
    "You are a capable assistant that solves the user's task step by step with the tools "
    "available to you. Call a tool whenever you need information or a computation you do "
    "not have; never invent a tool result. Read each tool result before deciding the next "
    "step. Messages tagged [Conversation summary] stand for earlier parts of the "
    "conversation: treat them as true context. When you have what you need, reply with "
    "the final answer directly (without a tool call), in the language the user writes in."
)

CHECKLIST_PROMPT = (
    "[Checklist] Before you finish, check your answer above against this list:\n"
    "1. Does it answer every part of the user's request, including any follow-up messages "
    "the user sent while you were working?\n"
    "2. Is every number, name and fact backed by a tool result above (no guesses stated as "
    "facts)?\n"
    "3. Did a tool fail in a way that changes the answer? Then retry it or say so.\n"
    "4. Is something still missing? Then call the tools you need now.\n"
    "If the answer is complete, reply with the complete final answer again."
)

CYCLE_WARNING = (
    "[Warning] You have called the tool {tool!r} with the same arguments {repeats} times in "
    "a row ({arguments}). Repeating the same call will not give a new result. Change the "
    "arguments, use a different tool, or answer with what you already know."
)

PARTIAL_ANSWER_HEADER = (
    "I stopped after {iterations} steps (the limit for one request) without reaching a "
    "final answer, so this answer is incomplete."
)

SYNTHESIS_SYSTEM_PROMPT = (
    "You write the final answer to the user's request. You are given the request, any "
    "follow-up messages the user sent, the tool calls an agent made with (previews of) "
    "their results, and the agent's brief answer. Write a complete, well-organised answer "
    "in the language the user writes in. Use only facts from the tool results and the "
    "brief answer; copy numbers, names, units and identifiers exactly. If the work was "
    "incomplete or a tool failed, say what is missing. Do not describe the tool mechanics "
    "unless the user needs them."
)

TOOL_SELECTION_PROMPT = (
    "Choose the tools an assistant may need for the user's request. Reply with a JSON "
    "array of tool names taken from the list, and nothing else. When unsure, include the "
    "tool."
)
