"""The chat service's configuration, read once from the environment.

Every setting has an environment variable so that ``ctxstack serve --workers N`` can hand
the same configuration to each worker process (uvicorn starts them from an import string;
the parent writes the resolved options back into the environment first, :meth:`to_env`).

:class:`Settings` is a pydantic-settings class (:mod:`ctxstack.configuration`): the
storage's variables (:class:`~ctxstack.store.settings.StorageSettings`, which it extends)
plus the service's own; the model endpoints, timeouts and tokenizers come from the LLM
roles' settings (:mod:`ctxstack.llm.config`). ``docs/configuration.md`` lists every
variable with its default; when no ``LLM_BASE_URL`` is set the offline demo model answers.

The fast role uses ``LLM_TOKENIZER`` only when its model is the main one
(:func:`ctxstack.llm.config.tokenizer_path`); an admin model config's ``tokenizer_path``
replaces either for its role.

Budget variables (``LLM_CONTEXT_SIZE`` …) are read by :func:`ctxstack.budget.resolve_budget`
at each turn, after the database's model configs; when the offline demo model answers, the
numbers nobody set come from its declared 8,000-token window with 4,000 kept for the answer
(:func:`ctxstack.server.demo_model.demo_budget`) instead of the library defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field
from pydantic_settings import NoDecode

from ctxstack._net import is_loopback as is_loopback
from ctxstack._net import parse_hosts
from ctxstack.configuration import lowercase
from ctxstack.llm.config import FastLLMSettings, LLMSettings, tokenizer_path
from ctxstack.store.settings import DEFAULT_DB_POOL_SIZE, StorageSettings

AuthMode = Literal["token", "none"]

BUDGET_ENV_VARS = (
    "LLM_CONTEXT_SIZE",
    "LLM_MAX_OUTPUT_TOKENS",
    "FAST_LLM_CONTEXT_SIZE",
    "FAST_LLM_MAX_OUTPUT_TOKENS",
)
DEFAULT_MAX_UPLOAD_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

__all__ = ["BUDGET_ENV_VARS", "DEFAULT_DB_POOL_SIZE", "DEFAULT_MAX_BODY_BYTES",
           "DEFAULT_MAX_UPLOAD_BYTES", "AuthMode", "Settings", "is_loopback"]


def _names(value: Any) -> Any:
    if isinstance(value, str):
        return frozenset(n.strip() for n in value.split(",") if n.strip())
    return value


def _hosts(value: Any) -> Any:
    return parse_hosts(value) if isinstance(value, str) else value


class Settings(StorageSettings):
    """Resolved service settings. Build with :meth:`from_env` or directly in tests."""

    component: ClassVar[str] = "Chat service (ctxstack serve)"

    auth: Annotated[AuthMode, BeforeValidator(lowercase)] = Field(
        "token", validation_alias="CTXSTACK_AUTH")
    """``token`` (bearer API tokens) or ``none``; ``ctxstack serve`` picks ``none`` on a
    loopback address unless told otherwise."""
    local_user: str = Field("local", validation_alias="CTXSTACK_LOCAL_USER")
    """The single user's name under ``none``."""
    admin_users: Annotated[frozenset[str], NoDecode, BeforeValidator(_names)] = Field(
        frozenset(), validation_alias="CTXSTACK_ADMIN_USERS")
    """Comma-separated user names allowed to change model configs (the local user always
    may)."""
    redis_url: str | None = Field(None, validation_alias="CTXSTACK_REDIS_URL")
    """Redis for the inject queue (unset: the database)."""
    max_upload_bytes: int = Field(DEFAULT_MAX_UPLOAD_BYTES, gt=0,
                                  validation_alias="CTXSTACK_MAX_UPLOAD_BYTES")
    """Largest accepted image, in bytes."""
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0,
                                validation_alias="CTXSTACK_MAX_BODY_BYTES")
    """Largest request body of any other route (413 beyond; an upload may be this much
    larger than its image)."""
    allowed_hosts: Annotated[frozenset[str], NoDecode, BeforeValidator(_hosts)] = Field(
        frozenset(), validation_alias="CTXSTACK_ALLOWED_HOSTS")
    """Comma-separated host names accepted in ``Host`` / ``Origin`` besides loopback ones
    under ``--no-auth``."""
    auth_failure_limit: int = Field(20, gt=0, validation_alias="CTXSTACK_AUTH_FAILURES")
    """Failed authentications an address may make per window before it is answered 429."""
    auth_failure_window: float = Field(60.0, gt=0, validation_alias="CTXSTACK_AUTH_WINDOW")
    """That window, in seconds (counted in Redis when ``CTXSTACK_REDIS_URL`` is set)."""
    keepalive_seconds: float = Field(15.0, gt=0, validation_alias="CTXSTACK_SSE_KEEPALIVE")
    """Seconds between keep-alive comments on a chat turn's event stream."""
    demo_delay: float = Field(0.05, ge=0, validation_alias="CTXSTACK_DEMO_DELAY")
    """Seconds the offline demo model waits per call."""
    demo_chunk_delay: float = Field(0.01, ge=0, validation_alias="CTXSTACK_DEMO_CHUNK_DELAY")
    """Seconds between the demo model's streamed deltas."""
    max_iterations: int = Field(12, gt=0, validation_alias="CTXSTACK_MAX_ITERATIONS")
    """ReAct iteration cap per turn."""
    calibrate: bool = Field(True, validation_alias="CTXSTACK_CALIBRATE")
    """Learn a per-role token-count correction from the usage the model reports (``0`` /
    ``false`` turns it off)."""
    turn_lease: float = Field(5.0, gt=0, le=3600, validation_alias="CTXSTACK_TURN_LEASE")
    """Seconds a turn's claim lives without a heartbeat (a crashed holder blocks its
    conversation at most this long)."""
    redis_timeout: float = Field(2.0, gt=0, le=3600, validation_alias="CTXSTACK_REDIS_TIMEOUT")
    """Seconds for a Redis connect or command."""
    stream_resume_grace: float = Field(15.0, ge=0, le=3600,
                                       validation_alias="CTXSTACK_STREAM_RESUME_GRACE")
    """Seconds a turn keeps running with nobody reading its stream, so a reload or a
    dropped connection can resume it (:mod:`ctxstack.server.streams`); ``0`` stops it as
    soon as its reader disconnects."""
    stream_retention: float = Field(3600.0, gt=0, le=30 * 86_400,
                                    validation_alias="CTXSTACK_STREAM_RETENTION")
    """Seconds a finished turn's recorded SSE events are kept for resuming (Redis streams
    with ``CTXSTACK_REDIS_URL``, else the ``turn_streams`` tables)."""
    # From the LLM roles' settings (ctxstack.llm.config), filled by from_env:
    llm_timeout: float = Field(60.0, gt=0, le=86_400)
    fast_llm_timeout: float | None = Field(None, gt=0, le=86_400)
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_tokenizer: str | None = None
    fast_llm_tokenizer: str | None = None
    budget_env: dict[str, str] = Field(default_factory=dict)

    @property
    def fast_timeout(self) -> float:
        """Seconds one fast-model call may take (``FAST_LLM_TIMEOUT``, else ``LLM_TIMEOUT``)."""
        return self.fast_llm_timeout if self.fast_llm_timeout is not None else self.llm_timeout

    @property
    def demo_model(self) -> bool:
        """True when no LLM endpoint is configured and the offline demo model answers."""
        return not self.llm_base_url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **values: Any) -> Self:
        """Read the settings from ``env`` (default ``os.environ``).

        Raises:
            ConfigError: a variable has a value of the wrong kind; the message names it.
        """
        env = os.environ if env is None else env
        main = LLMSettings.from_env(env)
        fast = FastLLMSettings.from_env(env)
        derived: dict[str, Any] = {
            "llm_timeout": main.timeout,
            "fast_llm_timeout": fast.timeout,
            "llm_base_url": main.base_url,
            "llm_model": main.model,
            "llm_tokenizer": tokenizer_path("main", env),
            "fast_llm_tokenizer": tokenizer_path("fast", env),
            "budget_env": {k: env[k] for k in BUDGET_ENV_VARS if k in env},
        }
        return super().from_env(env, **{**derived, **values})

    def to_env(self) -> dict[str, str]:
        """The variables that reproduce these settings in a worker process."""
        out: dict[str, str] = {
            "CTXSTACK_AUTH": self.auth,
            "CTXSTACK_LOCAL_USER": self.local_user,
            "CTXSTACK_MAX_UPLOAD_BYTES": str(self.max_upload_bytes),
            "CTXSTACK_MAX_BODY_BYTES": str(self.max_body_bytes),
            "CTXSTACK_AUTH_FAILURES": str(self.auth_failure_limit),
            "CTXSTACK_AUTH_WINDOW": str(self.auth_failure_window),
            "CTXSTACK_SSE_KEEPALIVE": str(self.keepalive_seconds),
            "CTXSTACK_DEMO_DELAY": str(self.demo_delay),
            "CTXSTACK_DEMO_CHUNK_DELAY": str(self.demo_chunk_delay),
            "CTXSTACK_MAX_ITERATIONS": str(self.max_iterations),
            "CTXSTACK_CALIBRATE": "1" if self.calibrate else "0",
            "CTXSTACK_TURN_LEASE": str(self.turn_lease),
            "CTXSTACK_STREAM_RESUME_GRACE": str(self.stream_resume_grace),
            "CTXSTACK_STREAM_RETENTION": str(self.stream_retention),
            "CTXSTACK_DB_CONNECT_TIMEOUT": str(self.db_connect_timeout),
            "CTXSTACK_DB_STATEMENT_TIMEOUT": str(self.db_statement_timeout),
            "CTXSTACK_DB_POOL_SIZE": str(self.db_pool_size),
            "CTXSTACK_REDIS_TIMEOUT": str(self.redis_timeout),
            "LLM_TIMEOUT": str(self.llm_timeout),
        }
        optional = {
            "CTXSTACK_DATABASE_URL": self.database_url,
            "CTXSTACK_DATABASE_SCHEMA": self.database_schema,
            "CTXSTACK_FILES_DIR": str(self.files_dir) if self.files_dir else None,
            "CTXSTACK_REDIS_URL": self.redis_url,
            "CTXSTACK_ADMIN_USERS": ",".join(sorted(self.admin_users)) or None,
            "CTXSTACK_ALLOWED_HOSTS": ",".join(sorted(self.allowed_hosts)) or None,
            "FAST_LLM_TIMEOUT": str(self.fast_llm_timeout) if self.fast_llm_timeout else None,
        }
        out.update({k: v for k, v in optional.items() if v})
        return out

    def is_admin(self, user_name: str) -> bool:
        """Whether this user may change model configs."""
        return (self.auth == "none" and user_name == self.local_user) or (
            user_name in self.admin_users
        )
