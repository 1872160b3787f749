"""Compaction prompts, one per hint, and the post-processing of what the summariser says.

Different situations need different compression: an agent mid-task needs its reasoning
chain and exact data, a planner needs the user's evolving intent, a DAG step needs numbers
and conclusions. A :data:`Hint` selects the prompt; every prompt ends by telling the model
to write in the conversation's language (otherwise CJK conversations come back summarised
in English).
"""

from __future__ import annotations

import re
from typing import Literal, get_args

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
    "identifiers and error messages. Never invent facts. Output only the summary text, "
    "without preamble."
)

_PROMPTS: dict[Hint, str] = {
    "react_iteration": (
        f"{_COMMON}\n\nThis is an agent's working memory in the middle of a task. Write a "
        "structured working summary with exactly these sections:\n"
        "## Goal\n## Key data\n## Tried and learned\n## Errors still relevant\n"
        "## Pending\n## Next step\n"
        "Keep: the current goal as it now stands, the recent reasoning chain, key data with "
        "exact values. Drop: stale or superseded steps, failed retries that taught nothing, "
        "verbose tool output (keep only what it established). Merge the previous working "
        "summary into the new one: keep its items unless they are done or resolved; mark "
        "finished items with '(done)' only if they still matter, otherwise remove them."
    ),
    "planner_input": (
        f"{_COMMON}\n\nThe summary will be read by a planner that must understand what the "
        "user wants. Keep: the user's intent as it evolved (latest wins, note changes), "
        "decisions taken, constraints and preferences the user stated (even once, even "
        "early). Drop: dialogue detail, greetings, pleasantries, tool-call mechanics."
    ),
    "step_dependency": (
        f"{_COMMON}\n\nThe summary feeds a later step of a plan. Keep: data, numbers, "
        "results and conclusions. Drop: the reasoning process, failed attempts, formatting "
        "and verbose presentation."
    ),
    "general": (
        f"{_COMMON}\n\nKeep: key facts, decisions, tool results and open questions. Drop: "
        "greetings, filler and redundant back-and-forth."
    ),
}


def check_hint(hint: str) -> Hint:
    """Return ``hint`` typed, or raise :class:`ConfigError` listing the valid hints."""
    if hint not in HINTS:
        raise ConfigError(f"hint: unknown hint {hint!r} (expected one of {', '.join(HINTS)})")
    return hint


def compaction_prompt(hint: str, custom: str | None = None) -> str:
    """The summariser's system prompt for ``hint``; ``custom`` replaces the hint text.

    The language instruction is always the last sentence, custom prompt or not.
    """
    body = custom if custom is not None else _PROMPTS[check_hint(hint)]
    return f"{body.rstrip()}\n\n{LANGUAGE_INSTRUCTION}"


_SCRATCHPAD = re.compile(
    r"<(think|thinking|analysis|scratchpad|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE
)


def strip_scratchpad(text: str) -> str:
    """Remove analysis/scratchpad blocks some models emit before their answer."""
    return _SCRATCHPAD.sub("", text).strip()


def finalize_summary(hint: str, previous: str | None, new: str) -> str:
    """Post-process a summariser answer given the summary it replaces.

    The summariser is asked to merge ``previous`` itself; this hook is where code-level
    merging (for ``react_iteration`` working summaries) happens.
    """
    return new
