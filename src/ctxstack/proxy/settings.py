"""The proxy's settings, read once from the environment (the CLI writes its flags there).

* ``CTXSTACK_PROXY_UPSTREAM`` — the upstream's OpenAI base URL, ``/v1`` included (required);
* ``CTXSTACK_PROXY_ANTHROPIC_UPSTREAM`` — where ``/v1/messages`` goes: the proxy calls
  ``<url>/v1/messages`` (``https://api.anthropic.com``);
* ``CTXSTACK_PROXY_HOST`` — the address bound (decides the auth default; 127.0.0.1);
* ``CTXSTACK_PROXY_AUTH`` — ``none`` or ``token`` (``ctxstack user create`` tokens):
  ``none`` by default on loopback, ``token`` elsewhere, where ``none`` is refused;
* ``CTXSTACK_PROXY_FORWARD_AUTH`` — ``1``: send the client's ``Authorization`` upstream;
* ``CTXSTACK_PROXY_TIMEOUT`` — seconds to wait for upstream bytes, then 504 (600);
* ``CTXSTACK_PROXY_CHECKPOINTS`` / ``_CHECKPOINT_TTL`` — at most this many checkpoints
  (10,000), each living this many seconds after its last use (7 days);
* ``CTXSTACK_PROXY_STATS_FLUSH`` — seconds between two writes of a worker's counts to the
  database, where ``/ctxstack/stats`` sums every worker's (1);
* ``LLM_API_KEY`` — the upstream key, never accepted from nor shown to a client;
* ``FAST_LLM_BASE_URL`` / ``_API_KEY`` / ``_MODEL`` — the summariser; unset → the
  upstream itself with the request's model; ``FAST_LLM_TIMEOUT`` bounds a summary (60 s,
  then truncation);
* ``LLM_MODEL`` + ``LLM_TOKENIZER`` — a ``tokenizer.json`` for exact counts of requests
  naming exactly that model (other models: tiktoken by name, else the heuristic);
* ``CTXSTACK_DATABASE_URL`` / ``_SCHEMA`` — checkpoints, model configs, tokens (SQLite).

Budgets per model come from the database's model configs, then ``LLM_CONTEXT_SIZE`` /
``LLM_MAX_OUTPUT_TOKENS``, then the defaults (:mod:`ctxstack.proxy.budgets`).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ctxstack.errors import ConfigError

AuthMode = Literal["none", "token"]
DEFAULT_PORT = 8787
DEFAULT_TIMEOUT = 600.0
DEFAULT_SUMMARY_TIMEOUT = 60.0
DEFAULT_MAX_CHECKPOINTS = 10_000
DEFAULT_CHECKPOINT_TTL = 7 * 24 * 3600.0
DEFAULT_ANTHROPIC_UPSTREAM = "https://api.anthropic.com"


def is_loopback(host: str) -> bool:
    """True only for addresses no other machine can reach.

    Parsed with :mod:`ipaddress` (``127.0.0.0/8``, ``::1``, ``[::1]``); a hostname is not
    loopback — it may resolve anywhere — except the literal ``localhost``. ``0.0.0.0``
    (every interface) is not loopback.
    """
    text = host.strip()
    if text.lower() == "localhost":
        return True
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


class ProxySettings(BaseModel):
    """Everything the proxy app needs; the upstream key is never in ``repr``."""

    model_config = ConfigDict(frozen=True)

    upstream: str
    anthropic_upstream: str = DEFAULT_ANTHROPIC_UPSTREAM
    """The Anthropic Messages upstream, without ``/v1`` (the proxy appends it)."""
    host: str = "127.0.0.1"
    auth: AuthMode = "none"
    forward_auth: bool = False
    upstream_api_key: str | None = Field(default=None, repr=False)
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    connect_timeout: float = Field(default=10.0, gt=0)
    summary_timeout: float = Field(default=DEFAULT_SUMMARY_TIMEOUT, gt=0)
    summarizer_base_url: str | None = None
    summarizer_api_key: str | None = Field(default=None, repr=False)
    summarizer_model: str | None = None
    database_url: str | None = None
    database_schema: str | None = None
    max_checkpoints: int = Field(default=DEFAULT_MAX_CHECKPOINTS, ge=1)
    checkpoint_ttl: float = Field(default=DEFAULT_CHECKPOINT_TTL, gt=0)
    stats_flush_interval: float = Field(default=1.0, gt=0)
    overflow_retry_fill: float = Field(default=0.5, gt=0, lt=1)
    """On an upstream overflow error, compact to this share of what was sent, retry once."""
    tokenizer_model: str | None = None
    """The model name ``tokenizer_path`` counts for (``LLM_MODEL``)."""
    tokenizer_path: str | None = None
    """A ``tokenizer.json`` (``LLM_TOKENIZER``) for requests naming ``tokenizer_model``."""
    budget_env: dict[str, str] = Field(default_factory=dict, repr=False)
    """The budget variables (``LLM_CONTEXT_SIZE``, …) as read at start."""

    @field_validator("upstream", "summarizer_base_url", "anthropic_upstream")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = v.strip().rstrip("/")
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8001/v1, "
                             f"got {v!r}")
        return v

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ProxySettings:
        """Read the settings (see the module table).

        Raises:
            ConfigError: the upstream is missing, or a value is malformed (named).
        """
        env = os.environ if env is None else env
        upstream = env.get("CTXSTACK_PROXY_UPSTREAM", "").strip()
        if not upstream:
            raise ConfigError("the upstream is not set: pass --upstream URL or set "
                              "CTXSTACK_PROXY_UPSTREAM (an OpenAI base URL ending in /v1)")
        host = env.get("CTXSTACK_PROXY_HOST", "127.0.0.1").strip() or "127.0.0.1"
        auth = env.get("CTXSTACK_PROXY_AUTH", "").strip().lower() or (
            "none" if is_loopback(host) else "token")
        if auth not in ("none", "token"):
            raise ConfigError(f"CTXSTACK_PROXY_AUTH: expected 'none' or 'token', got {auth!r}")
        if auth == "none" and not is_loopback(host):
            raise ConfigError(
                f"the proxy is bound to {host!r}, which is not a loopback address: API tokens "
                "are required there (CTXSTACK_PROXY_AUTH=token; create them with "
                "ctxstack user create NAME)")
        fast_model = _get(env, "FAST_LLM_MODEL")
        fast_url = _get(env, "FAST_LLM_BASE_URL")
        values: dict[str, object] = {
            "upstream": upstream,
            "anthropic_upstream": _get(env, "CTXSTACK_PROXY_ANTHROPIC_UPSTREAM")
            or DEFAULT_ANTHROPIC_UPSTREAM,
            "host": host,
            "auth": auth,
            "forward_auth": env.get("CTXSTACK_PROXY_FORWARD_AUTH", "").strip().lower()
            in ("1", "true", "yes", "on"),
            "upstream_api_key": _get(env, "LLM_API_KEY"),
            "summarizer_base_url": fast_url,
            "summarizer_api_key": _get(env, "FAST_LLM_API_KEY") or _get(env, "LLM_API_KEY"),
            "summarizer_model": fast_model,
            "tokenizer_model": _get(env, "LLM_MODEL"),
            "tokenizer_path": _get(env, "LLM_TOKENIZER"),
            "database_url": _get(env, "CTXSTACK_DATABASE_URL"),
            "database_schema": _get(env, "CTXSTACK_DATABASE_SCHEMA"),
            "budget_env": {k: v for k, v in env.items() if k in (
                "LLM_CONTEXT_SIZE", "LLM_MAX_OUTPUT_TOKENS", "FAST_LLM_CONTEXT_SIZE",
                "FAST_LLM_MAX_OUTPUT_TOKENS")},
        }
        for field, var in (("timeout", "CTXSTACK_PROXY_TIMEOUT"),
                           ("summary_timeout", "FAST_LLM_TIMEOUT"),
                           ("max_checkpoints", "CTXSTACK_PROXY_CHECKPOINTS"),
                           ("checkpoint_ttl", "CTXSTACK_PROXY_CHECKPOINT_TTL"),
                           ("stats_flush_interval", "CTXSTACK_PROXY_STATS_FLUSH")):
            raw = _get(env, var)
            if raw is not None:
                try:
                    values[field] = float(raw) if field != "max_checkpoints" else int(raw)
                except ValueError:
                    raise ConfigError(f"{var}: expected a number, got {raw!r}") from None
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ConfigError(f"proxy setting {where}: {err['msg']}") from None

    def to_env(self) -> dict[str, str]:
        """The ``CTXSTACK_PROXY_*`` variables that recreate these settings in a worker."""
        return {
            "CTXSTACK_PROXY_UPSTREAM": self.upstream,
            "CTXSTACK_PROXY_ANTHROPIC_UPSTREAM": self.anthropic_upstream,
            "CTXSTACK_PROXY_HOST": self.host,
            "CTXSTACK_PROXY_AUTH": self.auth,
            "CTXSTACK_PROXY_FORWARD_AUTH": "1" if self.forward_auth else "0",
            "CTXSTACK_PROXY_TIMEOUT": repr(self.timeout),
        }

    @property
    def summarizer_configured(self) -> bool:
        """True when ``FAST_LLM_*`` names a summariser other than the upstream itself."""
        return self.summarizer_base_url is not None or self.summarizer_model is not None


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None
