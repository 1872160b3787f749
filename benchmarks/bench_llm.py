"""Client overhead of OpenAICompatibleLLM against the stub, versus a bare httpx client.

Both clients talk to the same stub server (``ctxstack stub-llm`` in a subprocess, so the
server does not compete with the clients for the GIL) in the same run, interleaved call
by call so drift affects both alike:

* non-streaming: median milliseconds per ``chat()`` vs. per bare ``httpx`` POST + JSON
  decode;
* streaming: median microseconds per streamed delta of ``stream_chat()`` vs. a bare
  ``httpx`` stream read with ``httpx-sse`` that decodes each chunk's JSON.

Target: ctxstack's time at most 1.5x the bare client's (it adds typed errors, retries,
usage and message validation on top of the same HTTP exchange).

And the client's CPU per non-streaming call against the bare httpx POST's, with 1 and
with 25 idle connections in the pool (httpx's pool checks every idle connection on each
request; a service's pool holds as many as its calls overlapped). CPU time of this
process only (the stub runs in its own), the two alternated over rounds, the median
kept. No target: it is what the service's turns spend per model call.

Run: ``python -m benchmarks.bench_llm`` (``--quick`` for a short run).
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from httpx_sse import aconnect_sse

from benchmarks.common import BenchRow, print_table
from ctxstack.budget import ModelBudget
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.retry import RetryPolicy
from ctxstack.messages import ChatMessage

TARGET_RATIO = 1.5
REPLY = "The answer is forty-two. " * 16  # 400 characters, ~100 deltas of 4 characters
MESSAGES = [ChatMessage.system("You are terse."), ChatMessage.user("What is six times seven?")]
SRC = Path(__file__).resolve().parents[1] / "src"
POOLS = (1, 25)
CLIENTS = ("ctxstack", "bare")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_stub() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    code = "import ctxstack.cli.stub; from ctxstack.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "stub-llm", "--port", str(port), "--reply", REPLY],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/models", timeout=1)
            return proc, base
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the stub server did not start") from None
            time.sleep(0.05)


async def _timed(fn: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    start = time.perf_counter()
    units = await fn()
    return time.perf_counter() - start, units


async def _measure(base: str, calls: int) -> dict[str, tuple[float, float]]:
    body = {"model": "stub-model", "messages": [m.to_openai() for m in MESSAGES]}
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    url = f"{base}/chat/completions"
    headers = {"Authorization": "Bearer bench"}
    llm = OpenAICompatibleLLM(base, "bench", "stub-model", budget=ModelBudget(),
                              retry_policy=RetryPolicy.none())
    async with httpx.AsyncClient(timeout=30) as http:

        async def bare_chat() -> int:
            response = await http.post(url, json=body, headers=headers)
            response.raise_for_status()
            data = response.json()
            return 1 if data["choices"][0]["message"]["content"] else 0

        async def client_chat() -> int:
            result = await llm.chat(MESSAGES)
            return 1 if result.text else 0

        async def bare_stream() -> int:
            deltas = 0
            async with aconnect_sse(http, "POST", url, json=stream_body,
                                    headers=headers) as source:
                source.response.raise_for_status()
                async for event in source.aiter_sse():
                    if event.data == "[DONE]":
                        continue
                    chunk = json.loads(event.data)
                    if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        deltas += 1
            return deltas

        async def client_stream() -> int:
            return len([d async for d in llm.stream_chat(MESSAGES)])

        pairs = {"chat": (client_chat, bare_chat), "stream": (client_stream, bare_stream)}
        samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
        for name, (ours, bare) in pairs.items():
            for _ in range(max(3, calls // 10)):  # warm-up: connections, imports, caches
                await ours()
                await bare()
            for i in range(calls):
                # Alternate which goes first so neither always runs on a warmer cache.
                order = ((ours, 0), (bare, 1)) if i % 2 == 0 else ((bare, 1), (ours, 0))
                for fn, slot in order:
                    seconds, units = await _timed(fn)
                    samples[name][slot].append(seconds / max(1, units))
    await llm.aclose()
    return {name: (statistics.median(a), statistics.median(b))
            for name, (a, b) in samples.items()}


async def _cpu_per_call(base: str, client: str, pool: int, calls: int) -> float:
    """CPU seconds of this process per non-streaming call (``client``: "ctxstack", or
    "bare" httpx), with ``pool`` connections opened first."""
    llm = OpenAICompatibleLLM(base, "bench", "stub-model", budget=ModelBudget(),
                              retry_policy=RetryPolicy.none())
    http = httpx.AsyncClient(timeout=30)
    body = {"model": "stub-model", "messages": [m.to_openai() for m in MESSAGES]}

    async def bare() -> object:
        response = await http.post(f"{base}/chat/completions", json=body,
                                   headers={"Authorization": "Bearer bench"})
        response.raise_for_status()
        return response.json()

    call = (lambda: llm.chat(MESSAGES)) if client == "ctxstack" else bare
    try:
        for _ in range(2):  # open `pool` connections (and warm up)
            await asyncio.gather(*(call() for _ in range(pool)))
        start = time.process_time()
        for _ in range(calls):
            await call()
        return (time.process_time() - start) / calls
    finally:
        await llm.aclose()
        await http.aclose()


async def _client_cpu(base: str, calls: int) -> dict[tuple[str, int], float]:
    samples: dict[tuple[str, int], list[float]] = {}
    for _ in range(3):
        for pool in POOLS:
            for client in CLIENTS:
                samples.setdefault((client, pool), []).append(
                    await _cpu_per_call(base, client, pool, calls))
    return {key: statistics.median(values) for key, values in samples.items()}


def run(quick: bool) -> list[BenchRow]:
    """Measure and return the rows (``quick``: fewer calls, same shape)."""
    proc, base = _start_stub()
    try:
        medians = asyncio.run(_measure(base, 40 if quick else 300))
        cpu = asyncio.run(_client_cpu(base, 30 if quick else 200))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rows = []
    for name, label, scale, unit in (
        ("chat", "llm client: non-streaming call", 1e3, "ms"),
        ("stream", "llm client: streamed delta", 1e6, "us"),
    ):
        ours, bare = medians[name]
        ratio = ours / bare
        rows.append(BenchRow(name=f"{label} vs bare httpx", value=ours * scale, unit=unit,
                             baseline=bare * scale, ratio=ratio,
                             target=f"<= {TARGET_RATIO:g}x bare httpx",
                             met=ratio <= TARGET_RATIO))
    for pool in POOLS:
        ours, bare_cpu = cpu[("ctxstack", pool)], cpu[("bare", pool)]
        rows.append(BenchRow(
            name=f"llm client CPU per call, {pool} pooled connection{'s' if pool > 1 else ''} "
                 "(baseline: bare httpx)",
            value=ours * 1e3, unit="ms", baseline=bare_cpu * 1e3, ratio=ours / bare_cpu))
    return rows


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]))
