"""The import paths docs/DESIGN.md §2.3 promises are part of the contract."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest

import ctxstack

DESIGN_TOP_LEVEL = {
    "ChatMessage", "ToolCall", "ContentPart",
    "CompactUtils", "ContextGuard", "Hint",
    "BaseMemory", "WindowMemory", "SummaryMemory", "DbMemory",
    "ModelBudget", "resolve_budget",
    "LLM", "LLMResult", "Usage",
}

# The curated root (issue 27): what a library user needs, pinned by name. Adding a name
# here is a decision about the public API, not a side effect of importing something.
CURATED_ROOT = DESIGN_TOP_LEVEL | {
    "TextPart", "ImagePart", "from_openai_messages",
    "TokenCounter", "CalibratingCounter",
    "CompactionOptions", "HistoryArchive", "CompactionEvent",
    "ReActAgent", "tool", "DAGEngine",
    "CtxstackError", "ConfigError", "MessageError", "LLMError", "ContextOverflowError",
}

DESIGN_SUBMODULES = {
    "ctxstack.agent": {"ReActAgent", "AgentResult", "Tool", "tool"},
    "ctxstack.dag": {"DAGPlanner", "DAGExecutor", "PlanAnalyzer", "DAGEngine"},
    "ctxstack.llm.openai": {"OpenAICompatibleLLM"},
    "ctxstack.llm": {"ScriptedLLM"},
    "ctxstack.testing": {"ScriptedLLM"},
    "ctxstack.memory.db": {"DbMemory"},
    "ctxstack.store.errors": {"StorageError", "NotFoundError", "FileRejectedError"},
    "ctxstack.server.errors": {"TurnBusyError", "NoRunningTurnError"},
}


def test_root_all_is_the_curated_list() -> None:
    assert ctxstack.__all__ == sorted(ctxstack.__all__, key=lambda n: (not n.isupper(), n))
    assert set(ctxstack.__all__) == CURATED_ROOT
    assert len(ctxstack.__all__) <= 32
    for name in ctxstack.__all__:
        assert getattr(ctxstack, name) is not None, name
    assert "ScriptedLLM" not in dir(ctxstack)
    with pytest.raises(AttributeError, match="ScriptedLLM"):
        _ = ctxstack.ScriptedLLM  # type: ignore[attr-defined]


def test_submodule_paths() -> None:
    for module, names in DESIGN_SUBMODULES.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name}"


def test_each_package_surface_is_its_all() -> None:
    """Every core package's ``__init__`` is its public surface: each name it lists resolves,
    and the objects behind it report where they are implemented (private modules)."""
    for package in ("ctxstack.messages", "ctxstack.tokens", "ctxstack.compaction",
                    "ctxstack.guard", "ctxstack.memory", "ctxstack.agent", "ctxstack.dag"):
        mod = importlib.import_module(package)
        assert mod.__all__ == sorted(mod.__all__, key=lambda n: (not n.isupper(), n)) or \
            sorted(mod.__all__) == sorted(set(mod.__all__)), package
        for name in mod.__all__:
            assert getattr(mod, name) is not None, f"{package}.{name}"


def test_every_error_derives_from_the_one_base() -> None:
    import ctxstack.errors as errors
    import ctxstack.server.errors as server_errors
    import ctxstack.store.errors as store_errors

    for module in (errors, store_errors, server_errors):
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                assert issubclass(obj, errors.CtxstackError), obj


def test_importing_tokens_stays_light() -> None:
    """``import ctxstack.tokens`` must not pull in the guard, the engines or an LLM client."""
    code = ("import sys, ctxstack.tokens; "
            "bad = [m for m in sys.modules if m.startswith(('ctxstack.guard', 'ctxstack.llm', "
            "'ctxstack.agent', 'ctxstack.dag', 'ctxstack.compaction', 'openai', 'httpx'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": "src"}, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bad_arguments_raise_config_or_input_errors_that_are_value_errors() -> None:
    from ctxstack.agent import ReActAgent
    from ctxstack.dag import DAGExecutor
    from ctxstack.errors import InputError
    from ctxstack.testing import ScriptedLLM

    assert issubclass(ctxstack.ConfigError, ValueError)
    assert issubclass(InputError, ValueError)
    llm = ScriptedLLM(["x"])
    guard = ctxstack.ContextGuard()
    with pytest.raises(ctxstack.ConfigError, match="max_iterations"):
        ReActAgent(llm, [], guard, max_iterations=0)
    with pytest.raises(ctxstack.ConfigError, match="max_concurrency"):
        DAGExecutor(llm, [], max_concurrency=0)
    with pytest.raises(InputError, match="inject"):
        ReActAgent(llm, [], guard).inject("  ")
