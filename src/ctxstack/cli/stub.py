"""``ctxstack stub-llm``: serve the scripted OpenAI-compatible stub in the foreground.

For demos, browser tests and trying ctxstack without a real endpoint: point
``LLM_BASE_URL`` at the printed URL (any ``LLM_API_KEY``, ``LLM_MODEL`` = the model name).
Without ``--reply`` the stub echoes the last user message. It speaks Chat Completions
(``/v1/chat/completions``), OpenAI Responses (``/v1/responses``: JSON, SSE and the
WebSocket mode) and Anthropic Messages (``/v1/messages``, ``…/count_tokens``: point
``ctxstack proxy --anthropic-upstream`` at ``http://HOST:PORT``) from one script.

Every request it receives is recorded (the last 1,000): ``GET /_stub/requests`` lists
them (method, path, query, headers, raw body and its JSON), ``DELETE /_stub/requests``
forgets them — what tests of a process in front of the stub check.

``--recall-on TEXT`` shows the proxy's recall offline: when the proxy offers its
``ctxstack_recall`` tool and the user's last message contains TEXT, the stub calls the tool
with that message as the query, then answers with the lines of the result that mention
TEXT (the proxy answers the call itself; the client sees only the answer).

Fault flags (one at a time; see :mod:`ctxstack.llm.stub.faults`): ``--fail-status CODE``
(with ``--retry-after SECONDS``), ``--hang``, ``--garbage``, ``--drop-stream``,
``--overflow``; ``--fail-times N`` makes the first N requests fail and the rest succeed.
"""

from __future__ import annotations

import click

from ctxstack.cli.app import main, needs_extra
from ctxstack.llm.stub.faults import FaultKind, FaultPlan, with_faults
from ctxstack.llm.stub.replies import DEFAULT_MODEL, ReplyLike, Rule, StubReply, StubRequest

RECALL_TOOL = "ctxstack_recall"
"""The tool ``ctxstack proxy`` offers once part of a session is archived (the stub does not
import the proxy: it runs with the ``server`` extra alone)."""


def echo_rule(request: StubRequest) -> str:
    """The default answer: repeat the last user message."""
    return f"You said: {request.last_user_text}"


def recall_rule(trigger: str, base: Rule) -> Rule:
    """``base``, except that a request offering :data:`RECALL_TOOL` whose user's last
    message contains ``trigger`` (case-folded) gets a call of it (that message as the
    query), and the answer to such a call quotes the result's lines that contain
    ``trigger`` (its start when none does)."""
    needle = trigger.casefold()

    def rule(request: StubRequest) -> ReplyLike:
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool" and _answers_recall(request):
            lines = [line for line in last.text.splitlines() if needle in line.casefold()]
            return StubReply.text("From the archive: " + (" ".join(lines) or last.text)[:500])
        if (last is not None and last.role == "user" and RECALL_TOOL in request.tool_names
                and needle in last.text.casefold()):
            return StubReply.tool_call(RECALL_TOOL, {"query": last.text[:500]})
        return base(request)

    return rule


def _answers_recall(request: StubRequest) -> bool:
    """Whether the last message is the result of a :data:`RECALL_TOOL` call."""
    result = request.messages[-1]
    for message in reversed(request.messages[:-1]):
        if message.role == "assistant":
            return any(c.name == RECALL_TOOL and c.id == result.tool_call_id
                       for c in message.tool_calls or ())
    return False


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
@click.option("--recall-on", "recall_on", default=None, metavar="TEXT",
              help="Call the proxy's ctxstack_recall when it is offered and the user's "
                   "last message contains TEXT; answer from what it returns.")
@click.option("--fail-status", type=click.IntRange(400, 599), default=None,
              help="Fault: answer with this HTTP status (429, 500, 503…).")
@click.option("--retry-after", type=click.FloatRange(min=0), default=None,
              help="With --fail-status: send this Retry-After (seconds).")
@click.option("--hang", is_flag=True, help="Fault: accept the request and never answer.")
@click.option("--garbage", is_flag=True, help="Fault: HTTP 200 with a body that is not JSON.")
@click.option("--drop-stream", is_flag=True,
              help="Fault: cut the answer off mid-stream (mid-body when not streamed).")
@click.option("--overflow", is_flag=True, help="Fault: OpenAI's context-length 400.")
@click.option("--fail-times", type=click.IntRange(min=0), default=None,
              help="Only the first N requests get the fault; later ones are answered.")
def stub_llm(port: int, host: str, delay: float, reply: str | None, model: str,
             recall_on: str | None, fail_status: int | None, retry_after: float | None,
             hang: bool, garbage: bool, drop_stream: bool, overflow: bool,
             fail_times: int | None) -> None:
    """Run a scripted OpenAI-compatible LLM server (no real model, no network).

    Received requests are listed at GET /_stub/requests (DELETE clears them).
    """
    with needs_extra("server", "stub-llm"):
        import uvicorn

        from ctxstack.llm.stub.app import StubState, create_app
        from ctxstack.llm.stub.recording import DEFAULT_LIMIT
    rule: Rule = (lambda _request: reply) if reply is not None else echo_rule
    if recall_on:
        rule = recall_rule(recall_on, rule)
    plan = fault_plan(fail_status, retry_after, hang=hang, garbage=garbage,
                      drop_stream=drop_stream, overflow=overflow, fail_times=fail_times)
    if plan is not None:
        rule = with_faults(plan, rule)
        click.echo(f"fault: {plan.kind}" + (f" {plan.status}" if plan.kind == "status" else "")
                   + (f" for the first {plan.times} requests" if plan.times is not None
                      else " on every request"))
    # Bounded: a long-running stub must not keep every request's history in memory.
    state = StubState(model=model, delay=delay, rule=rule, max_recorded=DEFAULT_LIMIT)
    click.echo(f"stub LLM listening on http://{host}:{port}/v1 (model {model!r}; "
               "chat/completions, responses and messages); Ctrl-C stops")
    uvicorn.run(create_app(state), host=host, port=port, log_level="warning")


def fault_plan(fail_status: int | None, retry_after: float | None, *, hang: bool,
               garbage: bool, drop_stream: bool, overflow: bool,
               fail_times: int | None) -> FaultPlan | None:
    """The fault the flags ask for (``None``: none); more than one is a usage error."""
    flags: list[tuple[FaultKind, bool]] = [
        ("status", fail_status is not None), ("hang", hang), ("garbage", garbage),
        ("drop", drop_stream), ("overflow", overflow)]
    chosen = [kind for kind, on in flags if on]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one fault at a time, got {', '.join(chosen)}")
    if not chosen:
        if retry_after is not None or fail_times is not None:
            raise click.UsageError("--retry-after and --fail-times need a fault flag")
        return None
    if retry_after is not None and chosen[0] != "status":
        raise click.UsageError("--retry-after goes with --fail-status")
    return FaultPlan(kind=chosen[0], status=fail_status or 503, retry_after=retry_after,
                     times=fail_times)
