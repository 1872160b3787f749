"""``ctxstack proxy`` on the Chat Completions wire, side by side with a bare forwarder:
added latency, prompt-cache stability, summariser calls, billed input.

Real processes on loopback: for the latency rows a fixed upstream (one canned answer,
the body not parsed, so the figures are the proxies' and not the upstream reading a
bigger or smaller request), a bare forwarder in front of it (:mod:`benchmarks.bare_forwarder`:
reads the body, forwards it, relays the answer — the least any proxy does) and ``ctxstack
proxy`` in front of it; for the conversation ``ctxstack stub-llm`` (recording what it
receives) behind a second ``ctxstack proxy``. Both proxies use SQLite. Requests go direct,
through the bare forwarder and through the proxy in interleaved triplets, so all three
see the same machine load; an "added" figure is a quantile of the per-triplet differences
proxy − bare forwarder (the baseline column: bare forwarder − direct).

* **added latency within budget** (10 messages, forwarded unchanged), p50 / p99; target
  p50 ≤ 1.5 ms over the bare forwarder;
* **added latency over budget with the session's view reused** (2,000 messages over the
  default 64K budget, one session: the first request computes the view, the measured
  ones extend it), p50 / p99; target p50 ≤ 10 ms;
* **a 60-turn agent conversation past the budget** (``gpt-4o``, counted exactly with
  o200k; budget 16,000 input tokens from a database model config; each turn a question, a
  tool call, a ~300-token tool output and an answer; the history starts just under the
  budget): the **stable-prefix share** of each forwarded request — tokens of its leading
  messages byte-identical to the previous forwarded request's (the tools first), over its
  tokens — median, target ≥ 90%; **every request within budget** by the exact count;
  **summariser calls** against the overflows (a request whose previous forwarded view
  plus the new messages no longer fits), target ≤ 1.2 ×;
* **billed input under prompt caching** (:mod:`benchmarks.pricing`: the prefix identical
  with the previous call at 0.1×, the rest at 1.25×; summariser calls included) for the
  proxy, against forwarding every request unchanged with an unlimited window and against
  truncating every request to the budget (oldest turns dropped).

``--quick`` fewer latency samples; ``CTXSTACK_BENCH_SMOKE`` fewer still and 12 turns.
Run: ``python -m benchmarks.bench_proxy_cache [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
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
from benchmarks.pricing import PricedCall, billed_input

TITLE = "proxy cache stability (Chat Completions: ctxstack proxy vs a bare forwarder)"
ROOT = Path(__file__).resolve().parent.parent
_LAUNCH = ("import ctxstack.cli.proxy, ctxstack.cli.stub\n"
           "from ctxstack.cli import main\nmain()\n")
GROW_MODEL = "gpt-4o"
GROW_BUDGET = 16_000
TURNS = 60
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the "
          "shipping dates; the user wants the plan kept under budget. ")
TOOLS = [{"type": "function", "function": {
    "name": "read_log", "description": "Read a log file of the shipping system",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]}}}]
SYSTEM = "You are the operations assistant of ACME-7. Cite order numbers exactly."


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "FAST_LLM_", "CTXSTACK_"))}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT)
    env.update(extra)
    return env


@contextlib.contextmanager
def _process(cmd: list[str], env: dict[str, str], ready_url: str, log: Path) -> Iterator[int]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[2:4]} did not start: {log.read_text()[-3000:]}")
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


def _history(count: int, model: str) -> bytes:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a planner."}]
    for i in range(count - 2):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Message {i}: {FILLER}"})
    messages.append({"role": "user", "content": "What was the growth figure?"})
    return json.dumps({"model": model, "messages": messages}).encode()


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _triplets(client: httpx.Client, urls: tuple[str, str, str], body: bytes, samples: int,
              headers: dict[str, str]) -> tuple[list[float], list[float], list[float], str]:
    """Wall ms of the same request direct, through the bare forwarder, through the proxy
    (interleaved), and the proxy's compaction method."""
    times: tuple[list[float], list[float], list[float]] = ([], [], [])
    method = ""
    for _ in range(samples):
        for url, into in zip(urls, times, strict=True):
            started = time.perf_counter()
            response = client.post(f"{url}/chat/completions", content=body, headers=headers)
            into.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}: {response.text}")
            if url == urls[2]:
                method = response.headers["x-ctxstack-compaction"].split(";")[0]
    return (*times, method)


def _latency_rows(label: str, direct: list[float], bare: list[float], proxy: list[float],
                  target: float) -> list[BenchRow]:
    over_bare = [p - b for b, p in zip(bare, proxy, strict=True)]
    bare_added = [b - d for d, b in zip(direct, bare, strict=True)]
    p50 = statistics.median(over_bare)
    return [
        BenchRow(f"added latency p50 over the bare forwarder, {label} (baseline: the bare "
                 "forwarder over direct)", p50, "ms", baseline=statistics.median(bare_added),
                 target=f"≤ {target:g} ms", met=p50 <= target),
        BenchRow(f"added latency p99 over the bare forwarder, {label}", _pct(over_bare, 0.99),
                 "ms", baseline=_pct(bare_added, 0.99)),
    ]


# --------------------------------------------------------------------------- growing
def _counter() -> tuple[Any, str]:
    from benchmarks.vocab import ensure_offline
    from ctxstack.proxy.counting import ModelCounters

    reason = ensure_offline("o200k_base")
    counter = ModelCounters().get(GROW_MODEL)
    return counter, (counter.cache_key if reason is None else f"{counter.cache_key} ({reason})")


def _message_tokens(counter: Any, messages: Sequence[dict[str, Any]]) -> list[int]:
    from ctxstack.proxy.request import guard_view

    return [counter.count_message(guard_view(m, i)) for i, m in enumerate(messages)]


def _tools_tokens(counter: Any, tools: Any) -> int:
    return int(counter.count_text(json.dumps(tools, ensure_ascii=False,
                                             separators=(",", ":")))) if tools else 0


def _priced(counter: Any, body: dict[str, Any]) -> PricedCall:
    """One Chat call as prompt units: its tools, then each message."""
    messages = body["messages"]
    tools = body.get("tools") or []
    return PricedCall.of([tools, *messages],
                         [_tools_tokens(counter, tools), *_message_tokens(counter, messages)])


def _turn(t: int) -> list[dict[str, Any]]:
    lines = "".join(f"2026-03-{1 + t % 28:02d} 12:{i:02d}:07 worker-{i % 4} shipped order "
                    f"#A-{1000 + t * 10 + i} (12 units, invoice INV-{t:03d}{i}) ok\n"
                    for i in range(10))
    return [
        {"role": "user", "content": f"Turn {t}: check the shipping log of day {t}."},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{t}", "type": "function",
            "function": {"name": "read_log", "arguments": json.dumps({"path": f"d{t}.log"})}}]},
        {"role": "tool", "tool_call_id": f"call_{t}", "content": lines},
        {"role": "assistant", "content": f"Day {t}: ten orders shipped, all ok."},
        {"role": "user", "content": f"Anything unusual on day {t}?"},
    ]


def _truncated(counter: Any, history: list[dict[str, Any]], fits: int) -> list[dict[str, Any]]:
    """The system prompt and the newest turns that fit (a turn starts at a user message)."""
    counts = _message_tokens(counter, history)
    total = counts[0] + _tools_tokens(counter, TOOLS)
    start = len(history)
    for i in range(len(history) - 1, 0, -1):
        if total + counts[i] > fits:
            break
        total += counts[i]
        if history[i]["role"] == "user":
            start = i
    return [history[0], *history[start:]]


def _growing(client: httpx.Client, stub: str, proxy: str, turns: int) -> list[BenchRow]:
    from ctxstack.proxy.chat_wire import RECALL_TOOL_SPEC
    from ctxstack.tokens._counter import effective_budget

    counter, counter_label = _counter()
    fits = effective_budget(GROW_BUDGET, counter)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    t = 0
    recall_tokens = _tools_tokens(counter, [*TOOLS, RECALL_TOOL_SPEC]) - _tools_tokens(
        counter, TOOLS)
    # Start just under the budget: the measured turns are all past it.
    while sum(_message_tokens(counter, history + _turn(t))) + _tools_tokens(
            counter, TOOLS) + recall_tokens < fits:
        history += _turn(t)
        history.append({"role": "assistant", "content": "Nothing unusual."})
        t += 1
    client.delete(f"{stub}/_stub/requests")
    sent: list[list[dict[str, Any]]] = []
    headers = {"authorization": "Bearer bench", "x-ctxstack-session": "bench-growing"}
    for turn in range(t, t + turns):
        history += _turn(turn)
        sent.append(list(history))
        response = client.post(f"{proxy}/v1/chat/completions", headers=headers,
                               json={"model": GROW_MODEL, "messages": history,
                                     "tools": TOOLS})
        response.raise_for_status()
        history.append({"role": "assistant",
                        "content": response.json()["choices"][0]["message"]["content"]})
    recorded = [r["json"] for r in client.get(f"{stub}/_stub/requests").json()["requests"]
                if r["path"].endswith("/chat/completions") and r["json"]]
    chats = [b for b in recorded if not _is_summary(b)]
    summaries = len(recorded) - len(chats)
    if len(chats) != turns:
        raise RuntimeError(f"expected {turns} forwarded chat requests, got {len(chats)}")
    calls = [_priced(counter, b) for b in recorded]
    chat_calls = [_priced(counter, b) for b in chats]
    shares, over, overflows = [], 0, 0
    for k, call in enumerate(chat_calls):
        over += call.tokens > GROW_BUDGET
        if k:
            from benchmarks.pricing import shared_prefix_tokens

            shares.append(shared_prefix_tokens(chat_calls[k - 1], call) / call.tokens)
            added = _message_tokens(counter, sent[k][len(sent[k - 1]):])
            grown = chat_calls[k - 1].tokens + sum(added)
        else:
            grown = call.tokens
        overflows += grown > fits
    unlimited = billed_input([PricedCall.of([TOOLS, *h], [_tools_tokens(counter, TOOLS),
                                                          *_message_tokens(counter, h)])
                              for h in sent])
    truncating = billed_input([PricedCall.of([TOOLS, *m], [_tools_tokens(counter, TOOLS),
                                                           *_message_tokens(counter, m)])
                               for m in (_truncated(counter, h, fits) for h in sent)])
    proxy_bill = billed_input(calls)
    median_share = statistics.median(shares)
    return [
        BenchRow(f"stable-prefix share of consecutive forwarded requests, median, {turns} "
                 f"turns past a {GROW_BUDGET:,}-token budget ({counter_label})",
                 median_share * 100, "%", target="≥ 90%", met=median_share >= 0.9),
        BenchRow("stable-prefix share, p10", _pct(shares, 0.10) * 100, "%"),
        BenchRow("stable-prefix share, lowest (a recomputed view; the first compaction also "
                 "adds ctxstack_recall to the tools)", min(shares) * 100, "%"),
        BenchRow("forwarded requests over the budget by the exact count", over, "requests",
                 target="0", met=over == 0, invariant=True),
        BenchRow(f"summariser calls in {turns} turns ({overflows} overflows)", summaries,
                 "calls", baseline=overflows, target="≤ 1.2 × overflows",
                 met=summaries <= 1.2 * max(1, overflows)),
        BenchRow("billed input under prompt caching, proxy (baseline: forwarding unchanged, "
                 "unlimited window)", proxy_bill, "tokens", baseline=unlimited,
                 ratio=unlimited / proxy_bill if proxy_bill else None),
        BenchRow("billed input under prompt caching, proxy (baseline: truncating every "
                 "request to the budget)", proxy_bill, "tokens", baseline=truncating,
                 ratio=truncating / proxy_bill if proxy_bill else None),
    ]


def _is_summary(body: dict[str, Any]) -> bool:
    from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION

    messages = body.get("messages") or []
    texts = [m.get("content") for m in messages[:1] + messages[-1:]]
    return any(isinstance(x, str) and x.rstrip().endswith(LANGUAGE_INSTRUCTION) for x in texts)


def _set_budget(db_url: str) -> None:
    from ctxstack.store import create_engine_from_url, session_factory, upgrade
    from ctxstack.store.model_configs import set_model_config

    async def go() -> None:
        engine = create_engine_from_url(db_url)
        try:
            await upgrade(engine)
            await set_model_config(session_factory(engine), "main", GROW_MODEL,
                                   context_size=GROW_BUDGET + 1_000, max_output_tokens=1_000)
        finally:
            await engine.dispose()

    asyncio.run(go())


def run(quick: bool) -> list[BenchRow]:
    """Measure (see the module docstring) and return the rows."""
    smoke = os.environ.get("CTXSTACK_BENCH_SMOKE") == "1"
    samples = 6 if smoke else (40 if quick else 200)
    turns = 12 if smoke else TURNS
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db_url = f"sqlite+aiosqlite:///{work / 'proxy.db'}"
        _set_budget(db_url)
        ports = [_free_port() for _ in range(5)]
        stub, fixed, bare, proxy, grow = (f"http://127.0.0.1:{p}" for p in ports)
        py = sys.executable
        proxy_env = _env({"CTXSTACK_DATABASE_URL": db_url, "LLM_API_KEY": "bench"})
        with _process([py, "-c", _LAUNCH, "stub-llm", "--port", str(ports[0])], _env({}),
                      f"{stub}/v1/models", work / "stub.log"), \
                _process([py, "-m", "benchmarks.bare_forwarder", "--fixed", "--port",
                          str(ports[1])], _env({}), f"{fixed}/health", work / "fixed.log"), \
                _process([py, "-m", "benchmarks.bare_forwarder", "--upstream", f"{fixed}/v1",
                          "--port", str(ports[2])], _env({}), f"{bare}/health",
                         work / "bare.log"), \
                _process([py, "-c", _LAUNCH, "proxy", "--upstream", f"{fixed}/v1", "--port",
                          str(ports[3]), "--log-level", "warning"], proxy_env,
                         f"{proxy}/ctxstack/health", work / "proxy.log"), \
                _process([py, "-c", _LAUNCH, "proxy", "--upstream", f"{stub}/v1", "--port",
                          str(ports[4]), "--log-level", "warning"], proxy_env,
                         f"{grow}/ctxstack/health", work / "grow.log"), \
                httpx.Client(timeout=120) as client:
            urls = (f"{fixed}/v1", f"{bare}/v1", f"{proxy}/v1")
            headers = {"content-type": "application/json", "authorization": "Bearer bench"}
            short = _history(10, "stub-model")
            for _ in range(20):  # warm every process's pools and caches
                for url in urls:
                    client.post(f"{url}/chat/completions", content=short, headers=headers)
            d, b, p, short_m = _triplets(client, urls, short, samples, headers)
            rows = _latency_rows(f"10 msgs within budget ({short_m})", d, b, p, 1.5)
            long = _history(2_000, "stub-model")
            session = {**headers, "x-ctxstack-session": "bench-long"}
            client.post(f"{proxy}/v1/chat/completions", content=long, headers=session)
            d, b, p, long_m = _triplets(client, urls, long, max(4, samples // 4), session)
            rows += _latency_rows(f"2,000 msgs over budget, view reused ({long_m})", d, b, p,
                                  10.0)
            rows += _growing(client, stub, grow, turns)
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
