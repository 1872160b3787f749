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
``tokenizer.json``, for exact token counts (:func:`tokenizer_path`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ctxstack.errors import ConfigError

LLMRole = Literal["main", "fast"]

_FIELDS = ("base_url", "api_key", "model")
_MAIN_VARS = {"base_url": "LLM_BASE_URL", "api_key": "LLM_API_KEY", "model": "LLM_MODEL"}
_FAST_VARS = {field: f"FAST_{var}" for field, var in _MAIN_VARS.items()}


class LLMSettings(BaseModel):
    """Connection settings of one model endpoint.

    ``sources`` names the variable each value came from (``"LLM_MODEL"``,
    ``"FAST_LLM_MODEL"``, ``"code"``) so an operator can see why a role talks to what it
    talks to. The API key is never included in ``repr``.
    """

    model_config = ConfigDict(frozen=True)

    role: LLMRole = "main"
    base_url: str
    api_key: str = Field(repr=False)
    model: str
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        v = v.strip()
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v.rstrip("/")


def env_var_names(role: LLMRole) -> dict[str, str]:
    """The variables a role reads, by field (``{"base_url": "FAST_LLM_BASE_URL", …}``)."""
    return dict(_FAST_VARS if role == "fast" else _MAIN_VARS)


def load_settings(role: LLMRole = "main", env: Mapping[str, str] | None = None) -> LLMSettings:
    """Read the settings of ``role`` from ``env`` (default ``os.environ``).

    Raises:
        ConfigError: a required variable is missing or empty (the message lists every
            missing one, with the fast role's fallback spelled out), or the base URL is
            not an http(s) URL.
    """
    if role not in ("main", "fast"):
        raise ConfigError(f"LLM role: expected 'main' or 'fast', got {role!r}")
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    missing: list[str] = []
    for field in _FIELDS:
        candidates = [_FAST_VARS[field], _MAIN_VARS[field]] if role == "fast" else [
            _MAIN_VARS[field]
        ]
        for var in candidates:
            value = env.get(var, "").strip()
            if value:
                values[field] = value
                sources[field] = var
                break
        else:
            missing.append(" or ".join(candidates))
    if missing:
        raise ConfigError(
            f"{role} LLM is not configured: set {', '.join(missing)}. Together the "
            "*_BASE_URL, *_API_KEY and *_MODEL variables name an OpenAI-compatible endpoint "
            "(base URL ending in /v1, API key — any value for local servers — and model)."
        )
    try:
        return LLMSettings(role=role, sources=sources, **values)
    except ValueError as exc:
        raise ConfigError(f"{sources['base_url']}: {_first_error(exc)}") from None


def tokenizer_path(role: LLMRole = "main", env: Mapping[str, str] | None = None) -> str | None:
    """The ``tokenizer.json`` path configured for ``role``'s model, or None.

    The main role reads ``LLM_TOKENIZER``. The fast role reads ``FAST_LLM_TOKENIZER`` and
    falls back to ``LLM_TOKENIZER`` only when its model *is* the main model (no
    ``FAST_LLM_MODEL``, or the same name): a tokenizer belongs to one model, and counting
    a different model with it would be wrong without saying so. Whether the file exists
    is checked when the counter is built (:func:`ctxstack.tokens.counter_for_model`
    logs and falls back to the heuristic).
    """
    env = os.environ if env is None else env
    main = env.get("LLM_TOKENIZER", "").strip() or None
    if role == "main":
        return main
    fast = env.get("FAST_LLM_TOKENIZER", "").strip()
    if fast:
        return fast
    main_model = env.get("LLM_MODEL", "").strip()
    fast_model = env.get("FAST_LLM_MODEL", "").strip() or main_model
    return main if fast_model == main_model else None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        items = errors()
        if items:
            return str(items[0].get("msg", exc)).removeprefix("Value error, ")
    return str(exc)
