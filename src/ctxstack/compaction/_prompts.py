"""Compaction prompts, one per hint, and the post-processing of what the summariser says.

Different situations need different compression: an agent mid-task needs its reasoning
chain and exact data, a planner needs the user's evolving intent, a DAG step needs numbers
and conclusions. A :data:`Hint` selects the prompt (a custom prompt may replace it); an
unknown hint is a :class:`~ctxstack.errors.ConfigError`, never a silent fallback to
``general``. Every prompt ends by telling the model to write in the conversation's
language (otherwise CJK conversations come back summarised in English).

After the call, :func:`strip_scratchpad` removes the analysis blocks reasoning models emit
and :func:`finalize_summary` merges ``react_iteration`` working summaries across
successive compactions of one run (see :mod:`ctxstack.compaction._working_summary`).
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from ctxstack.compaction._working_summary import (
    SECTIONS,
    drop_appended_blocks,
    merge_working_summaries,
)
from ctxstack.errors import ConfigError

Hint = Literal["react_iteration", "planner_input", "step_dependency", "general"]
HINTS: tuple[Hint, ...] = get_args(Hint)

SUMMARY_PREFIX = "[Conversation summary]"
LANGUAGE_INSTRUCTION = (
    "Write the summary in the same language as the conversation (if it mixes languages, "
    "use the language the user writes in)."
)

_COMMON = (
    "You compress the earlier part of a conversation between a user and an AI assistant so "
    "that the assistant can continue without it. You receive the previous summary (if any) "
    "and the messages to fold in. Produce ONE updated summary that replaces both. Copy exact "
    "values verbatim: numbers, amounts, units, IDs, file paths, URLs, dates, names, code "
    "identifiers and error messages. Never invent facts and never answer the user's "
    "question yourself. Output only the summary text, without preamble or closing remarks."
)

_SECTION_LIST = "\n".join(f"## {name}" for name in SECTIONS)

_PROMPTS: dict[Hint, str] = {
    "react_iteration": (
        f"{_COMMON}\n\n"
        "This is the working memory of an agent in the middle of a task; it will continue "
        "from your summary alone. Write a structured working summary with exactly these "
        "six sections, headings verbatim in English even when the content is in another "
        "language, items as '- ' bullets:\n"
        f"{_SECTION_LIST}\n"
        "Goal: the task as it now stands (the latest instruction wins). Key data: facts "
        "established so far, one per line as 'name: value' with exact values. Tried and "
        "learned: what was attempted and what it showed, one line each, including dead ends "
        "not worth repeating. Errors still relevant: unresolved errors with their exact "
        "messages. Pending: work not yet done. Next step: the single next action.\n"
        "Keep: the current goal, the recent reasoning chain, key data with exact values. "
        "Drop: stale or superseded steps, failed retries that taught nothing, verbose tool "
        "output (keep only what it established).\n"
        "The previous working summary is merged with yours by code: its items are kept "
        "unless you close them, so you may leave out items that did not change. To close an "
        "item, repeat it followed by '(done)' (finished work) or '(resolved)' (an error that "
        "no longer matters); to update a key data value, repeat its name with the new "
        "value. Keep these markers in English."
    ),
    "planner_input": (
        f"{_COMMON}\n\n"
        "The summary will be read by a planner that splits the user's request into steps. "
        "Keep: the user's intent as it evolved (the latest request wins; note what changed), "
        "decisions already taken and answers already given (so the plan does not redo "
        "them), every constraint, preference and requirement the user stated, even once and "
        "even early (formats, deadlines, budgets, exclusions), and results already obtained "
        "with exact values. Drop: dialogue detail, greetings and pleasantries, tool-call "
        "mechanics (which tool ran with which arguments), the assistant's intermediate "
        "reasoning. Organise it as: Intent, Constraints, Decisions, Known results."
    ),
    "step_dependency": (
        f"{_COMMON}\n\n"
        "The summary is the input of a later step of a plan, which needs results, not the "
        "story of how they were found. Keep: data, numbers with their units, identifiers, "
        "sources, and the conclusions drawn. Drop: the reasoning process, failed attempts "
        "and retries, formatting, decoration and verbose presentation. Prefer a compact "
        "list of 'item: value' lines followed by the conclusions."
    ),
    "general": (
        f"{_COMMON}\n\n"
        "Keep: key facts, the user's requests and preferences, decisions made, tool results "
        "(what they returned, not how they were called) and open questions. Drop: "
        "greetings, thanks, filler and redundant back-and-forth."
    ),
}


def check_hint(hint: str) -> Hint:
    """Return ``hint`` typed, or raise :class:`ConfigError` listing the valid hints."""
    if hint not in HINTS:
        raise ConfigError(f"hint: unknown hint {hint!r} (expected one of {', '.join(HINTS)})")
    return hint


def compaction_prompt(hint: str, custom: str | None = None) -> str:
    """The summariser's system prompt for ``hint``; ``custom`` replaces the hint text.

    The hint is validated even when a custom prompt is given (a typo in a hint is a bug
    either way). The language instruction is always the last sentence, custom prompt or
    not. An empty custom prompt is a :class:`ConfigError`: it would leave the model with
    nothing but the language instruction.
    """
    checked = check_hint(hint)
    if custom is not None and not custom.strip():
        raise ConfigError("prompt: a custom compaction prompt must not be empty")
    body = custom if custom is not None else _PROMPTS[checked]
    return f"{body.rstrip()}\n\n{LANGUAGE_INSTRUCTION}"


SUMMARY_INSTRUCTION_MARKER = "[ctxstack: context compaction]"
"""How a cache-aligned summary request's last message starts (see :func:`summary_instruction`)."""

_INSTRUCTION_INTRO = (
    f"{SUMMARY_INSTRUCTION_MARKER} Do not answer or continue the conversation above and do "
    "not call tools. Instead, summarise the conversation above this message so that it can "
    "continue without it: the previous summary, if any, is the [Conversation summary] "
    "message above (fold it into the new one), and everything else above is the messages to "
    "fold in. Follow these instructions:"
)


def summary_instruction(hint: str, custom: str | None = None) -> str:
    """The last user message of a cache-aligned summary request.

    The conversation's own messages stand above it (the prefix the provider has cached),
    so it says what to do with them, then carries :func:`compaction_prompt` (the hint's
    instructions, or ``custom``) unchanged — ending, like every compaction prompt, with
    the language sentence (which is how model stubs recognise a summary request).
    """
    return f"{_INSTRUCTION_INTRO}\n\n{compaction_prompt(hint, custom=custom)}"


def is_summary_instruction(text: str) -> bool:
    """Whether ``text`` is a :func:`summary_instruction` (a model stub recognises the
    request by it)."""
    return text.startswith(SUMMARY_INSTRUCTION_MARKER)


_SCRATCHPAD = re.compile(
    r"<(think|thinking|analysis|scratchpad|reasoning|reflection)>.*?(</\1>|\Z)",
    re.DOTALL | re.IGNORECASE,
)
# A closing tag whose opening tag the server swallowed (some reasoning-model deployments
# send "...reasoning</think>answer"): everything before it is reasoning.
_ORPHAN_CLOSE = re.compile(
    r"\A.*?</(think|thinking|analysis|scratchpad|reasoning|reflection)>",
    re.DOTALL | re.IGNORECASE,
)
# Channel-tagged output ("<|channel|>analysis<|message|>...<|end|>"): only the final
# channel is the answer.
_CHANNEL = re.compile(
    r"<\|channel\|>\s*(\w+)\s*<\|message\|>(.*?)(?=<\|end\|>|<\|return\|>|<\|start\|>|\Z)",
    re.DOTALL,
)
_CHANNEL_TOKENS = re.compile(r"<\|(?:start|end|return|channel|message)\|>(?:assistant)?")


def strip_scratchpad(text: str) -> str:
    """Remove the analysis/scratchpad blocks some models emit before their answer.

    Handles ``<think>…</think>``-style blocks (also unclosed ones, and a closing tag whose
    opening tag is missing) and channel-tagged output, keeping only the ``final`` channel.
    What remains may be empty: an answer that was *only* analysis is no summary.
    """
    if "<|channel|>" in text:
        finals = [body for name, body in _CHANNEL.findall(text) if name.lower() == "final"]
        text = "\n".join(finals)
        text = _CHANNEL_TOKENS.sub("", text)
    text = _SCRATCHPAD.sub("", text)
    text = _ORPHAN_CLOSE.sub("", text)
    return text.strip()


def finalize_summary(hint: str, previous: str | None, new: str) -> str:
    """Post-process a summariser answer given the summary it replaces.

    Scratchpad blocks are stripped, a leading :data:`SUMMARY_PREFIX` removed (the caller
    adds it once), and any "Facts kept verbatim:" list dropped (the caller re-attaches
    one, derived from the folded messages and the previous summary). For
    ``react_iteration`` the structured working summary is merged with ``previous`` by
    :func:`~ctxstack.compaction._working_summary.merge_working_summaries`: items of the previous
    summary survive unless the new one closes them. Other hints, a missing
    previous summary, or an answer without the section structure are returned as they are
    (the model was asked to fold the previous summary in itself).
    """
    checked = check_hint(hint)
    text = drop_appended_blocks(_strip_prefix(strip_scratchpad(new)))
    if checked != "react_iteration" or not previous or not text:
        return text
    return merge_working_summaries(_strip_prefix(strip_scratchpad(previous)), text)


def _strip_prefix(text: str) -> str:
    text = text.strip()
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX):].lstrip(" :\n")
    return text
