"""Helpers for the service tests: run a real ``ctxstack serve`` process and talk to it.

The service under test is always a separate process on a random loopback port, started
exactly as a user would start it (the CLI, migrations on start), so the tests cover the
real HTTP, SSE and process boundaries.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

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


@dataclass
class ServerProcess:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_server(
    workdir: Path,
    env_extra: Mapping[str, str],
    *,
    auth: bool = False,
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
            "--auth" if auth else "--no-auth", "--workers", str(workers),
            "--log-level", "warning"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *args], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    server = ServerProcess(url=f"http://127.0.0.1:{port}", proc=proc, log_path=log_path, env=env)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ctxstack serve exited with {proc.returncode}:\n{server.log()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/api/info", timeout=2).status_code == 200:
                return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"ctxstack serve did not answer within {startup_timeout}s:\n{server.log()}")


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


def parse_sse(lines: Iterator[str]) -> Iterator[SSEEvent | str]:
    """Events from an SSE body, line by line; comment lines come through as ``str``."""
    event, data = "message", []
    for line in lines:
        if line.startswith(":"):
            yield line
            continue
        if line == "":
            if data:
                yield SSEEvent(event, json.loads("\n".join(data)))
            event, data = "message", []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:
        yield SSEEvent(event, json.loads("\n".join(data)))


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
        return [e for e in parse_sse(response.iter_lines()) if isinstance(e, SSEEvent)]
