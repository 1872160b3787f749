"""docs/configuration.md is generated from the settings classes and lists every variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxstack.cli.config_reference import render, settings_classes
from ctxstack.configuration import env_vars
from ctxstack.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
# a string literal that names one of ctxstack's variables
VARIABLE = re.compile(r"""["'`]((?:CTXSTACK|LLM|FAST_LLM)_[A-Z0-9_]+)["'`]""")


def test_the_reference_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run scripts/gen-config-docs")


def test_every_variable_the_code_names_is_in_the_reference() -> None:
    documented = set(re.findall(r"`((?:CTXSTACK|LLM|FAST_LLM)_[A-Z0-9_]+)`", render()))
    named: dict[str, str] = {}
    for path in (ROOT / "src" / "ctxstack").rglob("*.py"):
        for name in VARIABLE.findall(path.read_text(encoding="utf-8")):
            named.setdefault(name, str(path.relative_to(ROOT)))
    assert "LLM_CONTEXT_SIZE" in named  # the scan sees the core's budget variables too
    missing = {name: where for name, where in named.items() if name not in documented}
    assert not missing, f"variables read but not in any settings class: {missing}"


def test_every_variable_has_a_meaning() -> None:
    for cls in settings_classes():
        for name, field in cls.model_fields.items():
            if env_vars(field):
                assert field.description, f"{cls.__name__}.{name} needs a docstring"


NUMBERS = {"LLMSettings": "LLM_TIMEOUT", "FastLLMSettings": "FAST_LLM_TIMEOUT",
           "BudgetSettings": "FAST_LLM_CONTEXT_SIZE", "StorageSettings": "CTXSTACK_DB_POOL_SIZE",
           "Settings": "CTXSTACK_MAX_ITERATIONS", "ProxySettings": "CTXSTACK_PROXY_CHECKPOINTS"}


@pytest.mark.parametrize("cls", list(settings_classes()), ids=lambda c: c.__name__)
def test_a_bad_value_is_a_config_error_naming_its_variable(cls: type) -> None:
    var = NUMBERS[cls.__name__]
    env = {"CTXSTACK_PROXY_UPSTREAM": "http://127.0.0.1:9/v1", var: "lots"}
    with pytest.raises(ConfigError, match=f"^{var}: .*'lots'"):
        cls.from_env(env)


def test_settings_built_from_values_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxstack.server.settings import Settings

    monkeypatch.setenv("CTXSTACK_MAX_ITERATIONS", "3")
    assert Settings().max_iterations == 12
    assert Settings.from_env().max_iterations == 3
    assert Settings.from_env({"CTXSTACK_MAX_ITERATIONS": " 4 "}).max_iterations == 4
    assert Settings.from_env({"CTXSTACK_MAX_ITERATIONS": "  "}).max_iterations == 12
