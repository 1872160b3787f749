"""Tools: schema from typed functions, validation, and failures turned into readable results."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
from typing import Literal

import pytest
from pydantic import BaseModel

from ctxstack.agent import Tool, ToolRegistry, tool
from ctxstack.agent._tools import parse_docstring, render_result
from ctxstack.errors import ToolArgumentsError, ToolError
from ctxstack.messages import ToolCall


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number, which
            defaults to two.
    """
    return a + b


@tool(name="lookup", timeout=0.2)
async def slow_lookup(key: str, mode: Literal["fast", "slow"] = "fast") -> str:
    """Look a key up in the slow store."""
    await asyncio.sleep(1.0 if mode == "slow" else 0)
    return f"value-of-{key}"


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=dict(arguments))


# ----------------------------------------------------------------- definition


def test_schema_comes_from_type_hints_and_docstring() -> None:
    assert add.name == "add"
    assert add.description == "Add two integers."
    params = add.parameters
    assert params["type"] == "object"
    assert params["required"] == ["a"]
    assert params["properties"]["a"] == {"type": "integer", "description": "the first number."}
    assert params["properties"]["b"]["default"] == 2
    assert params["properties"]["b"]["description"] == "the second number, which defaults to two."
    assert params["additionalProperties"] is False
    assert "title" not in params
    assert "title" not in params["properties"]["a"]
    spec = add.spec()
    assert spec == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.", "parameters": params}}


def test_decorator_options_and_literal_enum() -> None:
    assert slow_lookup.name == "lookup"
    assert slow_lookup.timeout == 0.2
    assert slow_lookup.parameters["properties"]["mode"]["enum"] == ["fast", "slow"]


def test_parameter_names_that_shadow_pydantic_attributes_work() -> None:
    @tool
    def fetch(json: str, schema: int, model_config: bool = False) -> str:
        """Fetch things."""
        return f"{json}:{schema}:{model_config}"

    assert set(fetch.parameters["properties"]) == {"json", "schema", "model_config"}
    assert fetch.validate_arguments({"json": "x", "schema": "3"}) == {
        "json": "x", "schema": 3, "model_config": False}


def test_pydantic_model_parameters_are_nested_schemas() -> None:
    class Point(BaseModel):
        x: float
        y: float

    @tool
    def norm(p: Point) -> float:
        """Length of a vector."""
        return float((p.x**2 + p.y**2) ** 0.5)

    assert norm.parameters["properties"]["p"]["$ref"].endswith("Point")
    assert norm.validate_arguments({"p": {"x": 3, "y": 4}})["p"] == Point(x=3, y=4)


def test_docstring_parser_google_and_sphinx() -> None:
    summary, args = parse_docstring(
        "Do a thing\nacross two lines.\n\nMore text.\n\nArgs:\n    path (str): where.\n"
        "    count: how many\n        at most.\n\nReturns:\n    stuff: not an arg.\n"
    )
    assert summary == "Do a thing across two lines."
    assert args == {"path": "where.", "count": "how many at most."}
    summary, args = parse_docstring("Sphinx style.\n\n:param str name: the name\n:returns: x")
    assert summary == "Sphinx style."
    assert args == {"name": "the name"}
    summary, args = parse_docstring("NumPy style.\n\nParameters\n----------\nx : int\n"
                                    "    the x\n    coordinate.\n")
    assert (summary, args) == ("NumPy style.", {"x": "the x coordinate."})


@pytest.mark.parametrize(
    ("fn_src", "match"),
    [
        ("def f(x):\n    'Doc.'\n", "needs a type hint"),
        ("def f(*args: int) -> None:\n    'Doc.'\n", r"\*args"),
        ("def f(**kw: int) -> None:\n    'Doc.'\n", r"\*args"),
        ("def f(x: int) -> None:\n    pass\n", "docstring or a description"),
        ("def f(x: 'Missing') -> None:\n    'Doc.'\n", "cannot resolve type hints"),
    ],
)
def test_invalid_definitions_raise_tool_error(fn_src: str, match: str) -> None:
    namespace: dict[str, object] = {}
    exec(fn_src, namespace)
    with pytest.raises(ToolError, match=match):
        tool(namespace["f"])  # type: ignore[arg-type]


def test_invalid_names_and_schemas_raise_tool_error() -> None:
    with pytest.raises(ToolError, match="tool name"):
        Tool("has space", "d", {"type": "object"}, lambda: 1)
    with pytest.raises(ToolError, match="type 'object'"):
        Tool("t", "d", {"type": "string"}, lambda: 1)
    with pytest.raises(ToolError, match="required"):
        Tool("t", "d", {"type": "object", "properties": {}, "required": ["x"]}, lambda: 1)
    with pytest.raises(ToolError, match="timeout"):
        Tool("t", "d", {"type": "object"}, lambda: 1, timeout=0)


def test_registry_refuses_duplicates_and_wraps_functions() -> None:
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    reg = ToolRegistry([add, shout])
    assert reg.names == ["add", "shout"]
    assert "shout" in reg
    assert len(reg) == 2
    with pytest.raises(ToolError, match="duplicate tool name 'add'"):
        reg.register(add)
    with pytest.raises(ToolError, match="not a tool"):
        reg.register(42)  # type: ignore[arg-type]
    assert [s["function"]["name"] for s in reg.specs(["shout", "nope"])] == ["shout"]


# ----------------------------------------------------------------- execution


async def test_execute_success_sync_and_async() -> None:
    reg = ToolRegistry([add, slow_lookup])
    out = await reg.execute(call("add", a=3, b="4"))  # lax coercion of "4"
    assert (out.content, out.error) == ("7", None)
    out = await reg.execute(call("lookup", key="k"))
    assert (out.content, out.error) == ("value-of-k", None)
    assert out.duration_s >= 0


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[bool] = []

    @tool
    def where() -> str:
        """Report the thread."""
        seen.append(threading.current_thread() is threading.main_thread())
        return "ok"

    await ToolRegistry([where]).execute(call("where"))
    assert seen == [False]


async def test_tool_exception_becomes_a_readable_result() -> None:
    @tool
    def broken(x: int) -> int:
        """Always fails."""
        raise RuntimeError(f"disk on fire at {x}")

    out = await ToolRegistry([broken]).execute(call("broken", x=1))
    assert out.error == "exception: RuntimeError"
    assert "RuntimeError: disk on fire at 1" in out.content
    assert out.content.startswith("Error:")


async def test_bad_arguments_become_a_readable_result_naming_the_fields() -> None:
    out = await ToolRegistry([add]).execute(call("add", a="many", c=1))
    assert out.error == "invalid_arguments"
    assert "a: Input should be a valid integer" in out.content
    assert "c: Extra inputs are not permitted" in out.content
    assert '"required": ["a"]' in out.content  # the schema is shown so the model can fix it
    out = await ToolRegistry([add]).execute(call("add"))
    assert "a: Field required" in out.content


async def test_timeout_becomes_a_result_per_tool_and_default() -> None:
    reg = ToolRegistry([slow_lookup])
    started = time.perf_counter()
    out = await reg.execute(call("lookup", key="k", mode="slow"), default_timeout=30)
    assert time.perf_counter() - started < 0.9  # the tool's own 0.2 s won
    assert out.error == "timeout"
    assert "timed out after 0.2s" in out.content

    @tool
    async def sleepy() -> str:
        """Sleeps."""
        await asyncio.sleep(1)
        return "late"

    out = await ToolRegistry([sleepy]).execute(call("sleepy"), default_timeout=0.05)
    assert out.error == "timeout"
    assert "0.05s" in out.content


async def test_unknown_tool_lists_the_available_ones() -> None:
    out = await ToolRegistry([add]).execute(call("subtract", a=1))
    assert out.error == "unknown_tool"
    assert "no tool named 'subtract'" in out.content
    assert "add" in out.content


async def test_hand_written_schema_is_checked_structurally() -> None:
    async def impl(city: str, days: int = 1) -> dict[str, object]:
        return {"city": city, "days": days}

    weather = Tool(
        "weather", "Forecast.",
        {"type": "object", "properties": {"city": {"type": "string"},
                                          "days": {"type": "integer"},
                                          "unit": {"enum": ["C", "F"]}},
         "required": ["city"], "additionalProperties": False},
        impl,
    )
    reg = ToolRegistry([weather])
    ok = await reg.execute(call("weather", city="Oslo", days=2))
    assert ok.content == '{"city": "Oslo", "days": 2}'
    bad = await reg.execute(call("weather", days=True, unit="K", x=1))
    assert bad.error == "invalid_arguments"
    for clause in ("city: Field required", "x: Extra inputs", "days: expected integer, got boolean",
                   "unit: must be one of"):
        assert clause in bad.content
    with pytest.raises(ToolArgumentsError):
        await weather.call({"city": 5})


async def test_cancellation_propagates() -> None:
    @tool
    async def forever() -> str:
        """Never ends."""
        await asyncio.sleep(100)
        return "x"

    task = asyncio.create_task(ToolRegistry([forever]).execute(call("forever"), default_timeout=None))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_render_result() -> None:
    class M(BaseModel):
        a: int

    assert render_result("x") == "x"
    assert render_result(None) == "(no output)"
    assert render_result(M(a=1)) == '{"a":1}'
    assert render_result({"é": [1, 2]}) == '{"é": [1, 2]}'
    assert render_result(datetime.date(2024, 5, 1)) == '"2024-05-01"'  # str() fallback


# ----------------------------------------------------------------- demo tools


def test_calculator_evaluates_arithmetic_only() -> None:
    from ctxstack.agent._demo_tools import CalculationError, calculator, evaluate, word_count

    assert evaluate("(12.5 + 7) * 3") == 58.5
    assert evaluate("2^10") == 1024
    assert evaluate(" 6 × 7 ÷ 2 ") == 21
    assert evaluate("-sqrt(16) + max(1, 2)") == -2
    for bad in ("__import__('os').system('true')", "x + 1", "open('f')", "2 ** 100000",
                "1 +", "'a' * 3", "", "1/0", "exp(1000)", "1" * 501):
        with pytest.raises(CalculationError):
            evaluate(bad)
    # a bounded exponent alone does not bound the result: nested powers are refused up front
    with pytest.raises(CalculationError, match="too large"):
        evaluate("((10**100)**1000)**1000")
    with pytest.raises(CalculationError, match="too large"):
        evaluate("*".join(["(9**999)"] * 20))
    assert issubclass(CalculationError, ValueError)
    assert word_count.parameters["required"] == ["text"]
    assert calculator.parameters["properties"]["expression"]["type"] == "string"


async def test_demo_tools_through_the_registry() -> None:
    from ctxstack.agent._demo_tools import demo_tools

    reg = ToolRegistry(demo_tools())
    assert reg.names == ["calculator", "clock", "word_count"]
    assert (await reg.execute(call("calculator", expression="6*7"))).content == "42"
    assert (await reg.execute(call("calculator", expression="1/4"))).content == "0.25"
    bad = await reg.execute(call("calculator", expression="import os"))
    assert bad.error == "exception: CalculationError"
    counted = await reg.execute(call("word_count", text="one two\nthree"))
    assert counted.content == '{"words": 3, "characters": 13, "lines": 2}'
    now = await reg.execute(call("clock"))
    assert now.error is None
    assert "UTC" in now.content
    unknown = await reg.execute(call("clock", timezone="Mars/Olympus"))
    assert "unknown time zone" in unknown.content


async def test_unparseable_arguments_kept_raw_by_the_client_become_a_readable_result() -> None:
    from ctxstack.llm.wire import RAW_ARGUMENTS_KEY

    out = await ToolRegistry([add]).execute(call("add", **{RAW_ARGUMENTS_KEY: '{"a": 1, "b"'}))
    assert out.error == "invalid_arguments"
    assert "not a valid JSON object" in out.content
    assert '{"a": 1, "b"' in out.content
