"""The tools the chat service gives its agent: small, safe, offline.

They are plain typed functions (the agent package turns them into tools) so the service,
the demo model and the tests share them. None of them touches the network, the file system
or evaluates code: ``calculate`` walks a parsed arithmetic expression itself.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from datetime import UTC, datetime

from ctxstack.agent import Tool, tool

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "min": min, "max": max,
    "log": math.log, "exp": math.exp, "sin": math.sin, "cos": math.cos,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000


class CalculationError(ValueError):
    """The expression is not plain arithmetic, or cannot be evaluated."""


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(
        node.value, bool
    ):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculationError(f"exponent {right} is too large (limit {MAX_EXPONENT})")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*[_evaluate(a) for a in node.args])
    raise CalculationError(f"unsupported element in expression: {ast.dump(node)[:80]}")


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / // % **, parentheses, sqrt, pi…).

    Args:
        expression: the arithmetic to evaluate, e.g. "(17 + 25) * 3".
    """
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculationError("expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not an arithmetic expression: {exc.msg}") from None
    try:
        value = _evaluate(tree)
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        raise CalculationError(f"cannot evaluate {text!r}: {exc}") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{text} = {value}"


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
