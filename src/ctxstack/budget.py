"""Layer 5: how many input tokens a model can take.

``usable_input_tokens = context_size - max_output_tokens`` (defaults 128,000 − 64,000 =
64,000). No fixed system-prompt reserve is subtracted: the system prompt is one of the
messages the guard estimates, so a reserve would count it twice.

Each of the two numbers is resolved on its own, first source that has it wins:

1. the database ``ModelConfig`` row for the role (admin-set);
2. the environment: ``LLM_CONTEXT_SIZE`` / ``LLM_MAX_OUTPUT_TOKENS`` for the main model,
   ``FAST_LLM_CONTEXT_SIZE`` / ``FAST_LLM_MAX_OUTPUT_TOKENS`` for the fast one — which,
   when unset, falls back to the *main* role's resolved value;
3. the defaults.

A result under 4,000 tokens is clamped to 4,000 with a logged warning: a misconfiguration
should degrade loudly, not starve the model. A value that is not a positive integer is a
:class:`~ctxstack.errors.ConfigError` naming where it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, computed_field

from ctxstack.configuration import EnvSettings
from ctxstack.errors import ConfigError

log = logging.getLogger(__name__)

BudgetRole = Literal["main", "fast"]
DEFAULT_CONTEXT_SIZE = 128_000
DEFAULT_MAX_OUTPUT_TOKENS = 64_000
MIN_USABLE_INPUT_TOKENS = 4_000

_ENV = {
    "main": ("LLM_CONTEXT_SIZE", "LLM_MAX_OUTPUT_TOKENS"),
    "fast": ("FAST_LLM_CONTEXT_SIZE", "FAST_LLM_MAX_OUTPUT_TOKENS"),
}
_FIELDS = {"main": ("context_size", "max_output_tokens"),
           "fast": ("fast_context_size", "fast_max_output_tokens")}


class ModelBudget(BaseModel):
    """A model's window split into input budget and reserved output.

    ``sources`` says where each number came from ("db", "env:LLM_CONTEXT_SIZE",
    "default", …) so an operator can see why a budget is what it is.
    """

    model_config = ConfigDict(frozen=True)

    role: BudgetRole = "main"
    context_size: int = DEFAULT_CONTEXT_SIZE
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    sources: dict[str, str] = {}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def usable_input_tokens(self) -> int:
        """``context_size - max_output_tokens``, never below 4,000."""
        return max(MIN_USABLE_INPUT_TOKENS, self.context_size - self.max_output_tokens)

    @property
    def clamped(self) -> bool:
        """True when the 4,000-token floor replaced a smaller (misconfigured) result."""
        return self.context_size - self.max_output_tokens < MIN_USABLE_INPUT_TOKENS


def input_tokens(budget: object, name: str) -> int:
    """The input-token limit ``budget`` stands for: a :class:`ModelBudget`'s usable input
    tokens, or a positive int as it is (how the guard and the adapters take a budget).

    Raises:
        ConfigError: ``budget`` is neither (a bool is no number here); the message names
            the argument ``name``.
    """
    if isinstance(budget, ModelBudget):
        return budget.usable_input_tokens
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(
            f"{name}: expected a positive number of tokens or a ModelBudget, got {budget!r}"
        )
    return budget


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip().replace("_", "")
        if not text.isdigit():
            raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
        number = int(text)
    else:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    if number <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return number


def _env_int(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().replace("_", "")
        if not text.isdigit() or int(text) <= 0:
            raise ValueError("expected a positive integer")
    return value


EnvTokens = Annotated[int | None, BeforeValidator(_env_int)]


class BudgetSettings(EnvSettings):
    """The budget's environment: step 2 of the resolution (module docstring). An unset
    number falls through to the next step, so these defaults are "unset"; the effective
    defaults are 128,000 and 64,000, and the fast role's the main role's numbers."""

    component: ClassVar[str] = "Budget (per model role)"
    keep_empty: ClassVar[bool] = True

    context_size: EnvTokens = Field(
        None, validation_alias="LLM_CONTEXT_SIZE", json_schema_extra={"doc_default": "`128_000`"})
    """The main model's context window in tokens (a database model config wins)."""
    max_output_tokens: EnvTokens = Field(
        None, validation_alias="LLM_MAX_OUTPUT_TOKENS",
        json_schema_extra={"doc_default": "`64_000`"})
    """Tokens the main model's answer may take, kept free of input."""
    fast_context_size: EnvTokens = Field(
        None, validation_alias="FAST_LLM_CONTEXT_SIZE",
        json_schema_extra={"doc_default": "the main model's"})
    """The fast model's context window."""
    fast_max_output_tokens: EnvTokens = Field(
        None, validation_alias="FAST_LLM_MAX_OUTPUT_TOKENS",
        json_schema_extra={"doc_default": "the main model's"})
    """The fast model's reserved output."""


def _config_value(config: object, field: str) -> object:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(field)
    return getattr(config, field, None)


def resolve_budget(
    role: BudgetRole = "main",
    model_config: object | None = None,
    env: Mapping[str, str] | None = None,
    *,
    main_config: object | None = None,
) -> ModelBudget:
    """Resolve the input budget for ``role``.

    Args:
        role: "main" (ReAct, chat) or "fast" (DAG steps, summaries).
        model_config: the database ``ModelConfig`` for this role — any mapping or object
            with ``context_size`` / ``max_output_tokens`` (either may be ``None``).
        env: the environment to read (defaults to ``os.environ``).
        main_config: for ``role="fast"``, the main role's database config, used in the
            fallback to the main role's resolved values.

    Raises:
        ConfigError: a value is not a positive integer; the message names its source.
    """
    if role not in _ENV:
        raise ConfigError(f"role: expected 'main' or 'fast', got {role!r}")
    settings = BudgetSettings.from_env(env)
    fallback = (
        resolve_budget("main", main_config, env) if role == "fast" else None
    )
    values: dict[str, int] = {}
    sources: dict[str, str] = {}
    for field, var, env_field in zip(("context_size", "max_output_tokens"), _ENV[role],
                                     _FIELDS[role], strict=True):
        db_value = _config_value(model_config, field)
        env_value = getattr(settings, env_field)
        if db_value is not None:
            values[field] = _positive_int(db_value, f"model_configs[{role}].{field}")
            sources[field] = "db"
        elif env_value is not None:
            values[field] = env_value
            sources[field] = f"env:{var}"
        elif fallback is not None:
            values[field] = getattr(fallback, field)
            sources[field] = f"main:{fallback.sources[field]}"
        else:
            values[field] = (
                DEFAULT_CONTEXT_SIZE if field == "context_size" else DEFAULT_MAX_OUTPUT_TOKENS
            )
            sources[field] = "default"
    budget = ModelBudget(role=role, sources=sources, **values)
    if budget.clamped:
        log.warning(
            "%s budget: context_size %d - max_output_tokens %d = %d is below the %d-token "
            "floor; using %d (sources: %s)",
            role, budget.context_size, budget.max_output_tokens,
            budget.context_size - budget.max_output_tokens, MIN_USABLE_INPUT_TOKENS,
            MIN_USABLE_INPUT_TOKENS, sources,
        )
    return budget
