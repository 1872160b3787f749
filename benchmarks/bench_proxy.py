"""``ctxstack proxy``: what it adds to a request, and how often it summarises.

Two real processes on loopback: ``ctxstack stub-llm`` (the upstream, echoing) and
``ctxstack proxy`` in front of it (SQLite checkpoints). Each figure is measured against
calling the stub directly in the same run, requests interleaved in pairs so both see the
same machine load (an "added" figure is a quantile of the per-pair differences; the
baseline column is the direct call's own quantile, the ratio proxied ÷ direct):

* **added latency per request, p50/p99** — proxied minus direct wall time of the same
  non-streaming request: 10 messages within budget (forwarded unchanged; target p50
  ≤ 5 ms), and 2,000 messages over the default 64k budget whose checkpoint hits (target
  p50 ≤ 15 ms). The proxied 2,000-message request reaches the upstream as system prompt +
  summary + the recent messages, so the upstream has less to read than when called
  directly; the figure is what the client sees, savings included;
* **the proxy's CPU per request** (from ``/proc``), next to the stub's for the same
  request: unlike wall times it does not depend on how busy the machine is;
* the same two requests for ``gpt-4o``, which the proxy counts **exactly** with tiktoken's
  ``o200k_base`` (the vocabulary made available offline first, from the ``bpe-openai``
  wheel: :mod:`benchmarks.vocab`; if it cannot be, the proxy falls back to the heuristic
  and the row's label shows the counter the proxy reported in ``x-ctxstack-token-counter``).
  Same targets: exact counting must not make the within-budget path slower (the proxy
  memoises counts per message text);
* **added time to first byte when streaming** (10 messages), p50;
* **throughput at 50 concurrent streams** — completed streams/s through the proxy vs
  direct;
* **summariser calls per 100 requests of a growing conversation** vs the overflows in it
  (a request whose history, starting from what the proxy forwarded the time before, no
  longer fits what the proxy fills: the budget — 4,000 tokens, set as a database model
  config for the model name — less the heuristic counter's safety margin, because the
  proxy keeps that margin free like every budget fit, so that is where it must compact).
  Target ≤ 1.2 × overflows. The baseline column is what a proxy without checkpoints would
  do: one summary per request over that threshold.

``--quick`` takes fewer samples; ``CTXSTACK_BENCH_SMOKE`` fewer still.
Run: ``python -m benchmarks.bench_proxy [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import BenchRow, print_table

TITLE = "proxy (ctxstack proxy in front of ctxstack stub-llm)"
ROOT = Path(__file__).resolve().parent.parent
_LAUNCH = ("import ctxstack.cli.proxy, ctxstack.cli.stub\n"
           "from ctxstack.cli import main\nmain()\n")
SMALL_MODEL = "small-model"
SMALL_BUDGET = 4_000
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the "
          "shipping dates; the user wants the plan kept under budget. ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "FAST_LLM_", "CTXSTACK_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
    env.update(extra)
    return env


def _cpu_ms(pid: int) -> float:
    """CPU time (user + system) a process has used so far, in ms (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def _process(args: list[str], env: dict[str, str], ready_url: str, log: Path,
             ) -> Iterator[int]:
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, *args], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _history(count: int, model: str, *, stream: bool = False) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a planner."}]
    for i in range(count - 2):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Message {i}: {FILLER}"})
    messages.append({"role": "user", "content": "What was the growth figure?"})
    body: dict[str, Any] = {"model": model, "messages": messages}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Measured = tuple[list[float], list[float], str, float, float]


def _added(client: httpx.Client, direct: str, proxy: str, body: bytes, samples: int,
           pids: tuple[int, int], *, show_counter: bool = False) -> Measured:
    """Wall times (ms) of the same request direct and proxied, interleaved; the proxy's
    ``method`` (and token counter); and the CPU ms per request the proxy and the stub
    processes spent on them."""
    headers = {"content-type": "application/json"}
    direct_ms, proxy_ms = [], []
    method = ""
    stub_pid, proxy_pid = pids
    cpu_before = _cpu_ms(stub_pid), _cpu_ms(proxy_pid)
    for _ in range(samples):
        for url, into in ((direct, direct_ms), (proxy, proxy_ms)):
            started = time.perf_counter()
            response = client.post(f"{url}/chat/completions", content=body, headers=headers)
            into.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text}")
            if url == proxy:
                method = response.headers["x-ctxstack-compaction"].split(";")[0]
                counter = response.headers.get("x-ctxstack-token-counter")
                method += f", {counter}" if show_counter and counter else ""
    # The stub served 2 × samples requests (direct and proxied), the proxy `samples`.
    stub_cpu = (_cpu_ms(stub_pid) - cpu_before[0]) / (2 * samples)
    proxy_cpu = (_cpu_ms(proxy_pid) - cpu_before[1]) / samples
    return direct_ms, proxy_ms, method, proxy_cpu, stub_cpu


def _ttfb(client: httpx.Client, url: str, body: bytes) -> float:
    started = time.perf_counter()
    with client.stream("POST", f"{url}/chat/completions", content=body,
                       headers={"content-type": "application/json"}) as response:
        first = 0.0
        for _ in response.iter_raw():
            if not first:
                first = time.perf_counter()
    return (first - started) * 1000


async def _streams(url: str, body: bytes, concurrency: int, rounds: int) -> float:
    """Completed streams per second with ``concurrency`` streams at a time."""
    limits = httpx.Limits(max_connections=concurrency + 10)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one() -> None:
            async with client.stream("POST", f"{url}/chat/completions", content=body,
                                     headers={"content-type": "application/json"}) as r:
                async for _ in r.aiter_raw():
                    pass
                if r.status_code != 200:
                    raise RuntimeError(f"stream answered {r.status_code}")

        started = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(one() for _ in range(concurrency)))
        return concurrency * rounds / (time.perf_counter() - started)


def _tokens(messages: list[dict[str, Any]]) -> int:
    from ctxstack import ChatMessage
    from ctxstack.tokens import DEFAULT_COUNTER

    return DEFAULT_COUNTER.count_messages([ChatMessage.from_openai(m) for m in messages])


def _fills() -> int:
    """What the proxy fills for SMALL_MODEL (no known tokenizer): the budget less the
    heuristic's margin."""
    from ctxstack.tokens import DEFAULT_COUNTER
    from ctxstack.tokens._counter import effective_budget

    return effective_budget(SMALL_BUDGET, DEFAULT_COUNTER)


def _growing(client: httpx.Client, stub: str, proxy: str, requests: int,
             ) -> tuple[int, int, int]:
    """(summariser calls, overflows, requests over budget) of a growing conversation."""
    from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION

    client.delete(f"{stub}/_stub/requests")
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a planner."}]
    sent: list[list[dict[str, Any]]] = []
    for turn in range(requests):
        history.append({"role": "user", "content": f"Turn {turn}: {FILLER}"})
        sent.append(list(history))
        response = client.post(f"{proxy}/v1/chat/completions",
                               json={"model": SMALL_MODEL, "messages": history})
        response.raise_for_status()
        history.append({"role": "assistant",
                        "content": response.json()["choices"][0]["message"]["content"]})
    recorded = client.get(f"{stub}/_stub/requests").json()["requests"]
    summaries = chats = 0
    forwarded: list[list[dict[str, Any]]] = []
    for item in recorded:
        if item["path"] != "/v1/chat/completions" or not item["json"]:
            continue
        messages = item["json"]["messages"]
        system = messages[0].get("content") or ""
        if isinstance(system, str) and system.rstrip().endswith(LANGUAGE_INSTRUCTION):
            summaries += 1
        else:
            chats += 1
            forwarded.append(messages)
    overflows = over_budget = 0
    fills = _fills()
    for k, mine in enumerate(sent):
        over_budget += _tokens(mine) > fills
        grown = _tokens(mine) if k == 0 else (
            _tokens(forwarded[k - 1]) + _tokens(mine[len(sent[k - 1]):]))
        overflows += grown > fills
    return summaries, overflows, over_budget


def _set_small_budget(db_url: str) -> None:
    from ctxstack.store import create_engine_from_url, session_factory, upgrade
    from ctxstack.store.model_configs import set_model_config

    async def go() -> None:
        engine = create_engine_from_url(db_url)
        try:
            await upgrade(engine)
            await set_model_config(session_factory(engine), "main", SMALL_MODEL,
                                   context_size=SMALL_BUDGET + 1_000, max_output_tokens=1_000)
        finally:
            await engine.dispose()

    asyncio.run(go())


def _added_row(name: str, d: list[float], p: list[float], q: float, target: float | None,
               ) -> BenchRow:
    # Paired: each proxied request minus the direct one sent just before it, so both saw
    # the same moment of machine load; then the quantile of those differences.
    diffs = [b - a for a, b in zip(d, p, strict=True)]
    value = statistics.median(diffs) if q == 0.5 else _pct(diffs, q)
    base = statistics.median(d) if q == 0.5 else _pct(d, q)
    return BenchRow(name, value, "ms", baseline=base,
                    ratio=(base + value) / base if base else None,
                    target=f"≤ {target:g} ms" if target is not None else "",
                    met=value <= target if target is not None else None)


EXACT_MODEL = "gpt-4o"


def _exact_rows(client: httpx.Client, stub: str, proxy: str, pids: tuple[int, int],
                samples: int, long_count: int) -> list[BenchRow]:
    """The within-budget and checkpoint-hit rows again, for a model counted exactly."""
    from benchmarks.vocab import ensure_offline

    reason = ensure_offline("o200k_base")
    if reason is not None:
        print(f"bench_proxy: o200k_base not available offline ({reason}); the proxy "
              "counts gpt-4o with the heuristic", file=sys.stderr)
    short = _history(10, EXACT_MODEL)
    long = _history(long_count, EXACT_MODEL)
    client.post(f"{proxy}/v1/chat/completions", content=long,
                headers={"content-type": "application/json"})  # writes the checkpoint
    for _ in range(20):  # warm like the other model's path (vocabulary loaded, memo filled)
        client.post(f"{proxy}/v1/chat/completions", content=short,
                    headers={"content-type": "application/json"})
    short_d, short_p, short_m, short_cpu, _ = _added(
        client, f"{stub}/v1", f"{proxy}/v1", short, samples, pids, show_counter=True)
    long_d, long_p, long_m, long_cpu, _ = _added(
        client, f"{stub}/v1", f"{proxy}/v1", long, max(4, samples // 4), pids,
        show_counter=True)
    return [
        _added_row(f"added latency p50, 10 msgs, {EXACT_MODEL} ({short_m})", short_d, short_p,
                   0.5, 5.0),
        _added_row(f"added latency p50, {long_count:,} msgs, {EXACT_MODEL} ({long_m})",
                   long_d, long_p, 0.5, 15.0),
        BenchRow(f"proxy CPU per request, 10 msgs, {EXACT_MODEL}", short_cpu, "ms"),
        BenchRow(f"proxy CPU per request, {long_count:,} msgs, {EXACT_MODEL}", long_cpu, "ms"),
    ]


def run(quick: bool) -> list[BenchRow]:
    """Measure (see the module docstring) and return the rows."""
    smoke = os.environ.get("CTXSTACK_BENCH_SMOKE") == "1"
    samples = 8 if smoke else (40 if quick else 200)
    long_count = 2_000
    rounds = 1 if smoke else (2 if quick else 5)
    growing = 30 if smoke else 100
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db_url = f"sqlite+aiosqlite:///{work / 'proxy.db'}"
        _set_small_budget(db_url)
        stub_port, proxy_port = _free_port(), _free_port()
        stub = f"http://127.0.0.1:{stub_port}"
        proxy = f"http://127.0.0.1:{proxy_port}"
        with _process(["stub-llm", "--port", str(stub_port)], _env({}),
                      f"{stub}/v1/models", work / "stub.log") as stub_pid, \
                _process(["proxy", "--upstream", f"{stub}/v1", "--port", str(proxy_port),
                          "--log-level", "warning"],
                         _env({"CTXSTACK_DATABASE_URL": db_url, "LLM_API_KEY": "bench"}),
                         f"{proxy}/ctxstack/health", work / "proxy.log") as proxy_pid, \
                httpx.Client(timeout=120) as client:
            pids = (stub_pid, proxy_pid)
            short = _history(10, "stub-model")
            long = _history(long_count, "stub-model")
            client.post(f"{proxy}/v1/chat/completions", content=long,
                        headers={"content-type": "application/json"})  # writes the checkpoint
            short_d, short_p, short_m, short_cpu, short_stub_cpu = _added(
                client, f"{stub}/v1", f"{proxy}/v1", short, samples, pids)
            long_d, long_p, long_m, long_cpu, long_stub_cpu = _added(
                client, f"{stub}/v1", f"{proxy}/v1", long, max(4, samples // 4), pids)
            stream_body = _history(10, "stub-model", stream=True)
            ttfb_d, ttfb_p = [], []
            for _ in range(samples):
                ttfb_d.append(_ttfb(client, f"{stub}/v1", stream_body))
                ttfb_p.append(_ttfb(client, f"{proxy}/v1", stream_body))
            direct_rate = asyncio.run(_streams(f"{stub}/v1", stream_body, 50, rounds))
            proxy_rate = asyncio.run(_streams(f"{proxy}/v1", stream_body, 50, rounds))
            calls, overflows, over_budget = _growing(client, stub, proxy, growing)
            exact_rows = _exact_rows(client, stub, proxy, pids, samples, long_count)

    rows = [
        _added_row(f"added latency p50, 10 msgs ({short_m})", short_d, short_p, 0.5, 5.0),
        _added_row("added latency p99, 10 msgs", short_d, short_p, 0.99, None),
        _added_row(f"added latency p50, {long_count:,} msgs ({long_m})", long_d, long_p, 0.5,
                  15.0),
        _added_row(f"added latency p99, {long_count:,} msgs", long_d, long_p, 0.99, None),
        BenchRow("proxy CPU per request, 10 msgs (baseline: the upstream stub's)", short_cpu,
                 "ms", baseline=short_stub_cpu,
                 ratio=short_cpu / short_stub_cpu if short_stub_cpu else None),
        BenchRow(f"proxy CPU per request, {long_count:,} msgs (baseline: the stub's)",
                 long_cpu, "ms", baseline=long_stub_cpu,
                 ratio=long_cpu / long_stub_cpu if long_stub_cpu else None),
        _added_row("added time to first byte p50, streaming 10 msgs", ttfb_d, ttfb_p, 0.5,
                  None),
        BenchRow("streams/s, 50 concurrent (proxied vs direct)", proxy_rate, "stream/s",
                 baseline=direct_rate, ratio=proxy_rate / direct_rate),
        BenchRow(f"summariser calls per {growing} requests of a growing conversation "
                 f"({overflows} overflows; baseline: requests over budget)", calls, "calls",
                 baseline=over_budget, ratio=over_budget / calls if calls else None,
                 target="≤ 1.2 × overflows", met=calls <= 1.2 * overflows),
        *exact_rows,
    ]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, TITLE + (" (quick)" if args.quick else ""))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
