"""The tools the chat service gives its agent: small, safe, offline.

They are plain typed functions (the agent package turns them into tools) so the service,
the demo model and the tests share them. None of them touches the network, the file system
or evaluates code: ``calculate`` uses the library's safe evaluator
(:func:`ctxstack.agent._demo_tools.evaluate`), which walks the parsed expression itself.
"""

from __future__ import annotations

import copy
import functools
import re
from datetime import UTC, datetime

from ctxstack.agent import Tool, tool
from ctxstack.agent._demo_tools import (
    CalculationError,
    evaluate,
    format_number,
    normalize_expression,
)
from ctxstack.protocol import ToolSpec

__all__ = [
    "CalculationError",
    "calculate",
    "current_time",
    "find_arithmetic",
    "service_tool_specs",
    "service_tools",
    "text_stats",
]


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / // % **, parentheses, sqrt, pi…).

    Args:
        expression: the arithmetic to evaluate, e.g. "(17 + 25) * 3".
    """
    value = evaluate(expression)  # raises CalculationError naming what was wrong
    return f"{normalize_expression(expression)} = {format_number(value)}"


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
_WORD = re.compile(r"\w+", re.UNICODE)


def text_stats(text: str) -> str:
    """Count the characters, words and lines of a text and list the numbers in it.

    Args:
        text: the text to measure.
    """
    words = _WORD.findall(text)
    numbers = _NUMBER.findall(text)
    non_ascii = sum(1 for ch in text if ord(ch) > 127)
    parts = [
        f"characters: {len(text)}",
        f"words: {len(words)}",
        f"lines: {text.count(chr(10)) + 1 if text else 0}",
        f"non-ASCII characters: {non_ascii}",
    ]
    if numbers:
        parts.append("numbers: " + ", ".join(numbers[:20]))
    return "; ".join(parts)


def current_time() -> str:
    """The current date and time in UTC (ISO 8601)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


_DIGITS = frozenset("0123456789")
_OPERAND_CHARS = frozenset("0123456789.()")
_OPERATORS = frozenset("-+*/×÷^%")
MAX_ARITHMETIC_SCAN = 20_000
"""Only this many leading characters are searched for arithmetic (the demo model's finder)."""


def _tokens(text: str) -> list[tuple[str, int, int]]:
    """``text`` as (kind, start, end) runs: "num" (an operand with a digit), "blank" (an
    operand without one), "op" (``**`` or one operator) and "other". One pass, O(n)."""
    out: list[tuple[str, int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _OPERAND_CHARS or ch.isspace():
            j, digit = i, False
            while j < n and (text[j] in _OPERAND_CHARS or text[j].isspace()):
                digit = digit or text[j] in _DIGITS
                j += 1
            out.append(("num" if digit else "blank", i, j))
        elif ch in _OPERATORS:
            j = i + 2 if text.startswith("**", i) else i + 1
            out.append(("op", i, j))
        else:
            j = i + 1
            while j < n and not (text[j] in _OPERAND_CHARS or text[j].isspace()
                                 or text[j] in _OPERATORS):
                j += 1
            out.append(("other", i, j))
        i = j
    return out


def _adjacent(text: str, left: tuple[str, int, int], right: tuple[str, int, int]) -> bool:
    """An operator between ``left`` and ``right`` joins a number to a number or ``(``."""
    before = text[left[1]:left[2]].rstrip()
    after = text[right[1]:right[2]].lstrip()
    return bool(before) and (before[-1] in _DIGITS or before[-1] == ".") and (
        bool(after) and (after[0] in _DIGITS or after[0] in ".("))


def find_arithmetic(text: str) -> str | None:
    """The first arithmetic expression in ``text`` (what the demo model asks to calculate).

    An expression is a run of operands (digits, ``.``, parentheses, spaces — at least one
    digit each) joined by single operators (``+ - * / × ÷ ^ %`` or ``**``), with at least
    one operator written between two numbers. A hand-written scanner, linear in the text
    (the regular expression it replaces backtracked in cubic time on long digit strings:
    one 1,200-digit message froze the server for seconds, issue 15); only the first
    :data:`MAX_ARITHMETIC_SCAN` characters are searched.
    """
    text = text[:MAX_ARITHMETIC_SCAN]
    tokens = _tokens(text)
    k = 0
    while k < len(tokens):
        if tokens[k][0] != "num":
            k += 1
            continue
        end, joined = k, False
        while (end + 2 < len(tokens) and tokens[end + 1][0] == "op"
               and tokens[end + 2][0] == "num"):
            joined = joined or _adjacent(text, tokens[end], tokens[end + 2])
            end += 2
        if end > k:
            if not joined:
                return None
            return text[tokens[k][1]:tokens[end][2]].strip()
        k += 1
    return None


@functools.cache
def _templates() -> tuple[Tool, ...]:
    """The tools built once per process: :func:`~ctxstack.agent.tool` derives each one's
    JSON schema and argument validator from its signature with pydantic, which costs a few
    milliseconds of CPU — on the event loop, per turn, if done every time (issue 15)."""
    return (tool(calculate), tool(text_stats), tool(current_time))


def service_tools() -> list[Tool]:
    """The agent's tools in the chat service (fresh objects with their own parameter
    schemas: a turn may not alter another's; the schema and the validator are built once)."""
    tools = []
    for template in _templates():
        fresh = copy.copy(template)
        fresh.parameters = copy.deepcopy(template.parameters)
        tools.append(fresh)
    return tools


def service_tool_specs() -> list[ToolSpec]:
    """The specs :func:`service_tools` sends, read from the per-process templates (no
    copies): what a load leaves room for beside the history."""
    return [template.spec() for template in _templates()]
