"""Layer 5: priority DB → env → defaults, fast falls back to main, floor, errors."""

from __future__ import annotations

import logging

import pytest

from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.errors import ConfigError


def test_defaults() -> None:
    b = resolve_budget(env={})
    assert (b.context_size, b.max_output_tokens, b.usable_input_tokens) == (128_000, 64_000, 64_000)
    assert b.sources == {"context_size": "default", "max_output_tokens": "default"}


def test_env_overrides_defaults() -> None:
    b = resolve_budget(env={"LLM_CONTEXT_SIZE": "32000", "LLM_MAX_OUTPUT_TOKENS": "8000"})
    assert b.usable_input_tokens == 24_000


def test_db_beats_env_per_field() -> None:
    env = {"LLM_CONTEXT_SIZE": "32000", "LLM_MAX_OUTPUT_TOKENS": "8000"}
    b = resolve_budget(model_config={"context_size": 200_000, "max_output_tokens": None}, env=env)
    assert (b.context_size, b.max_output_tokens) == (200_000, 8_000)
    assert b.sources["context_size"] == "db"


def test_db_config_may_be_an_object() -> None:
    class Row:
        context_size = 50_000
        max_output_tokens = 10_000

    assert resolve_budget(model_config=Row(), env={}).usable_input_tokens == 40_000


def test_fast_has_its_own_env_and_falls_back_to_main() -> None:
    env = {"LLM_CONTEXT_SIZE": "64000", "LLM_MAX_OUTPUT_TOKENS": "16000",
           "FAST_LLM_CONTEXT_SIZE": "32000"}
    fast = resolve_budget("fast", env=env)
    assert (fast.context_size, fast.max_output_tokens) == (32_000, 16_000)
    assert fast.sources["max_output_tokens"] == "main:env:LLM_MAX_OUTPUT_TOKENS"
    main = resolve_budget("main", env=env)
    assert main.usable_input_tokens == 48_000


def test_fast_falls_back_to_main_db_config() -> None:
    fast = resolve_budget("fast", env={}, main_config={"context_size": 16_000,
                                                        "max_output_tokens": 4_000})
    assert fast.usable_input_tokens == 12_000


def test_floor_clamps_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxstack.budget"):
        b = resolve_budget(env={"LLM_CONTEXT_SIZE": "8000", "LLM_MAX_OUTPUT_TOKENS": "6000"})
    assert b.usable_input_tokens == 4_000
    assert b.clamped
    assert "floor" in caplog.text


@pytest.mark.parametrize("bad", ["abc", "-5", "", "0", "1.5"])
def test_bad_env_names_the_variable(bad: str) -> None:
    with pytest.raises(ConfigError, match="LLM_MAX_OUTPUT_TOKENS"):
        resolve_budget(env={"LLM_MAX_OUTPUT_TOKENS": bad})
    with pytest.raises(ConfigError, match="FAST_LLM_CONTEXT_SIZE"):
        resolve_budget("fast", env={"FAST_LLM_CONTEXT_SIZE": bad})


def test_bad_db_value_names_the_row() -> None:
    with pytest.raises(ConfigError, match=r"model_configs\[main\]\.context_size"):
        resolve_budget(model_config={"context_size": -1}, env={})


def test_unknown_role() -> None:
    with pytest.raises(ConfigError, match="role"):
        resolve_budget("slow", env={})  # type: ignore[arg-type]


def test_model_budget_direct() -> None:
    assert ModelBudget(context_size=10_000, max_output_tokens=2_000).usable_input_tokens == 8_000
