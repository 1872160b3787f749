"""The tools the chat service gives its agent: small, safe, offline.

They are plain typed functions (the agent package turns them into tools) so the service,
the demo model and the tests share them. None of them touches the network, the file system
or evaluates code: ``calculate`` uses the library's safe evaluator
(:func:`ctxstack.agent.demo_tools.evaluate`), which walks the parsed expression itself.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ctxstack.agent import Tool, tool
from ctxstack.agent.demo_tools import (
    CalculationError,
    evaluate,
    format_number,
    normalize_expression,
)

__all__ = [
    "CalculationError",
    "calculate",
    "current_time",
    "find_arithmetic",
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


ARITHMETIC = re.compile(r"[\d.]+\s*(?:[-+*/×÷^%]|\*\*)\s*[\d.(]")


def find_arithmetic(text: str) -> str | None:
    """The first arithmetic expression in ``text`` (what the demo model asks to calculate)."""
    match = re.search(r"[\d.()\s]*\d[\d.()\s]*(?:(?:\*\*|[-+*/×÷^%])[\d.()\s]*\d[\d.()\s]*)+",
                      text)
    if match is None or not ARITHMETIC.search(match.group(0)):
        return None
    return match.group(0).strip()


def service_tools() -> list[Tool]:
    """The agent's tools in the chat service (fresh objects: a turn may not alter another's)."""
    return [tool(calculate), tool(text_stats), tool(current_time)]
