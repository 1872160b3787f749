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
* ``CTXSTACK_DATABASE_URL`` / ``_SCHEMA`` — checkpoints, sessions, model configs, tokens
  (SQLite);
* ``CTXSTACK_PROXY_ALLOWED_HOSTS`` — comma-separated host names accepted in ``Host`` and
  ``Origin`` besides loopback ones when no tokens are required (none);
* ``CTXSTACK_PROXY_MAX_BODY_BYTES`` — the largest request body, else 413 (64 MiB);
* ``CTXSTACK_PROXY_AUTH_FAILURES`` / ``_AUTH_WINDOW`` — failed authentications an address
  may make per window of that many seconds before it is answered 429 (20 per 60 s),
  counted in ``CTXSTACK_PROXY_REDIS_URL`` when set (every worker together), else per
  worker. ``CTXSTACK_PROXY_REDIS_URL`` also holds the lease that lets one worker at a time
  recompute a session's view (else the session's database row holds it).

Budgets per model come from the database's model configs, then ``LLM_CONTEXT_SIZE`` /
``LLM_MAX_OUTPUT_TOKENS``, then the defaults (:mod:`ctxstack.proxy.budgets`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AliasChoices, BeforeValidator, Field, field_validator
from pydantic_settings import NoDecode

from ctxstack._net import is_loopback as is_loopback
from ctxstack._net import parse_hosts
from ctxstack.configuration import EnvSettings, lowercase
from ctxstack.errors import ConfigError

AuthMode = Literal["none", "token"]
DEFAULT_PORT = 8787
DEFAULT_TIMEOUT = 600.0
DEFAULT_SUMMARY_TIMEOUT = 60.0
DEFAULT_MAX_CHECKPOINTS = 10_000
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_CHECKPOINT_TTL = 7 * 24 * 3600.0
DEFAULT_ANTHROPIC_UPSTREAM = "https://api.anthropic.com"




def _hosts(value: Any) -> Any:
    return parse_hosts(value) if isinstance(value, str) else value


class ProxySettings(EnvSettings):
    """Everything the proxy app needs; the upstream key is never in ``repr``."""

    component: ClassVar[str] = "Context proxy (ctxstack proxy)"

    upstream: str = Field(validation_alias="CTXSTACK_PROXY_UPSTREAM")
    """The upstream's OpenAI base URL, ``/v1`` included (required)."""
    anthropic_upstream: str = Field(DEFAULT_ANTHROPIC_UPSTREAM,
                                    validation_alias="CTXSTACK_PROXY_ANTHROPIC_UPSTREAM")
    """The Anthropic Messages upstream, without ``/v1`` (the proxy appends it)."""
    host: str = Field("127.0.0.1", validation_alias="CTXSTACK_PROXY_HOST")
    """The address bound (decides the auth default)."""
    auth: Annotated[AuthMode, BeforeValidator(lowercase)] = Field(
        "none", validation_alias="CTXSTACK_PROXY_AUTH")
    """``none`` or ``token`` (``ctxstack user create`` tokens); unset: ``none`` on a
    loopback host, ``token`` elsewhere, where ``none`` is refused."""
    forward_auth: bool = Field(False, validation_alias="CTXSTACK_PROXY_FORWARD_AUTH")
    """``1``: send the client's ``Authorization`` upstream."""
    upstream_api_key: str | None = Field(default=None, repr=False,
                                         validation_alias="LLM_API_KEY")
    """The upstream key, never accepted from nor shown to a client."""
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0,
                           validation_alias="CTXSTACK_PROXY_TIMEOUT")
    """Seconds to wait for upstream bytes, then 504."""
    connect_timeout: float = Field(default=10.0, gt=0)
    summary_timeout: float = Field(default=DEFAULT_SUMMARY_TIMEOUT, gt=0,
                                   validation_alias="FAST_LLM_TIMEOUT")
    """Seconds one summary may take, then truncation."""
    summarizer_base_url: str | None = Field(None, validation_alias="FAST_LLM_BASE_URL")
    """The summariser's base URL; unset: the upstream itself."""
    summarizer_api_key: str | None = Field(
        default=None, repr=False, validation_alias=AliasChoices("FAST_LLM_API_KEY", "LLM_API_KEY"))
    """The summariser's key."""
    summarizer_model: str | None = Field(None, validation_alias="FAST_LLM_MODEL")
    """The summariser's model; unset: each request's model."""
    database_url: str | None = Field(None, validation_alias="CTXSTACK_DATABASE_URL")
    """Checkpoints, model configs, tokens (unset: the SQLite file in the data directory)."""
    database_schema: str | None = Field(None, validation_alias="CTXSTACK_DATABASE_SCHEMA")
    """PostgreSQL schema to work in."""
    max_checkpoints: int = Field(default=DEFAULT_MAX_CHECKPOINTS, ge=1,
                                 validation_alias="CTXSTACK_PROXY_CHECKPOINTS")
    """At most this many checkpoints are kept."""
    checkpoint_ttl: float = Field(default=DEFAULT_CHECKPOINT_TTL, gt=0,
                                  validation_alias="CTXSTACK_PROXY_CHECKPOINT_TTL")
    """Seconds a checkpoint lives after its last use."""
    stats_flush_interval: float = Field(default=1.0, gt=0,
                                        validation_alias="CTXSTACK_PROXY_STATS_FLUSH")
    """Seconds between two writes of a worker's counts to the database, where
    ``/ctxstack/stats`` sums every worker's."""
    learn_scale: bool = Field(default=True, validation_alias="CTXSTACK_PROXY_LEARN_SCALE")
    """Learn, per model counted by estimate, how many tokens the upstream reports for what
    the proxy estimated, and divide that model's budget by it
    (:mod:`ctxstack.proxy.scales`)."""
    overflow_retry_fill: float = Field(default=0.5, gt=0, lt=1)
    """On an upstream overflow error, compact to this share of what was sent, retry once."""
    tokenizer_model: str | None = Field(None, validation_alias="LLM_MODEL")
    """The model name ``tokenizer_path`` counts for."""
    tokenizer_path: str | None = Field(None, validation_alias="LLM_TOKENIZER")
    """A ``tokenizer.json`` for requests naming exactly ``LLM_MODEL`` (other models:
    tiktoken by name, else the heuristic)."""
    budget_env: dict[str, str] = Field(default_factory=dict, repr=False)
    """The budget variables (``LLM_CONTEXT_SIZE``, …) as read at start."""
    log_level: str | None = Field(None, validation_alias="CTXSTACK_PROXY_LOG_LEVEL")
    """The ``ctxstack.proxy`` logger's level in a worker (``ctxstack proxy --log-level``)."""
    allowed_hosts: Annotated[frozenset[str], NoDecode, BeforeValidator(_hosts)] = Field(
        frozenset(), validation_alias="CTXSTACK_PROXY_ALLOWED_HOSTS")
    """Comma-separated host names accepted besides loopback ones in no-auth mode (DNS
    rebinding guard)."""
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0,
                                validation_alias="CTXSTACK_PROXY_MAX_BODY_BYTES")
    """Largest request body, in bytes (413 beyond)."""
    auth_failure_limit: int = Field(default=20, gt=0,
                                    validation_alias="CTXSTACK_PROXY_AUTH_FAILURES")
    """Failed authentications an address may make per window before it is answered 429."""
    auth_failure_window: float = Field(default=60.0, gt=0,
                                       validation_alias="CTXSTACK_PROXY_AUTH_WINDOW")
    """That window, in seconds."""
    redis_url: str | None = Field(default=None, repr=False,
                                  validation_alias="CTXSTACK_PROXY_REDIS_URL")
    """Redis for the failed-authentication counts shared by the workers (else per worker)."""

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
    def from_env(cls, env: Mapping[str, str] | None = None, **values: Any) -> Self:
        """Read the settings (see the module table).

        Raises:
            ConfigError: the upstream is missing, or a value is malformed (named), or
                ``none`` auth on a host that is not loopback.
        """
        env = os.environ if env is None else env
        if not env.get("CTXSTACK_PROXY_UPSTREAM", "").strip() and "upstream" not in values:
            raise ConfigError("the upstream is not set: pass --upstream URL or set "
                              "CTXSTACK_PROXY_UPSTREAM (an OpenAI base URL ending in /v1)")
        budget = {k: v for k, v in env.items() if k in (
            "LLM_CONTEXT_SIZE", "LLM_MAX_OUTPUT_TOKENS", "FAST_LLM_CONTEXT_SIZE",
            "FAST_LLM_MAX_OUTPUT_TOKENS")}
        settings = super().from_env(env, **{"budget_env": budget, **values})
        if "auth" not in settings.model_fields_set:
            settings = settings.model_copy(
                update={"auth": "none" if is_loopback(settings.host) else "token"})
        if settings.auth == "none" and not is_loopback(settings.host):
            raise ConfigError(
                f"the proxy is bound to {settings.host!r}, which is not a loopback address: "
                "API tokens are required there (CTXSTACK_PROXY_AUTH=token; create them with "
                "ctxstack user create NAME)")
        return settings

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

