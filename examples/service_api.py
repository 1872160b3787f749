# requires: fastapi, uvicorn, sqlalchemy, aiosqlite, httpx
# expect: stored messages: ['user', 'assistant']
"""The chat service's API from Python: one chat turn, streamed as Server-Sent Events.

Starts ``ctxstack serve`` as a subprocess on a free loopback port with a throw-away SQLite
database (bound to loopback, the service runs with one local user and no tokens; with no
``LLM_BASE_URL`` it answers with its offline demo model, which calls a tool and writes a
long answer). Then, with ``httpx``:

1. ``POST /api/conversations`` creates a conversation;
2. ``POST /api/chat`` runs one turn and reads the event stream — ``step`` (tool calls and
   results), ``compact`` (history compaction), ``answer`` (text deltas), ``done`` (the
   answer, its usage and timing) or ``error``;
3. ``GET /api/conversations/{id}/messages`` shows what the service stored;

and stops the server. Run: ``python examples/service_api.py`` (needs ``ctxstack[server]``
and ``httpx``). Exits 0 when the turn ends with ``done`` and both messages are stored.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(directory: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "FAST_LLM_"))}
    env.update(
        CTXSTACK_DATABASE_URL=f"sqlite+aiosqlite:///{directory / 'service.db'}",
        CTXSTACK_FILES_DIR=str(directory / "files"),
    )
    env.pop("CTXSTACK_REDIS_URL", None)
    code = "from ctxstack.cli import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def wait_until_up(client: httpx.Client, server: subprocess.Popen[bytes]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        try:
            response = client.get("/api/info")
            if response.status_code == 200:
                info: dict[str, Any] = response.json()
                return info
        except httpx.TransportError:
            pass
        if server.poll() is not None:
            error = server.stderr.read().decode() if server.stderr else ""
            raise RuntimeError(f"the server exited with {server.returncode}: {error[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not answer within 60 s")
        time.sleep(0.2)


def sse_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, data)`` pairs of a text/event-stream (comment frames skipped)."""
    name, data = "", ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif not line and name:
            yield name, json.loads(data)
            name, data = "", ""


def chat_turn(client: httpx.Client) -> int:
    conversation = client.post("/api/conversations", json={"title": "Example"})
    conversation.raise_for_status()
    conversation_id = conversation.json()["id"]
    print(f"conversation {conversation_id}")

    done: dict[str, Any] | None = None
    deltas = 0
    request = {"conversation_id": conversation_id, "query": "What is 17 * 23 + 4?"}
    with client.stream("POST", "/api/chat", json=request) as response:
        response.raise_for_status()
        for event, data in sse_events(response):
            if event == "step":
                print(f"step: {json.dumps(data)[:120]}")
            elif event == "compact":
                print(f"compact: {data}")
            elif event == "answer":
                deltas += 1
            elif event == "done":
                done = data
            elif event == "error":
                print(f"FAILED: the turn reported an error: {data}", file=sys.stderr)
                return 1
    if done is None:
        print("FAILED: the stream ended without a done event", file=sys.stderr)
        return 1
    usage = done["usage"]
    print(f"answer ({deltas} deltas): {done['answer'][:160].strip()}…")
    print(f"done: {done['iterations']} iterations, {usage['input_tokens']} in / "
          f"{usage['output_tokens']} out, {done['elapsed']:.2f} s")

    stored = client.get(f"/api/conversations/{conversation_id}/messages")
    stored.raise_for_status()
    roles = [m["role"] for m in stored.json()]
    print(f"stored messages: {roles}")
    if roles != ["user", "assistant"]:
        print("FAILED: expected the question and the answer to be stored", file=sys.stderr)
        return 1
    if "395" not in done["answer"]:
        print("FAILED: the answer does not carry the tool's result (395)", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ctxstack-service-") as tmp:
        port = free_port()
        server = start_server(Path(tmp), port)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                info = wait_until_up(client, server)
                print(f"server up on port {port}: {json.dumps(info)[:160]}")
                return chat_turn(client)
        finally:
            server.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            print(f"server stopped (exit code {server.returncode})")


if __name__ == "__main__":
    raise SystemExit(main())
