"""Harmless built-in tools for demos and the ``ctxstack chat`` CLI.

They touch nothing outside the process: a calculator that evaluates arithmetic through
the ``ast`` module (no ``eval``: a model-written expression must not run code), a clock,
and a word counter.
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
from collections.abc import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ctxstack.agent.tools import Tool, tool

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
    "log": math.log, "exp": math.exp,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPONENT = 1000
MAX_EXPRESSION_CHARS = 500


def evaluate(expression: str) -> float:
    """Evaluate arithmetic: numbers, + - * / // % **, parentheses, a few math functions.

    Raises:
        ValueError: anything else (names, attributes, calls of other functions), or an
            exponent large enough to stall the process.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None
    return _eval(tree.body)


def _eval(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(
        node.value, bool
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large (limit {MAX_EXPONENT})")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_eval(a) for a in node.args))
    raise ValueError(f"unsupported element in expression: {ast.dump(node)[:60]}")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: arithmetic such as "(12.5 + 7) * 3" or "sqrt(2) ** 2"; supports
            + - * / // % ** and sqrt, abs, round, min, max, log, exp, pi, e.
    """
    value = evaluate(expression)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@tool
def clock(timezone: str = "UTC") -> str:
    """The current date and time in a time zone.

    Args:
        timezone: an IANA zone name such as "Europe/Paris" or "Asia/Tokyo".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}") from None
    now = dt.datetime.now(zone)
    return now.strftime("%Y-%m-%d %H:%M:%S %Z (%A)")


@tool
def word_count(text: str) -> dict[str, int]:
    """Count the words, characters and lines of a text.

    Args:
        text: the text to measure.
    """
    return {
        "words": len(text.split()),
        "characters": len(text),
        "lines": text.count("\n") + 1 if text else 0,
    }


def demo_tools() -> list[Tool]:
    """The three demo tools, in a stable order."""
    return [calculator, clock, word_count]
