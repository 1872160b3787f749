"""``ctxstack stub-llm``: serve the scripted OpenAI-compatible stub in the foreground.

For demos, browser tests and trying ctxstack without a real endpoint: point
``LLM_BASE_URL`` at the printed URL (any ``LLM_API_KEY``, ``LLM_MODEL`` = the model name).
Without ``--reply`` the stub echoes the last user message.

Every request it receives is recorded (the last 1,000): ``GET /_stub/requests`` lists
them (method, path, query, headers, raw body and its JSON), ``DELETE /_stub/requests``
forgets them — what tests of a process in front of the stub check.
"""

from __future__ import annotations

import click

from ctxstack.cli.app import main, needs_extra
from ctxstack.llm.stub.replies import DEFAULT_MODEL, StubRequest


def echo_rule(request: StubRequest) -> str:
    """The default answer: repeat the last user message."""
    return f"You said: {request.last_user_text}"


@main.command("stub-llm")
@click.option("--port", type=click.IntRange(0, 65535), default=8001, show_default=True,
              help="Port to listen on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds to wait before every answer.")
@click.option("--reply", "reply", default=None,
              help="Answer every request with this text (default: echo the user).")
@click.option("--model", default=DEFAULT_MODEL, show_default=True,
              help="Model name listed by /v1/models.")
def stub_llm(port: int, host: str, delay: float, reply: str | None, model: str) -> None:
    """Run a scripted OpenAI-compatible LLM server (no real model, no network).

    Received requests are listed at GET /_stub/requests (DELETE clears them).
    """
    with needs_extra("server", "stub-llm"):
        import uvicorn

        from ctxstack.llm.stub.app import StubState, create_app
    state = StubState(model=model, delay=delay,
                      rule=(lambda _request: reply) if reply is not None else echo_rule)
    click.echo(f"stub LLM listening on http://{host}:{port}/v1 (model {model!r}); Ctrl-C stops")
    uvicorn.run(create_app(state), host=host, port=port, log_level="warning")
