# requires: fastapi, uvicorn, sqlalchemy, aiosqlite, httpx
"""Context management for an unchanged OpenAI SDK client: point it at ``ctxstack proxy``.

The only change to the client is its ``base_url``. The proxy forwards a request that fits
its model's budget untouched, and compacts one that does not (a rolling summary written by
the summariser, reused on the following turns), saying what it did in response headers.

Runs offline: the upstream is ``CTXSTACK_EXAMPLE_BASE_URL`` when set (an OpenAI base URL
ending in /v1, e.g. a ``ctxstack stub-llm``), else a ``ctxstack stub-llm`` this script
starts; the proxy is ``CTXSTACK_EXAMPLE_PROXY_URL`` when set, else one this script starts
(budget 4,000 tokens, a temporary SQLite database). Exits 0 when every step worked.

    python examples/proxy_openai_sdk.py
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai

CLI = "from ctxstack.cli import main; main()"
FILLER = ("We went through the quarterly plan: 3.2% growth, order #A-1042 shipping on "
          "2026-03-14, and a remaining budget of 41,500 EUR for the three teams. ")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def started(args: list[str], ready: str, env: dict[str, str], log: Path) -> Iterator[None]:
    """Run ``ctxstack ARGS`` until the block ends; wait until ``ready`` answers 200."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", CLI, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"ctxstack {args[0]} did not start:\n{log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready, timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def proxy_url(workdir: Path) -> Iterator[str]:
    """The proxy's base URL, starting the stub and the proxy when not given."""
    given = os.environ.get("CTXSTACK_EXAMPLE_PROXY_URL")
    if given:
        yield given.rstrip("/")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "FAST_LLM_"))}
    with contextlib.ExitStack() as stack:
        upstream = os.environ.get("CTXSTACK_EXAMPLE_BASE_URL", "").rstrip("/")
        if not upstream:
            port = free_port()
            upstream = f"http://127.0.0.1:{port}/v1"
            stack.enter_context(started(["stub-llm", "--port", str(port)],
                                        f"{upstream}/models", env, workdir / "stub.log"))
        port = free_port()
        proxy_env = {**env, "CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'p.db'}",
                     "LLM_API_KEY": os.environ.get("LLM_API_KEY", "upstream-key"),
                     "LLM_CONTEXT_SIZE": "5000",
                     "LLM_MAX_OUTPUT_TOKENS": "1000"}
        stack.enter_context(started(
            ["proxy", "--upstream", upstream, "--port", str(port), "--log-level", "warning"],
            f"http://127.0.0.1:{port}/ctxstack/health", proxy_env, workdir / "proxy.log"))
        yield f"http://127.0.0.1:{port}/v1"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, proxy_url(Path(tmp)) as base_url:
        # The one change: base_url. The key is the proxy's business, not the upstream's.
        client = openai.OpenAI(base_url=base_url, api_key="any-key-on-loopback")
        model = client.models.list().data[0].id  # /v1/models passes through unchanged

        short = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "Hello!"}])
        print("short request:", short.headers["x-ctxstack-compaction"])
        print("  answer:", short.parse().choices[0].message.content)

        history = [{"role": "system", "content": "You are the ACME planning assistant."}]
        for i in range(60):
            history += [{"role": "user", "content": f"Turn {i}: {FILLER}"},
                        {"role": "assistant", "content": f"Noted ({i}). {FILLER}"}]
        for question in ("What is the remaining budget?", "And when does #A-1042 ship?"):
            history.append({"role": "user", "content": question})
            long = client.chat.completions.with_raw_response.create(model=model,
                                                                    messages=history)
            answer = long.parse().choices[0].message.content or ""
            print(f"{len(history)} messages:", long.headers["x-ctxstack-compaction"],
                  "| estimated input tokens:", long.headers["x-ctxstack-input-tokens-estimated"],
                  "| summariser:", long.headers["x-ctxstack-summarizer-usage"])
            history.append({"role": "assistant", "content": answer})
            method = long.headers["x-ctxstack-compaction"].split(";")[0]
            if method == "method=none":
                print("expected the long conversation to be compacted", file=sys.stderr)
                return 1

        text = ""
        for chunk in client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Stream this, please."}],
                stream=True):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        print("streamed:", text)
        stats = httpx.get(base_url.removesuffix("/v1") + "/ctxstack/stats").json()
        print("proxy stats:", {k: stats[k] for k in ("requests", "compactions", "tokens_saved")})
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
