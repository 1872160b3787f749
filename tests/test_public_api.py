"""The import paths docs/DESIGN.md §2.3 promises are part of the contract."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

import ctxstack

DESIGN_TOP_LEVEL = {
    "ChatMessage", "ToolCall", "ContentPart",
    "CompactUtils", "ContextGuard", "Hint",
    "BaseMemory", "WindowMemory", "SummaryMemory", "DbMemory",
    "ModelBudget", "resolve_budget",
    "LLM", "LLMResult", "Usage",
}

DESIGN_SUBMODULES = {
    "ctxstack.agent": {"ReActAgent", "AgentResult", "Tool", "tool"},
    "ctxstack.llm.openai": {"OpenAICompatibleLLM"},
    "ctxstack.llm": {"ScriptedLLM"},
}


def test_all_is_sorted_and_complete() -> None:
    assert ctxstack.__all__ == sorted(ctxstack.__all__, key=lambda n: (not n.isupper(), n))
    assert set(ctxstack.__all__) >= DESIGN_TOP_LEVEL
    exported = {n for n in dir(ctxstack) if not n.startswith("_") and not isinstance(getattr(ctxstack, n), types.ModuleType)}
    assert set(ctxstack.__all__) == exported | {"DbMemory"}
    for name in ctxstack.__all__:
        assert getattr(ctxstack, name) is not None, name


def test_submodule_paths() -> None:
    for module, names in DESIGN_SUBMODULES.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name}"


def test_every_error_class_is_exported() -> None:
    import ctxstack.errors as errors

    classes = {
        name for name, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    }
    assert classes <= set(ctxstack.__all__)
    for name in classes:
        assert issubclass(getattr(ctxstack, name), ctxstack.CtxstackError), name


def test_bad_arguments_raise_config_or_input_errors_that_are_value_errors() -> None:
    from ctxstack.agent import ReActAgent
    from ctxstack.dag import DAGExecutor

    assert issubclass(ctxstack.ConfigError, ValueError)
    assert issubclass(ctxstack.InputError, ValueError)
    llm = ctxstack.ScriptedLLM(["x"])
    guard = ctxstack.ContextGuard()
    with pytest.raises(ctxstack.ConfigError, match="max_iterations"):
        ReActAgent(llm, [], guard, max_iterations=0)
    with pytest.raises(ctxstack.ConfigError, match="max_concurrency"):
        DAGExecutor(llm, [], max_concurrency=0)
    with pytest.raises(ctxstack.InputError, match="inject"):
        ReActAgent(llm, [], guard).inject("  ")
