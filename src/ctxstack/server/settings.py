"""The chat service's configuration, read once from the environment.

Every setting has an environment variable so that ``ctxstack serve --workers N`` can hand
the same configuration to each worker process (uvicorn starts them from an import string;
the parent writes the resolved options back into the environment first).

===============================  =============================================  ==========
variable                         meaning                                        default
===============================  =============================================  ==========
``CTXSTACK_DATABASE_URL``        SQLAlchemy URL (SQLite file or PostgreSQL)     data dir
``CTXSTACK_DATABASE_SCHEMA``     PostgreSQL schema to use (tests, shared DBs)   none
``CTXSTACK_FILES_DIR``           where uploaded images are kept                 data dir
``CTXSTACK_AUTH``                ``token`` (bearer API tokens) or ``none``      ``token``
``CTXSTACK_LOCAL_USER``          the single user's name under ``none``          ``local``
``CTXSTACK_ADMIN_USERS``         comma-separated user names allowed to change   empty
                                 model configs (the local user always may)
``CTXSTACK_REDIS_URL``           Redis for the inject queue and the recorded    none
                                 turn streams (else the DB)
``CTXSTACK_MAX_UPLOAD_BYTES``    largest accepted image                         10 MiB
``CTXSTACK_SSE_KEEPALIVE``       seconds between keep-alive comments            15
``CTXSTACK_DEMO_DELAY``          seconds the demo model waits per call          0.05
``CTXSTACK_DEMO_CHUNK_DELAY``    seconds between the demo model's streamed      0.01
                                 deltas
``CTXSTACK_MAX_ITERATIONS``      ReAct iteration cap per turn                   12
``CTXSTACK_CALIBRATE``           learn a per-role token-count correction from   on
                                 the usage the model reports (``0``/``false``
                                 turns it off)
``CTXSTACK_TURN_LEASE``          seconds a turn's claim lives without a         5
                                 heartbeat (a crashed holder blocks its
                                 conversation at most this long)
``CTXSTACK_STREAM_RESUME_GRACE``  seconds a turn keeps running with nobody    15
                                 reading its stream (a reload resumes it; ``0``
                                 stops it when its reader disconnects)
``CTXSTACK_STREAM_RETENTION``    seconds a finished turn's recorded SSE events  3600
                                 are kept for resuming (Redis streams with
                                 Redis, else the ``turn_streams`` tables)
``CTXSTACK_DB_CONNECT_TIMEOUT``  seconds to open a database connection          5
``CTXSTACK_DB_STATEMENT_TIMEOUT``  seconds one database statement (or the wait  15
                                 for a pooled connection, or SQLite's lock) may
                                 take
``CTXSTACK_DB_POOL_SIZE``        database connections a worker keeps open       20
``CTXSTACK_REDIS_TIMEOUT``       seconds for a Redis connect or command         2
``LLM_TIMEOUT``                  seconds one main-model call may take, retries  60
                                 included
``FAST_LLM_TIMEOUT``             the same for the fast model                    LLM_TIMEOUT
``LLM_TOKENIZER``                path of the main model's ``tokenizer.json``     none
                                 (exact counts; a missing file: heuristic)
``FAST_LLM_TOKENIZER``           the same for the fast model                    see below
``LLM_BASE_URL`` …               the model endpoint (see ctxstack.llm.openai);
                                 when unset the offline demo model answers
===============================  =============================================  ==========

The fast role uses ``LLM_TOKENIZER`` only when its model is the main one
(:func:`ctxstack.llm.config.tokenizer_path`); an admin model config's ``tokenizer_path``
replaces either for its role.

Budget variables (``LLM_CONTEXT_SIZE`` …) are read by :func:`ctxstack.budget.resolve_budget`
at each turn, after the database's model configs; when the offline demo model answers, the
numbers nobody set come from its declared 8,000-token window with 4,000 kept for the answer
(:func:`ctxstack.server.demo_model.demo_budget`) instead of the library defaults.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ctxstack.errors import ConfigError
from ctxstack.llm.config import tokenizer_path

AuthMode = Literal["token", "none"]

BUDGET_ENV_VARS = (
    "LLM_CONTEXT_SIZE",
    "LLM_MAX_OUTPUT_TOKENS",
    "FAST_LLM_CONTEXT_SIZE",
    "FAST_LLM_MAX_OUTPUT_TOKENS",
)
DEFAULT_MAX_UPLOAD_BYTES = 10 * 1024 * 1024
DEFAULT_DB_POOL_SIZE = 20
"""Database connections a worker keeps open (``CTXSTACK_DB_POOL_SIZE``). SQLAlchemy's
default of 5 is below what one worker's concurrent turns check out at once: every
checkout beyond the kept ones opened a new connection and closed it on return — on
PostgreSQL a new server process and a handshake per query burst, which was most of the
worker's CPU per turn and its event-loop lag under load (issue 15). 10 more may be opened
for a burst beyond it (SQLAlchemy's ``max_overflow``)."""


class Settings(BaseModel):
    """Resolved service settings. Build with :meth:`from_env` or directly in tests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str | None = None
    database_schema: str | None = None
    files_dir: Path | None = None
    auth: AuthMode = "token"
    local_user: str = "local"
    admin_users: frozenset[str] = frozenset()
    redis_url: str | None = None
    max_upload_bytes: int = Field(DEFAULT_MAX_UPLOAD_BYTES, gt=0)
    keepalive_seconds: float = Field(15.0, gt=0)
    demo_delay: float = Field(0.05, ge=0)
    demo_chunk_delay: float = Field(0.01, ge=0)
    max_iterations: int = Field(12, gt=0)
    calibrate: bool = True
    turn_lease: float = Field(5.0, gt=0, le=3600)
    # Resumable streams (ctxstack.server.streams): how long a turn keeps running with
    # nobody reading it, and how long a finished turn's recorded events are kept.
    stream_resume_grace: float = Field(15.0, ge=0, le=3600)
    stream_retention: float = Field(3600.0, gt=0, le=30 * 86_400)
    db_connect_timeout: float = Field(5.0, gt=0, le=3600)
    db_statement_timeout: float = Field(15.0, gt=0, le=86_400)
    db_pool_size: int = Field(DEFAULT_DB_POOL_SIZE, gt=0, le=1000)
    redis_timeout: float = Field(2.0, gt=0, le=3600)
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
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``env`` (default ``os.environ``).

        Raises:
            ConfigError: a variable has a value of the wrong kind; the message names it.
        """
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        raw: dict[str, object] = {
            "database_url": get("CTXSTACK_DATABASE_URL"),
            "database_schema": get("CTXSTACK_DATABASE_SCHEMA"),
            "files_dir": get("CTXSTACK_FILES_DIR"),
            "redis_url": get("CTXSTACK_REDIS_URL"),
            "llm_base_url": get("LLM_BASE_URL"),
            "llm_model": get("LLM_MODEL"),
            "llm_tokenizer": tokenizer_path("main", env),
            "fast_llm_tokenizer": tokenizer_path("fast", env),
            "budget_env": {k: env[k] for k in BUDGET_ENV_VARS if k in env},
        }
        names = {
            "auth": "CTXSTACK_AUTH",
            "local_user": "CTXSTACK_LOCAL_USER",
            "max_upload_bytes": "CTXSTACK_MAX_UPLOAD_BYTES",
            "keepalive_seconds": "CTXSTACK_SSE_KEEPALIVE",
            "demo_delay": "CTXSTACK_DEMO_DELAY",
            "demo_chunk_delay": "CTXSTACK_DEMO_CHUNK_DELAY",
            "max_iterations": "CTXSTACK_MAX_ITERATIONS",
            "calibrate": "CTXSTACK_CALIBRATE",
            "turn_lease": "CTXSTACK_TURN_LEASE",
            "stream_resume_grace": "CTXSTACK_STREAM_RESUME_GRACE",
            "stream_retention": "CTXSTACK_STREAM_RETENTION",
            "db_connect_timeout": "CTXSTACK_DB_CONNECT_TIMEOUT",
            "db_statement_timeout": "CTXSTACK_DB_STATEMENT_TIMEOUT",
            "db_pool_size": "CTXSTACK_DB_POOL_SIZE",
            "redis_timeout": "CTXSTACK_REDIS_TIMEOUT",
            "llm_timeout": "LLM_TIMEOUT",
            "fast_llm_timeout": "FAST_LLM_TIMEOUT",
        }
        for field, var in names.items():
            value = get(var)
            if value is not None:
                raw[field] = value
        admins = get("CTXSTACK_ADMIN_USERS")
        if admins:
            raw["admin_users"] = frozenset(n.strip() for n in admins.split(",") if n.strip())
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else ""
            var = names.get(field, field)
            raise ConfigError(f"{var}: {err['msg']} (got {err.get('input')!r})") from None

    def to_env(self) -> dict[str, str]:
        """The variables that reproduce these settings in a worker process."""
        out: dict[str, str] = {
            "CTXSTACK_AUTH": self.auth,
            "CTXSTACK_LOCAL_USER": self.local_user,
            "CTXSTACK_MAX_UPLOAD_BYTES": str(self.max_upload_bytes),
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
            "FAST_LLM_TIMEOUT": str(self.fast_llm_timeout) if self.fast_llm_timeout else None,
        }
        out.update({k: v for k, v in optional.items() if v})
        return out

    def is_admin(self, user_name: str) -> bool:
        """Whether this user may change model configs."""
        return (self.auth == "none" and user_name == self.local_user) or (
            user_name in self.admin_users
        )


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (where ``--no-auth`` is the default).

    Decided by parsing, never by prefix: a literal loopback address (``127.0.0.0/8``,
    ``::1``, also in brackets) or the name ``localhost``. Any other host name — even
    ``127.evil.example.com`` — is not loopback, so it needs API tokens.
    """
    text = host.strip()
    if text.lower() == "localhost":
        return True
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))
