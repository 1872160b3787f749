"""``ctxstack serve``: the chat service and its web page."""

from __future__ import annotations

import asyncio
import logging
import os

import click

from ctxstack.cli.app import listen_options, main, needs_extra
from ctxstack.errors import CtxstackError

WORKER_HEALTHCHECK_SECONDS = 60
"""Seconds a `--workers N` worker may take to answer uvicorn's first health check."""

log = logging.getLogger(__name__)


@main.command()
@listen_options(port=8765, workers="they share the database, and Redis if configured")
@click.option("--no-auth/--auth", "no_auth", default=None,
              help="--no-auth: one local user, no tokens (the default only on a loopback "
                   "address); --auth: require API tokens (the default elsewhere).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def serve(host: str, port: int, workers: int, no_auth: bool | None, log_level: str) -> None:
    """Run the chat service (web page at /, API at /api, OpenAPI at /docs).

    \b
    Configuration comes from the environment:
      CTXSTACK_DATABASE_URL   SQLite file by default; postgresql+asyncpg://... for production
      CTXSTACK_REDIS_URL      optional: the inject queue in Redis instead of the database
      LLM_BASE_URL, LLM_API_KEY, LLM_MODEL   the model (without them: the offline demo model)
      LLM_CONTEXT_SIZE, LLM_MAX_OUTPUT_TOKENS  the budget (admin model configs win)
    Migrations are applied on start.
    """
    with needs_extra("server", "serve"):
        import uvicorn

        from ctxstack.server.settings import Settings, is_loopback
        from ctxstack.store.migrate import upgrade

    env = dict(os.environ)
    if no_auth is not None:
        env["CTXSTACK_AUTH"] = "none" if no_auth else "token"
    elif not env.get("CTXSTACK_AUTH"):
        env["CTXSTACK_AUTH"] = "none" if is_loopback(host) else "token"
    try:
        settings = Settings.from_env(env)
        if settings.auth == "none" and not is_loopback(host):
            click.secho(f"warning: --no-auth on {host}: anyone who can reach this address acts "
                        "as the local user", fg="yellow", err=True)
        asyncio.run(upgrade(settings.database_url, schema=settings.database_schema))
        if not settings.demo_model:
            # Fail now, with the variables to set, rather than on the first question.
            from ctxstack.llm.openai import OpenAICompatibleLLM

            OpenAICompatibleLLM.from_env("main", env)
    except CtxstackError as exc:
        raise click.ClickException(str(exc)) from exc
    os.environ.update(settings.to_env())
    model = "offline demo model (set LLM_BASE_URL, LLM_API_KEY, LLM_MODEL for a real one)" \
        if settings.demo_model else (settings.llm_model or "configured endpoint")
    auth = "no auth (single local user)" if settings.auth == "none" else "API tokens"
    click.echo(f"ctxstack serving on http://{host}:{port}  model: {model}  auth: {auth}")
    uvicorn.run(
        "ctxstack.server.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        timeout_graceful_shutdown=15,
        # uvicorn's supervisor kills a worker that has not answered its health check in
        # 5 s; a worker still importing on a busy machine is not hung (issue 15).
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
    )
