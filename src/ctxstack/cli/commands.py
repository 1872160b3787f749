"""The terminal chat's slash commands, and its context meter in text.

A line whose first word is ``/`` followed by letters is a command and is never sent to the
model (an unknown one gets a hint to type ``/help``); anything else is a question. Text
that merely starts with a slash, like ``/etc/hosts is missing``, is a question: a command
word has letters only.

``/context`` prints how full the context was at the last model call, by part, against the
budget (the same parts as the web page's meter): the system prompt, the conversation
summary, the earlier conversation kept verbatim, this turn's tool calls and results, and
the question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.messages import ChatMessage
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._counter import budget_margin

Command = Literal["help", "context", "compact", "new", "quit"]
COMMANDS: dict[str, Command] = {
    "/help": "help", "/context": "context", "/compact": "compact", "/new": "new",
    "/quit": "quit", "/exit": "quit",
}
HELP = """Commands (never sent to the model):
  /help     this list
  /context  how full the context was at the last model call, by part
  /compact  summarise the earlier conversation now (the fast model writes the summary)
  /new      start a new conversation (forget the history)
  /quit     leave (also /exit, Ctrl-D)"""
_COMMAND_WORD = re.compile(r"/[A-Za-z]+")


@dataclass(frozen=True)
class Parsed:
    """A line read from the terminal: a command, an unknown command, or a question."""

    command: Command | None = None
    unknown: str | None = None
    question: str | None = None


def parse_line(line: str) -> Parsed:
    """What ``line`` asks for (see the module docstring). Blank lines are nothing."""
    text = line.strip()
    if not text:
        return Parsed()
    if text.lower() in ("exit", "quit"):
        return Parsed(command="quit")
    word = text.split(maxsplit=1)[0]
    if _COMMAND_WORD.fullmatch(word):
        command = COMMANDS.get(word.lower())
        return Parsed(command=command) if command else Parsed(unknown=word)
    return Parsed(question=text)


Part = Literal["system", "summary", "history", "tools", "question"]
PART_LABELS: dict[Part, str] = {
    "system": "system", "summary": "summary", "history": "history",
    "tools": "tool outputs", "question": "question",
}


def context_parts(
    messages: Sequence[ChatMessage], counter: TokenCounter | None = None
) -> dict[Part, int]:
    """Tokens by part of a context as sent to the model: the last user message without
    tool traffic after it is the question; tool results and the assistant's tool calls
    after it are this turn's tool outputs."""
    counter = counter or DEFAULT_COUNTER
    parts: dict[Part, int] = {"system": 0, "summary": 0, "history": 0, "tools": 0,
                              "question": 0}
    question = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    for i, message in enumerate(messages):
        tokens = counter.count_message(message)
        if message.role == "system":
            summary = message.metadata.get("kind") == "summary" or message.text.startswith(
                SUMMARY_PREFIX)
            parts["summary" if summary else "system"] += tokens
        elif i == question:
            parts["question"] += tokens
        elif i > question >= 0:
            parts["tools"] += tokens
        else:
            parts["history"] += tokens
    return parts


def meter_line(parts: dict[Part, int], budget: int) -> str:
    """``context 1,234 / 6,000 tokens (21%) — system 80 · summary 0 · …``."""
    used = sum(parts.values())
    share = used / budget if budget else 0.0
    detail = " · ".join(f"{PART_LABELS[p]} {n:,}" for p, n in parts.items())
    return f"context {used:,} / {budget:,} tokens ({share:.0%}) — {detail}"


def counter_label(counter: TokenCounter) -> str:
    """How a CLI command says what it counts with: exact, or the heuristic and its margin."""
    margin = budget_margin(counter)
    if margin > 0:
        return f"{counter.cache_key} (estimate; {margin:.0%} of the budget kept free)"
    return f"{counter.cache_key} (exact)"


__all__ = ["HELP", "Parsed", "context_parts", "counter_label", "meter_line", "parse_line"]
