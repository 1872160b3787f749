"""The service's calibration wiring: per-role counters fed by every turn's metered models."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from ctxstack.budget import ModelBudget
from ctxstack.errors import ConfigError
from ctxstack.guard import ContextGuard
from ctxstack.llm import LLMResult, ScriptedLLM, ToolSpec, Usage
from ctxstack.messages import ChatMessage
from ctxstack.server.settings import Settings
from ctxstack.server.state import LLMProvider
from ctxstack.tokens import HEURISTIC, CalibratingCounter, UsageMeter

MAIN = ModelBudget(role="main", context_size=32_000, max_output_tokens=4_000)
FAST = ModelBudget(role="fast", context_size=16_000, max_output_tokens=2_000)
TOOLS: list[ToolSpec] = [{"type": "function", "function": {
    "name": "calculate", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]


def _scaled(factor: float) -> ScriptedLLM:
    """A provider billing ``factor`` x the heuristic for messages and tool specs."""

    def handler(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> LLMResult:
        billed = HEURISTIC.count_messages(messages) + CalibratingCounter().tool_specs_tokens(tools)
        return LLMResult(message=ChatMessage.assistant("ok"),
                         usage=Usage(input_tokens=math.ceil(billed * factor), calls=1))

    return ScriptedLLM(handler=handler)


def _history(n: int) -> list[ChatMessage]:
    return [ChatMessage.user(f"message {i}: " + "token " * 120) for i in range(n)]


def test_calibrate_setting_defaults_on_and_reads_false_values() -> None:
    assert Settings.from_env({}).calibrate is True
    for off in ("0", "false", "False", "no", "off"):
        assert Settings.from_env({"CTXSTACK_CALIBRATE": off}).calibrate is False
    assert Settings.from_env({"CTXSTACK_CALIBRATE": "1"}).calibrate is True
    with pytest.raises(ConfigError, match="CTXSTACK_CALIBRATE"):
        Settings.from_env({"CTXSTACK_CALIBRATE": "sometimes"})
    off = Settings(calibrate=False)
    assert Settings.from_env(off.to_env()).calibrate is False
    assert Settings.from_env(Settings().to_env()).calibrate is True


async def test_each_role_learns_from_its_own_model_across_turns() -> None:
    provider = LLMProvider(Settings(), main=_scaled(1.6), fast=_scaled(1.0))
    main_counter, fast_counter = provider.counter("main"), provider.counter("fast")
    assert main_counter is not None
    assert fast_counter is not None
    for turn in range(1, 7):  # every turn has its own meter; the counters outlive them
        meter = UsageMeter()
        main_llm, fast_llm = provider.for_turn(MAIN, FAST, meter)
        await main_llm.chat(_history(turn), tools=TOOLS)
        await fast_llm.chat(_history(turn))
        assert meter.usage.calls == 2
    assert main_counter.samples() == 6
    assert main_counter.factor() == pytest.approx(1.6, abs=0.08)
    assert fast_counter.factor() == pytest.approx(1.0, abs=0.01)

    # The main counter, as the turn hands it to the guard, now compacts what the
    # heuristic believes fits.
    messages = _history(12)
    budget = int(HEURISTIC.count_messages(messages) * 1.3)
    assert await ContextGuard(default_budget=budget).check_and_compact(messages) == messages
    guard = ContextGuard(default_budget=budget, counter=main_counter)
    assert len(await guard.check_and_compact(messages)) < len(messages)


async def test_service_counters_only_correct_upward() -> None:
    provider = LLMProvider(Settings(), main=_scaled(0.7), fast=_scaled(0.7))
    main_llm, _ = provider.for_turn(MAIN, FAST, UsageMeter())
    for turn in range(1, 5):
        await main_llm.chat(_history(turn))
    counter = provider.counter("main")
    assert counter is not None
    assert counter.samples() == 4
    assert counter.factor() == 1.0


async def test_demo_model_leaves_the_counts_unchanged() -> None:
    provider = LLMProvider(Settings())  # no endpoint: the offline demo model
    main_llm, fast_llm = provider.for_turn(MAIN, FAST, UsageMeter())
    await main_llm.chat([ChatMessage.user("What is 12 * 7? " + "please " * 40)], tools=TOOLS)
    stream = fast_llm.stream_chat([ChatMessage.user("Explain context windows. " * 10)])
    await stream.text()
    main_counter, fast_counter = provider.counter("main"), provider.counter("fast")
    assert main_counter is not None
    assert fast_counter is not None
    assert main_counter.samples() + main_counter.rejected == 1  # it was fed
    assert fast_counter.samples() == 1
    assert main_counter.factor() == 1.0
    assert fast_counter.factor() == 1.0


async def test_disabled_calibration_feeds_and_applies_nothing() -> None:
    provider = LLMProvider(Settings(calibrate=False), main=_scaled(1.6), fast=_scaled(1.6))
    assert provider.counter("main") is None
    assert provider.counter("fast") is None
    main_llm, _ = provider.for_turn(MAIN, FAST, UsageMeter())
    result = await main_llm.chat(_history(3))
    assert result.usage.input_tokens > 0


def test_clients_are_passed_in_pairs() -> None:
    with pytest.raises(ConfigError, match="both main and fast"):
        LLMProvider(Settings(), main=_scaled(1.0))
