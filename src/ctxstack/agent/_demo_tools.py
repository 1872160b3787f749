"""Harmless built-in tools for demos and the ``ctxstack chat`` CLI.

They touch nothing outside the process: a calculator that evaluates arithmetic through
the ``ast`` module (no ``eval``: a model-written expression must not run code), a clock,
and a word counter. :func:`evaluate` is the library's one safe arithmetic evaluator; the
chat service's ``calculate`` tool uses it too.
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
from collections.abc import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ctxstack.agent._tools import Tool, tool
from ctxstack.errors import InputError

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
MAX_EXPONENT = 1000
MAX_EXPRESSION_CHARS = 500
MAX_INTEGER_BITS = 10_000
"""Integers stay below this size (about 3,000 digits): a bounded exponent alone does not bound
``((10**100)**1000)**1000``, and Python refuses to print integers past 4,300 digits."""


class CalculationError(ValueError):
    """The expression is not plain arithmetic, is too large, or cannot be evaluated.

    A ``ValueError`` because the input is at fault; inside an agent the tool loop turns it
    into a tool result (``"exception: CalculationError"``) the model can read and correct.
    """


def normalize_expression(expression: str) -> str:
    """The expression as it is evaluated: stripped, with ``^ × ÷`` read as ``** * /``."""
    return expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")


def evaluate(expression: str) -> float:
    """Evaluate arithmetic: numbers, + - * / // % **, parentheses, a few math functions.

    The text goes through :func:`normalize_expression` first. Nothing is ``eval``-ed: the
    parsed tree is walked and only the operators, functions and constants listed in this
    module are allowed, so a model-written expression cannot run code.

    Raises:
        CalculationError: an empty expression or one longer than
            :data:`MAX_EXPRESSION_CHARS`; anything but arithmetic (names, attributes, other
            calls, strings, lists); an exponent above :data:`MAX_EXPONENT` or an integer
            above :data:`MAX_INTEGER_BITS`; a division by zero, an overflow or a math domain
            error. The message names what was wrong.
    """
    text = normalize_expression(expression)
    if not text:
        raise CalculationError("expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not an arithmetic expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise CalculationError("expression is nested too deeply") from None
    try:
        value = _eval(tree.body)
    except CalculationError:
        raise
    except RecursionError:
        raise CalculationError("expression is nested too deeply") from None
    except (ZeroDivisionError, OverflowError, ValueError, TypeError) as exc:
        raise CalculationError(f"cannot evaluate {text!r}: {exc}") from None
    _check_size(value)
    return value


def format_number(value: float) -> str:
    """``value`` as text, integral floats below 1e15 without their ``.0``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _check_size(value: float) -> None:
    if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
        raise CalculationError(f"result is too large (over {MAX_INTEGER_BITS} bits)")


def _eval(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(
        node.value, bool
    ):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > MAX_EXPONENT:
                raise CalculationError(f"exponent {right} is too large (limit {MAX_EXPONENT})")
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and abs(left).bit_length() * right > MAX_INTEGER_BITS
            ):  # bit_length * exponent bounds the result's size before computing it
                raise CalculationError(f"result is too large (over {MAX_INTEGER_BITS} bits)")
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
    raise CalculationError(f"unsupported element in expression: {ast.dump(node)[:80]}")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Args:
        expression: arithmetic such as "(12.5 + 7) * 3" or "sqrt(2) ** 2"; supports
            + - * / // % ** (or ^) and sqrt, abs, round, min, max, log, exp, sin, cos,
            pi, e.
    """
    return format_number(evaluate(expression))


@tool
def clock(timezone: str = "UTC") -> str:
    """The current date and time in a time zone.

    Args:
        timezone: an IANA zone name such as "Europe/Paris" or "Asia/Tokyo".
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InputError(f"unknown time zone {timezone!r}") from None
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
