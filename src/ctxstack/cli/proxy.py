"""``ctxstack proxy``: context management in front of any OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import os

import click

from ctxstack.cli.app import listen_options, main, needs_extra
from ctxstack.errors import CtxstackError


@main.command()
@click.option("--upstream", envvar="CTXSTACK_PROXY_UPSTREAM", required=True,
              help="The upstream's OpenAI base URL, /v1 included "
                   "(env CTXSTACK_PROXY_UPSTREAM).")
@click.option("--anthropic-upstream", envvar="CTXSTACK_PROXY_ANTHROPIC_UPSTREAM", default=None,
              help="Where POST /v1/messages goes: the proxy calls <URL>/v1/messages "
                   "[default: https://api.anthropic.com, env "
                   "CTXSTACK_PROXY_ANTHROPIC_UPSTREAM].")
@listen_options(port=8787, workers="they share checkpoints through the database")
@click.option("--auth/--no-auth", "auth", default=None,
              help="Require `ctxstack user create` tokens (the default, and mandatory, on "
                   "any address that is not loopback).")
@click.option("--forward-auth", is_flag=True, default=False,
              help="Send the client's own Authorization header upstream instead of "
                   "LLM_API_KEY (proxy tokens then go in x-ctxstack-api-key).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds to wait for upstream bytes before answering 504 "
                   "[default: 600, env CTXSTACK_PROXY_TIMEOUT].")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def proxy(upstream: str, anthropic_upstream: str | None, host: str, port: int, workers: int,
          auth: bool | None, forward_auth: bool, timeout: float | None, log_level: str) -> None:
    """Run an OpenAI-compatible proxy that keeps every chat within its model's budget.

    \b
    Point any client's base URL at http://HOST:PORT/v1 (Anthropic clients, Claude Code:
    ANTHROPIC_BASE_URL=http://HOST:PORT). Environment:
      LLM_API_KEY             the upstream key (never accepted from clients)
      FAST_LLM_BASE_URL, FAST_LLM_API_KEY, FAST_LLM_MODEL   the summariser
                              (default: the upstream, with each request's model)
      LLM_CONTEXT_SIZE, LLM_MAX_OUTPUT_TOKENS   budgets (database model configs win)
      CTXSTACK_DATABASE_URL   checkpoints and tokens (SQLite file by default)
    One JSON log line per request (logger ctxstack.proxy).
    """
    with needs_extra("server", "proxy"):
        import uvicorn

        from ctxstack.proxy.settings import ProxySettings
        from ctxstack.store.migrate import upgrade

    env = dict(os.environ)
    env["CTXSTACK_PROXY_UPSTREAM"] = upstream
    if anthropic_upstream:
        env["CTXSTACK_PROXY_ANTHROPIC_UPSTREAM"] = anthropic_upstream
    env["CTXSTACK_PROXY_HOST"] = host
    if auth is not None:
        env["CTXSTACK_PROXY_AUTH"] = "token" if auth else "none"
    if forward_auth:
        env["CTXSTACK_PROXY_FORWARD_AUTH"] = "1"
    if timeout is not None:
        env["CTXSTACK_PROXY_TIMEOUT"] = repr(timeout)
    try:
        settings = ProxySettings.from_env(env)
        asyncio.run(upgrade(settings.database_url, schema=settings.database_schema))
    except CtxstackError as exc:
        raise click.ClickException(str(exc)) from exc
    os.environ.update(settings.to_env())
    os.environ["CTXSTACK_PROXY_LOG_LEVEL"] = log_level
    auth_text = "API tokens" if settings.auth == "token" else "none (loopback only)"
    click.echo(f"ctxstack proxy on http://{host}:{port}/v1  auth: {auth_text}  "
               f"stats: http://{host}:{port}/ctxstack/stats")
    # No uvicorn access log: the proxy writes its own JSON line per request (logger
    # ctxstack.proxy), and a second line per request is work on the hot path.
    # A worker answers uvicorn's health checks only once its imports are done; on a busy
    # machine that takes longer than the 5 s default, and the worker would be killed as
    # hung and restarted forever.
    uvicorn.run("ctxstack.proxy.app:app_from_env", factory=True, host=host, port=port,
                workers=workers, log_level=log_level, timeout_graceful_shutdown=10,
                timeout_worker_healthcheck=60, access_log=False)
