"""Where an OpenAI-compatible endpoint is: base URL, API key and model, per role.

The main model (ReAct, chat) reads ``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_MODEL``. The
fast model (DAG steps, summaries) reads ``FAST_LLM_BASE_URL``, ``FAST_LLM_API_KEY``,
``FAST_LLM_MODEL``, each falling back *on its own* to the main variable — so a deployment
that only wants a cheaper fast model sets ``FAST_LLM_MODEL`` and nothing else.

All three are required: a missing (or empty) one is a :class:`~ctxstack.errors.ConfigError`
whose message lists exactly the variables to set. Local servers that ignore the key
(Ollama, vLLM, llama.cpp, LM Studio) still need a placeholder such as ``LLM_API_KEY=local``;
requiring it keeps "I forgot the key" a start-up error rather than a 401 mid-conversation.

Optional: ``LLM_TOKENIZER`` / ``FAST_LLM_TOKENIZER`` — the path of the model's Hugging Face
``tokenizer.json``, for exact token counts (:func:`tokenizer_path`); ``LLM_TIMEOUT`` /
``FAST_LLM_TIMEOUT``. The variables are read by the two pydantic-settings classes below
(:mod:`ctxstack.configuration`; ``docs/configuration.md`` lists them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator

from ctxstack.configuration import EnvSettings
from ctxstack.errors import ConfigError

LLMRole = Literal["main", "fast"]

_FIELDS = ("base_url", "api_key", "model")
_MAIN_VARS = {"base_url": "LLM_BASE_URL", "api_key": "LLM_API_KEY", "model": "LLM_MODEL"}
_FAST_VARS = {field: f"FAST_{var}" for field, var in _MAIN_VARS.items()}


class LLMSettings(EnvSettings):
    """The main model's endpoint and client settings (``LLM_*``).

    ``sources`` names the variable each endpoint value came from (``"LLM_MODEL"``,
    ``"FAST_LLM_MODEL"``, ``"code"``) so an operator can see why a role talks to what it
    talks to. The API key is never included in ``repr``. The endpoint fields are optional
    here (the chat service answers with its offline demo model when none is set);
    :func:`load_settings` is where they are required.
    """

    component: ClassVar[str] = "Main model (ReAct, chat)"

    role: LLMRole = "main"
    base_url: str | None = Field(None, validation_alias="LLM_BASE_URL")
    """The OpenAI-compatible base URL, ``/v1`` included (``http://localhost:11434/v1``);
    unset, the chat service answers with its offline demo model."""
    api_key: str | None = Field(None, validation_alias="LLM_API_KEY", repr=False)
    """The bearer key (any value for local servers that ignore it)."""
    model: str | None = Field(None, validation_alias="LLM_MODEL")
    """The model name sent with every request."""
    timeout: float = Field(60.0, gt=0, le=86_400, validation_alias="LLM_TIMEOUT")
    """Seconds one model call may take, retries included (the chat service's bound)."""
    tokenizer: str | None = Field(None, validation_alias="LLM_TOKENIZER")
    """Path of the model's Hugging Face ``tokenizer.json``, for exact token counts (a
    missing file: the heuristic, logged)."""
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip()
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v.rstrip("/")


class FastLLMSettings(LLMSettings):
    """The fast model's (DAG steps, summaries): each ``FAST_LLM_*`` endpoint variable falls
    back *on its own* to the main one."""

    component: ClassVar[str] = "Fast model (DAG steps, summaries)"

    role: LLMRole = "fast"
    base_url: str | None = Field(
        None, validation_alias=AliasChoices("FAST_LLM_BASE_URL", "LLM_BASE_URL"))
    """The fast model's base URL."""
    api_key: str | None = Field(
        None, validation_alias=AliasChoices("FAST_LLM_API_KEY", "LLM_API_KEY"), repr=False)
    """The fast model's key."""
    model: str | None = Field(None, validation_alias=AliasChoices("FAST_LLM_MODEL", "LLM_MODEL"))
    """The fast model's name."""
    timeout: float = Field(
        60.0, gt=0, le=86_400, validation_alias=AliasChoices("FAST_LLM_TIMEOUT", "LLM_TIMEOUT"))
    """Seconds one fast-model call may take."""
    tokenizer: str | None = Field(None, validation_alias="FAST_LLM_TOKENIZER")
    """The fast model's ``tokenizer.json``; unset: ``LLM_TOKENIZER`` when the fast model is
    the main one (:func:`tokenizer_path`)."""


def settings_class(role: LLMRole) -> type[LLMSettings]:
    """The settings class of ``role``.

    Raises:
        ConfigError: an unknown role.
    """
    if role not in ("main", "fast"):
        raise ConfigError(f"LLM role: expected 'main' or 'fast', got {role!r}")
    return FastLLMSettings if role == "fast" else LLMSettings


def env_var_names(role: LLMRole) -> dict[str, str]:
    """The variables a role reads, by field (``{"base_url": "FAST_LLM_BASE_URL", …}``)."""
    return dict(_FAST_VARS if role == "fast" else _MAIN_VARS)


def load_settings(role: LLMRole = "main", env: Mapping[str, str] | None = None) -> LLMSettings:
    """Read the settings of ``role`` from ``env`` (default ``os.environ``), the endpoint
    required.

    Raises:
        ConfigError: a required variable is missing or empty (the message lists every
            missing one, with the fast role's fallback spelled out), or a value is
            malformed (the message names its variable).
    """
    cls = settings_class(role)
    settings = cls.from_env(env)
    missing = [" or ".join(_candidates(role, field)) for field in _FIELDS
               if getattr(settings, field) is None]
    if missing:
        raise ConfigError(
            f"{role} LLM is not configured: set {', '.join(missing)}. Together the "
            "*_BASE_URL, *_API_KEY and *_MODEL variables name an OpenAI-compatible endpoint "
            "(base URL ending in /v1, API key — any value for local servers — and model)."
        )
    env = os.environ if env is None else env
    sources = {field: next(var for var in _candidates(role, field)
                           if env.get(var, "").strip()) for field in _FIELDS}
    return settings.model_copy(update={"sources": sources})


def tokenizer_path(role: LLMRole = "main", env: Mapping[str, str] | None = None) -> str | None:
    """The ``tokenizer.json`` path configured for ``role``'s model, or None.

    The main role reads ``LLM_TOKENIZER``. The fast role reads ``FAST_LLM_TOKENIZER`` and
    falls back to ``LLM_TOKENIZER`` only when its model *is* the main model (no
    ``FAST_LLM_MODEL``, or the same name): a tokenizer belongs to one model, and counting
    a different model with it would be wrong without saying so. Whether the file exists
    is checked when the counter is built (:func:`ctxstack.tokens.counter_for_model`
    logs and falls back to the heuristic).
    """
    main = LLMSettings.from_env(env)
    if role == "main":
        return main.tokenizer
    fast = FastLLMSettings.from_env(env)
    if fast.tokenizer:
        return fast.tokenizer
    return main.tokenizer if fast.model == main.model else None


def _candidates(role: LLMRole, field: str) -> list[str]:
    return [_FAST_VARS[field], _MAIN_VARS[field]] if role == "fast" else [_MAIN_VARS[field]]

