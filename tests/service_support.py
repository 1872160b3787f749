"""Helpers for the service tests: run a real ``ctxstack serve`` process and talk to it.

The service under test is always a separate process on a random loopback port, started
exactly as a user would start it (the CLI, migrations on start), so the tests cover the
real HTTP, SSE and process boundaries.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx
from httpx_sse import EventSource

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
_LAUNCH = (
    "import ctxstack.cli.serve, ctxstack.cli.user\n"
    "from ctxstack.cli import main\n"
    "main()\n"
)
# Variables of the outer environment that would change what the server does.
_SCRUB = ("LLM_", "FAST_LLM_", "CTXSTACK_")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + str(ROOT)
    env.update(extra or {})
    return env


def run_cli(*args: str, env: Mapping[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``ctxstack <args>`` from this worktree's sources."""
    return subprocess.run([sys.executable, "-c", _LAUNCH, *args], env=dict(env), text=True,
                          capture_output=True, timeout=timeout, check=False)


def stop_process(proc: subprocess.Popen[bytes], grace: float = 20) -> None:
    """Terminate ``proc`` if it still runs; kill it if it has not exited ``grace`` seconds
    later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def wait_for_http(proc: subprocess.Popen[bytes], url: str, timeout: float, *,
                  every: float = 0.2) -> str | None:
    """Poll GET ``url`` every ``every`` seconds until it answers 200 (None); else what went
    wrong: ``proc`` exited first, or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return None
        time.sleep(every)
    return f"did not answer within {timeout}s"


@dataclass
class ChildProcess:
    """A ``ctxstack`` command serving HTTP at ``url`` in its own process, its output in
    ``log_path``."""

    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_tail: ClassVar[int] = 6000
    """How much of the log's end :meth:`log` returns (characters)."""

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-self.log_tail:]
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc)

    def kill_9(self, stream: contextlib.AbstractContextManager[Any] | None = None) -> None:
        """SIGKILL the process (no shutdown of any kind, as a crash) and wait until it is
        gone; then close the client's ``stream`` that broke with it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        if stream is not None:
            with contextlib.suppress(httpx.HTTPError):
                stream.__exit__(None, None, None)

    def wait_until_ready(self, path: str, timeout: float, what: str) -> None:
        """Wait until GET ``path`` answers 200; stopped and a RuntimeError with the log
        when the process exits first or ``timeout`` seconds pass (``what`` names it)."""
        problem = wait_for_http(self.proc, f"{self.url}{path}", timeout)
        if problem is not None:
            self.stop()
            raise RuntimeError(f"{what} {problem}:\n{self.log()}")


@dataclass
class ServerProcess(ChildProcess):
    env: dict[str, str] = field(default_factory=dict)


def start_server(
    workdir: Path,
    env_extra: Mapping[str, str],
    *,
    auth: bool | None = False,
    workers: int = 1,
    startup_timeout: float = 40.0,
) -> ServerProcess:
    """Start ``ctxstack serve`` on a free port and wait until it answers."""
    port = free_port()
    env = clean_env({
        "CTXSTACK_FILES_DIR": str(workdir / "files"),
        **env_extra,
    })
    env.setdefault("CTXSTACK_DATABASE_URL", f"sqlite+aiosqlite:///{workdir / 'service.db'}")
    log_path = workdir / f"serve-{port}.log"
    args = ["serve", "--host", "127.0.0.1", "--port", str(port),
            *([] if auth is None else ["--auth" if auth else "--no-auth"]),
            "--workers", str(workers),
            "--log-level", "warning"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = ServerProcess(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path, env=env)
    server.wait_until_ready("/api/info", startup_timeout, "ctxstack serve")
    return server


@contextlib.contextmanager
def running_server(workdir: Path, env_extra: Mapping[str, str], **kw: Any) -> Iterator[ServerProcess]:
    server = start_server(workdir, env_extra, **kw)
    try:
        yield server
    finally:
        server.stop()


@dataclass
class SSEEvent:
    event: str
    data: Any


def sse_events(response: httpx.Response) -> Iterator[SSEEvent]:
    """A turn's events as httpx-sse reads them (keep-alive comments are not events).

    httpx-sse dispatches an empty event at the blank line after a comment once the stream
    has carried an ``id:`` (it keeps the last id); the SSE spec dispatches nothing when the
    data buffer is empty, so neither does this."""
    for sse in EventSource(response).iter_sse():
        if sse.data:
            yield SSEEvent(sse.event, json.loads(sse.data))


def chat(client: httpx.Client, conversation_id: str, query: str, *, mode: str = "react",
         file_ids: list[str] | None = None, timeout: float = 60) -> list[SSEEvent]:
    """Run one turn and return its events (keep-alive comments dropped)."""
    body = {"conversation_id": conversation_id, "query": query, "mode": mode,
            "file_ids": file_ids or []}
    with client.stream("POST", "/api/chat", json=body, timeout=timeout) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"chat answered {response.status_code}: {response.text}")
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response))


# --------------------------------------------------------------------------- stub LLM script
def new_conversation(client: httpx.Client) -> str:
    """A new conversation of the client's user; its id."""
    made = client.post("/api/conversations", json={})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def stored(client: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's stored messages, as ``GET …/messages`` lists them."""
    answer = client.get(f"/api/conversations/{conversation_id}/messages")
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()
    return messages


class ServiceRule:
    """A stub-LLM rule that plays every role a chat turn needs, and records usage.

    * compaction calls (system prompt ending with the language instruction) → a summary;
    * DAG planner / analyzer → a one-step plan / "achieved";
    * agent calls (with tools): a tool call first, then a brief answer;
    * everything else (synthesis, streamed) → ``answer``.

    ``reported`` holds the (input, output) usage the stub reported for each successful
    call, so a test can compare a turn's ``done.usage`` with the sum. ``fail_when`` makes a
    matching request fail with a 400 (not retried) to break a turn mid-way.
    """

    def __init__(self, *, answer: str = "The answer is 42.", tool: str = "calculate",
                 arguments: dict[str, Any] | None = None, summary: str = "Summary: earlier turns.",
                 chunk_size: int = 8, chunk_delay: float = 0.0, stream_delay: float = 0.0,
                 tool_delay: float = 0.0) -> None:
        self.answer = answer
        self.tool = tool
        self.arguments = arguments if arguments is not None else {"expression": "6*7"}
        self.summary = summary
        self.chunk_size = chunk_size
        self.chunk_delay = chunk_delay
        self.stream_delay = stream_delay
        self.tool_delay = tool_delay
        self.fail_when: Any = None
        self.reported: list[tuple[int, int]] = []
        self.kinds: list[str] = []
        import threading

        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Any:
        from ctxstack.llm.stub import StubReply, StubToolCall, stub_usage

        kind, reply = self.decide(request)
        if self.fail_when is not None and self.fail_when(kind, request):
            with self._lock:
                self.kinds.append(f"{kind}:failed")
            return StubReply.failure(400, "stub: this call was told to fail", code="boom")
        calls = tuple(reply.tool_calls) if reply.tool_calls else ()
        usage = stub_usage(request.messages, reply.content,
                           [StubToolCall(c.name, c.arguments) for c in calls])
        with self._lock:
            self.kinds.append(kind)
            self.reported.append(usage)
        return reply

    def decide(self, request: Any) -> tuple[str, Any]:
        from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION
        from ctxstack.llm.stub import StubReply

        system = "\n".join(m.text for m in request.messages if m.role == "system")
        last = request.messages[-1] if request.messages else None
        if system.rstrip().endswith(LANGUAGE_INSTRUCTION) or (
                last is not None and last.role == "user"
                and last.text.rstrip().endswith(LANGUAGE_INSTRUCTION)):
            # the transcript request, or the cache-aligned one (its instruction last)
            return "summary", StubReply.text(self.summary)
        try:
            from ctxstack.dag import _prompts as dag_prompts
        except ImportError:  # pragma: no cover - the DAG engine ships with ctxstack
            dag_prompts = None
        if dag_prompts is not None and system.startswith(dag_prompts.PLANNER_ROLE):
            plan = {"steps": [{"id": "s1", "task": "Compute 6*7 with the calculator",
                               "dependencies": [], "tool_hint": "calculate"}]}
            return "planner", StubReply.text(json.dumps(plan))
        if dag_prompts is not None and system.startswith(dag_prompts.ANALYZER_ROLE):
            verdict = {"achieved": True, "confidence": 0.95, "reasoning": "the step computed it"}
            return "analyzer", StubReply.text(json.dumps(verdict))
        if request.tools:
            since_user = []
            for message in reversed(request.messages):
                if message.role == "user":
                    break
                since_user.append(message)
            if not any(m.role == "tool" for m in since_user):
                return "tool_call", StubReply.tool_call(self.tool, self.arguments,
                                                        delay=self.tool_delay)
            return "brief", StubReply.text("Brief: the tool said " + since_user[0].text[:200])
        return "answer", StubReply.text(self.answer, chunk_size=self.chunk_size,
                                        chunk_delay=self.chunk_delay, delay=self.stream_delay)

    def total(self) -> tuple[int, int]:
        with self._lock:
            return (sum(i for i, _ in self.reported), sum(o for _, o in self.reported))

    def reset_usage(self) -> None:
        with self._lock:
            self.reported.clear()
            self.kinds.clear()


def llm_env(stub: Any, **extra: str) -> dict[str, str]:
    """Environment pointing ``ctxstack serve`` at a stub server."""
    return {"LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "stub-key", "LLM_MODEL": "stub-model",
            **extra}


def redis_url_or_skip() -> str:
    """The test Redis URL (``CTXSTACK_TEST_REDIS_URL``, default the local server); skip
    when it does not answer, or fail under ``CTXSTACK_REQUIRE_POSTGRES=1`` (CI runs both
    services)."""
    import pytest
    import redis

    url = os.environ.get("CTXSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except Exception as exc:
        message = f"Redis at {url} is not reachable ({exc}); start it to run this test"
        if os.environ.get("CTXSTACK_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return url


@contextlib.asynccontextmanager
async def in_process_service(tmp_path: Path) -> AsyncIterator[tuple[Any, httpx.AsyncClient, str]]:
    """The service in this process with the demo model (no pacing, no calibration) on a
    fresh SQLite database under ``tmp_path``: its state, a client on it and a new
    conversation's id."""
    from ctxstack.server.app import create_app
    from ctxstack.server.settings import Settings
    from ctxstack.store.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'turns.db'}"
    await upgrade(url)
    app = create_app(Settings(database_url=url, files_dir=tmp_path / "files", auth="none",
                              demo_delay=0, demo_chunk_delay=0, calibrate=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            conversation = (await client.post("/api/conversations", json={})).json()["id"]
            yield app.state.ctxstack, client, conversation


async def turn_over(client: httpx.AsyncClient, conversation: str, query: str) -> str:
    """Ask ``query`` in the conversation; the name of the turn's last event."""
    last = ""
    async with client.stream("POST", "/api/chat", json={
            "conversation_id": conversation, "query": query}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                last = line[6:].strip()
    return last


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds, looking every 10 ms; AssertionError after 10 s."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


class SlowTakeQueue:
    """An inject queue whose ``take`` waits for ``release`` (to stop a poller mid-query),
    then hands out ``texts``; every turn always has something queued. Counts the takes
    that finished and those cancelled."""

    def __init__(self, texts: Sequence[str] = ()) -> None:
        self.texts = list(texts)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = 0
        self.cancelled = 0

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return set(turns)

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return list(self.texts)
