"""Helpers for the proxy tests: a real ``ctxstack proxy`` process, and the stub's script.

The proxy under test is started exactly as a user starts it (the CLI, migrations on
start) on a random loopback port, in front of a :class:`~ctxstack.llm.stub.StubServer`
(real HTTP on loopback) whose script the test changes as it goes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION
from ctxstack.llm.stub import StubReply, StubRequest
from ctxstack.proxy import ProxySettings, create_app
from ctxstack.proxy.errors import ProxyError
from ctxstack.store import create_engine_from_url, upgrade
from tests.service_support import ChildProcess, clean_env, free_port
from tests.store.dbkit import Backend, postgres_backend

_LAUNCH = "import ctxstack.cli.proxy\nfrom ctxstack.cli import main\nmain()\n"
SUMMARY_TEXT = "Summary: the user discussed the quarterly plan, order #A-1042 and 3.2% growth."


@dataclass
class ProxyProcess(ChildProcess):
    log_tail: ClassVar[int] = 8000

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def start_proxy(workdir: Path, upstream: str, env_extra: Mapping[str, str] | None = None, *,
                args: tuple[str, ...] = (), startup_timeout: float = 60.0) -> ProxyProcess:
    """Start ``ctxstack proxy --upstream UPSTREAM`` on a free port; wait until it answers."""
    port = free_port()
    env = clean_env(env_extra)
    env.setdefault("CTXSTACK_DATABASE_URL", f"sqlite+aiosqlite:///{workdir / 'proxy.db'}")
    log_path = workdir / f"proxy-{port}.log"
    cmd = [sys.executable, "-c", _LAUNCH, "proxy", "--upstream", upstream, "--host",
           "127.0.0.1", "--port", str(port), *args]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = ProxyProcess(f"http://127.0.0.1:{port}", proc, log_path)
    server.wait_until_ready("/ctxstack/health", startup_timeout, "ctxstack proxy")
    return server


@contextlib.contextmanager
def running_proxy(workdir: Path, upstream: str, env_extra: Mapping[str, str] | None = None,
                  **kw: Any) -> Iterator[ProxyProcess]:
    proxy = start_proxy(workdir, upstream, env_extra, **kw)
    try:
        yield proxy
    finally:
        proxy.stop()


def is_summary_request(request: StubRequest) -> bool:
    """A compaction call: its system prompt ends with the language instruction (the
    guard's transcript request), or its last message does (the proxy's request continuing
    the conversation's own prefix)."""
    system = "\n".join(m.text for m in request.messages if m.role == "system")
    last = request.messages[-1] if request.messages else None
    return system.rstrip().endswith(LANGUAGE_INSTRUCTION) or (
        last is not None and last.role == "user"
        and last.text.rstrip().endswith(LANGUAGE_INSTRUCTION))


def is_summary_body(body: Mapping[str, Any]) -> bool:
    """:func:`is_summary_request` for a recorded JSON body (``/_stub/requests``)."""
    messages = body.get("messages") or []
    system = "\n".join(m["content"] for m in messages
                       if m.get("role") == "system" and isinstance(m.get("content"), str))
    last = messages[-1] if messages else {}
    return system.rstrip().endswith(LANGUAGE_INSTRUCTION) or (
        last.get("role") == "user" and isinstance(last.get("content"), str)
        and last["content"].rstrip().endswith(LANGUAGE_INSTRUCTION))


def client_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Forwarded ``tools`` without the proxy's own ``ctxstack_recall`` (offered upstream
    once something of the session was compacted away; the only difference allowed)."""
    if tools is None:
        return None
    return [t for t in tools if (t.get("function") or {}).get("name") != "ctxstack_recall"]


class RecallScript:
    """The stub's model for the session and recall tests, on every wire: a summary for
    compaction calls (after ``summary_delay``); a ``ctxstack_recall`` call when the proxy
    offers it (and ``tool_choice`` is not ``none``) and the user's last message asks about
    the vault — or always, with ``always_recall``; a ``read_log`` call when the last
    message asks to check a day's shipping log; after a tool result an answer quoting it
    (the line about the vault when asked about it); else "Noted.". With ``thinking``, every answer starts with a signed thinking block
    (the Anthropic wire)."""

    def __init__(self, *, summary_delay: float = 0.0, always_recall: bool = False,
                 thinking: bool = False) -> None:
        self.summary_delay = summary_delay
        self.always_recall = always_recall
        self.thinking = thinking

    def __call__(self, request: StubRequest) -> StubReply:
        if is_summary_request(request):
            return StubReply.text(SUMMARY_TEXT, delay=self.summary_delay, cached_tokens=50)
        last = request.messages[-1]
        think: dict[str, Any] = (
            {"thinking": f"Step {len(request.messages)}."} if self.thinking else {})
        choice = request.body.get("tool_choice")
        offered = "ctxstack_recall" in request.tool_names and not (
            isinstance(choice, Mapping) and choice.get("type") == "none")
        asked = "vault" in request.last_user_text and last.role == "user"
        if offered and (self.always_recall or asked):
            return StubReply.tool_call("ctxstack_recall", {"query": "vault combination"},
                                       content="Let me check.", cached_tokens=30,
                                       cache_write_tokens=5, **think)
        if last.role == "tool":  # quoting the line that answers, if there is one
            found = [line for line in last.text.splitlines()
                     if "vault" in line and "vault" in request.last_user_text]
            return StubReply.text(f"From the record: {(found or [last.text])[0][:200]}",
                                  cached_tokens=30, **think)
        if last.role == "user" and "check the shipping log of day " in last.text:
            day = last.text.rsplit("day ", 1)[-1].rstrip(".")
            return StubReply.tool_call("read_log", {"path": f"d{day}"}, cached_tokens=30,
                                       **think)
        return StubReply.text("Noted.", cached_tokens=30, **think)


class ConversationRule:
    """The stub's answers: a summary for compaction calls; for chat calls a tool call when
    the last user message asks for one (and no result came yet), else a text answer."""

    def __init__(self, answer: str = "Noted. Here is a detailed answer about the plan.") -> None:
        self.answer = answer

    def __call__(self, request: StubRequest) -> StubReply:
        if is_summary_request(request):
            return StubReply.text(SUMMARY_TEXT)
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m.role == "user")
        wants_tool = "look it up" in messages[last_user].text
        answered = any(m.role == "tool" for m in messages[last_user:])
        if wants_tool and not answered:
            return StubReply.tool_call("lookup", {"query": messages[last_user].text[:40]})
        return StubReply.text(self.answer)


def chat_requests(requests: list[StubRequest]) -> list[StubRequest]:
    """The recorded chat calls that are not compaction calls."""
    return [r for r in requests if not is_summary_request(r)]


def tool_sequence_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Every way ``messages`` breaks OpenAI's tool rules (empty when valid): each tool
    result answers a call of the assistant message just before the results, and each call
    of an assistant message is answered before the next non-tool message."""
    problems: list[str] = []
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                problems.append(f"messages[{i}]: tool result without its call")
            pending.discard(m.get("tool_call_id"))
            continue
        if pending:
            problems.append(f"messages[{i}]: calls {sorted(pending)} left unanswered")
            pending = set()
        if role == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
    if pending:
        problems.append(f"end: calls {sorted(pending)} left unanswered")
    return problems


# --------------------------------------------------------------------------- in process
async def app_client(stack: AsyncExitStack, settings: ProxySettings) -> httpx.AsyncClient:
    """A proxy app run in process (its lifespan on ``stack``), reached over ASGI."""
    app = create_app(settings)
    await stack.enter_async_context(app.router.lifespan_context(app))
    return await stack.enter_async_context(httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60))


async def migrated_sqlite(path: Path) -> str:
    """The URL of a SQLite database at ``path`` with the proxy's tables."""
    url = f"sqlite+aiosqlite:///{path}"
    engine = create_engine_from_url(url)
    await upgrade(engine)
    await engine.dispose()
    return url


async def migrated_backend(kind: str, sqlite_url: str) -> AsyncIterator[Backend]:
    """``sqlite_url`` (already migrated), or a fresh migrated PostgreSQL schema."""
    if kind == "sqlite":
        yield Backend("sqlite", sqlite_url)
        return
    async for pg in postgres_backend():
        engine = pg.engine()
        await upgrade(engine)
        await engine.dispose()
        yield pg


def check_anthropic_forwarded(body: Mapping[str, Any], *, budget: int, system: Any,
                              tools: list[dict[str, Any]], client_turns: set[str]) -> None:
    """A request the proxy forwarded on the Anthropic wire: within ``budget`` by the exact
    count, valid by Anthropic's rules, the client's ``system`` and ``tools`` byte-identical
    (the proxy's ``ctxstack_recall`` may follow the tools), every assistant turn holding a
    thinking block one the client sent (``client_turns``: their JSON), whole."""
    from ctxstack.llm.stub.anthropic import sequence_problems
    from ctxstack.proxy.anthropic import count_request
    from ctxstack.proxy.anthropic.recall import RECALL_TOOL_SPEC
    from ctxstack.tokens import DEFAULT_COUNTER

    assert count_request(body, DEFAULT_COUNTER) <= budget
    assert sequence_problems(body) == []
    assert json.dumps(body["system"]) == json.dumps(system)
    assert json.dumps(body["tools"][:len(tools)]) == json.dumps(tools)
    assert body["tools"][len(tools):] in ([], [RECALL_TOOL_SPEC])
    for m in body["messages"]:
        content = m["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if m["role"] == "assistant" and any(b["type"] == "thinking" for b in blocks):
            assert json.dumps(m) in client_turns


def check_view_after_change(change: str, methods: list[str], forwarded: list[list[Any]],
                            summaries: list[StubRequest], marker: str | None,
                            dropped: str) -> None:
    """The third of three requests of one session, after ``change`` to the history the
    second extended: ``unchanged`` extends the view again (the same forwarded list, no
    new summary); an edit, insert or removal recomputes it, and the new summary is made
    from what the client sent — ``marker`` (the changed message) in it and not in the
    first, or for a removal ``dropped`` (the removed message) in the first only."""
    if change == "unchanged":
        assert methods[2] == "checkpoint"
        assert forwarded[2] == forwarded[1]
        assert len(summaries) == 1
        return
    assert methods[2] != "checkpoint"  # the view made again from what the client sent
    assert len(summaries) == 2
    if marker is not None:
        assert marker in json.dumps(summaries[1].body)
        assert marker not in json.dumps(summaries[0].body)
    else:
        assert dropped in json.dumps(summaries[0].body)
        assert dropped not in json.dumps(summaries[1].body)


def assert_refused(parse: Callable[[bytes], object], raw: bytes, param: str | None,
                   says: str) -> None:
    """``parse(raw)`` refuses the body as a client error: 400, the field's path in
    ``param`` (what the SDKs read), a short message saying what was expected."""
    with pytest.raises(ProxyError) as refused:
        parse(raw)
    assert refused.value.status == 400
    assert refused.value.param == param
    assert says in refused.value.message
    assert len(refused.value.message) < 300
