"""``ctxstack proxy`` on each wire it guards — Chat Completions, Anthropic Messages,
Responses — side by side with a bare forwarder in one run: added latency, prompt-cache
stability, summariser calls, billed input.

One driver for the three wires (:mod:`benchmarks.proxy_wires`: a wire builds its request
from a conversation, reads what the stub recorded, splits a body into the prompt units
its provider renders). Every conversation is **synthetic** (generated here: filler text
for the latency rows, a generated agent log-reading session for the rest), not recorded
traffic. Real processes on loopback: for the latency rows a fixed upstream (one canned
answer per wire, the body not parsed, so the figures are the proxies' and not the
upstream reading a bigger or smaller request), a bare forwarder in front of it
(:mod:`benchmarks.bare_forwarder`: reads the body, forwards it, relays the answer — the
least any proxy does) and ``ctxstack proxy`` in front of it; for the conversations
``ctxstack stub-llm`` (recording what it receives; a fixed ``--reply``, so a summary never
echoes the summariser's instruction) behind a second ``ctxstack proxy``. Both proxies use
SQLite. Requests go direct, through the bare forwarder and through the proxy in
interleaved triplets, so all three see the same machine load; an "added" figure is a
quantile of the per-triplet differences proxy − bare forwarder (the baseline column: bare
forwarder − direct).

Per wire:

* **added latency within budget** (10 messages, forwarded unchanged), p50 / p99; target
  p50 ≤ 1.5 ms over the bare forwarder;
* **added latency over budget with the session's view reused** (2,000 messages over the
  default 64K budget, one session: the first request computes the view, the measured
  ones extend it), p50 / p99; target p50 ≤ 10 ms;
* **a 60-turn agent conversation past the budget** (budget 16,000 input tokens from a
  database model config; each turn a question, a ``read_log`` tool call, a ~300-token
  tool output, an answer and a follow-up question; the history starts just under the
  budget). Chat and Responses name ``gpt-4o``, counted exactly by the proxy with o200k;
  Anthropic names a Claude model, which the proxy counts with its heuristic (no Claude
  tokenizer is available offline) and fills to the budget less its margin. The **stable-
  prefix share** of each forwarded request — tokens of its leading prompt units
  byte-identical to the previous forwarded request's, in the wire's own order and JSON
  (Chat: tools, messages; Anthropic: tools, ``system``, messages; Responses:
  ``instructions``, tools, input items), each unit's JSON counted with o200k — over its
  tokens: median, target ≥ 90%; **every request within budget** by the proxy's own count
  of the forwarded body (an invariant: the proxy guarantees it); **summariser calls**
  against the overflows (a request whose previous forwarded request plus the new
  messages no longer fits), target ≤ 1.2 ×;
* **billed input under prompt caching** (:mod:`benchmarks.pricing`: the prefix identical
  with the previous call at 0.1×, the rest at 1.25×; summariser calls included) for the
  proxy, against forwarding every request unchanged with an unlimited window and against
  truncating every request to the budget (oldest turns dropped).

``--quick`` fewer latency samples; ``CTXSTACK_BENCH_SMOKE`` fewer still and 12 turns;
``--wire chat|anthropic|responses`` (repeatable) measures only those.
Run: ``python -m benchmarks.bench_proxy_cache [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import BenchRow, print_table
from benchmarks.pricing import PricedCall, billed_input, shared_prefix_tokens
from benchmarks.proxy_wires import WIRES, ChatWire, Wire, dumps, is_summary

TITLE = ("proxy cache stability per wire (Chat Completions, Anthropic Messages, Responses: "
         "ctxstack proxy vs a bare forwarder)")
ROOT = Path(__file__).resolve().parent.parent
_LAUNCH = ("import ctxstack.cli.proxy, ctxstack.cli.stub\n"
           "from ctxstack.cli import main\nmain()\n")
GROW_BUDGET = 16_000
GROW_MODELS = {"Chat Completions": "gpt-4o", "Anthropic Messages": "claude-sonnet-4-5",
               "Responses": "gpt-4o"}
LATENCY_MODEL = "stub-model"
TURNS = 60
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the "
          "shipping dates; the user wants the plan kept under budget. ")
REPLY = ("Summary so far: the user checks the shipping log of one day per turn; every day "
         "had ten orders shipped, all ok, invoices as logged; nothing unusual was found.")
"""The stub's every answer (the summaries included)."""
WIRE_FLAGS = {"chat": "Chat Completions", "anthropic": "Anthropic Messages",
              "responses": "Responses"}


@dataclass
class WireResult:
    """What one wire measured (for the side-by-side table)."""

    figures: dict[str, str] = field(default_factory=dict)


_LAST: dict[str, WireResult] = {}


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


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --------------------------------------------------------------------------- latency
def _filler(wire: Wire, count: int) -> bytes:
    """``count`` messages in all (the system prompt included): alternating filler texts,
    then a question (synthetic)."""
    history = [wire.text("user" if i % 2 == 0 else "assistant", f"Message {i}: {FILLER}")
               for i in range(count - 2)]
    history.append(wire.text("user", "What was the growth figure?"))
    return dumps(wire.body(LATENCY_MODEL, history)).encode()


def _triplets(client: httpx.Client, wire: Wire, bases: tuple[str, str, str], body: bytes,
              samples: int, headers: dict[str, str],
              ) -> tuple[list[float], list[float], list[float], str]:
    """Wall ms of the same request direct, through the bare forwarder, through the proxy
    (interleaved), and the proxy's compaction method."""
    times: tuple[list[float], list[float], list[float]] = ([], [], [])
    method = ""
    for _ in range(samples):
        for base, into in zip(bases, times, strict=True):
            started = time.perf_counter()
            response = client.post(f"{base}{wire.path}", content=body, headers=headers)
            into.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{base}{wire.path} answered {response.status_code}: "
                                   f"{response.text[:2000]}")
            if base == bases[2]:
                # method=checkpoint: the session's stored view extended (session_fit).
                method = response.headers.get("x-ctxstack-compaction", "").split(";")[0]
    return (*times, method)


def _latency_rows(wire: Wire, label: str, direct: list[float], bare: list[float],
                  proxy: list[float], target: float) -> list[BenchRow]:
    over_bare = [p - b for b, p in zip(bare, proxy, strict=True)]
    bare_added = [b - d for d, b in zip(direct, bare, strict=True)]
    p50 = statistics.median(over_bare)
    p99 = _pct(over_bare, 0.99)
    figures = _LAST.setdefault(wire.name, WireResult()).figures
    figures[f"added p50 / p99, {label.split(' (')[0]}"] = f"{p50:.2f} / {p99:.2f} ms"
    return [
        BenchRow(f"{wire.name}: added latency p50 over the bare forwarder, {label} "
                 "(baseline: the bare forwarder over direct)", p50, "ms",
                 baseline=statistics.median(bare_added), target=f"≤ {target:g} ms",
                 met=p50 <= target),
        BenchRow(f"{wire.name}: added latency p99 over the bare forwarder, {label}", p99,
                 "ms", baseline=_pct(bare_added, 0.99)),
    ]


def _cpu_ms(pid: int) -> float:
    """CPU time (user + system) a process has used so far, in ms (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _latency(client: httpx.Client, wire: Wire, bases: tuple[str, str, str],
             samples: int, pids: tuple[int, int]) -> list[BenchRow]:
    headers = wire.headers()
    short = _filler(wire, 10)
    for _ in range(20):  # warm every process's pools and caches
        for base in bases:
            client.post(f"{base}{wire.path}", content=short, headers=headers)
    d, b, p, short_m = _triplets(client, wire, bases, short, samples, headers)
    rows = _latency_rows(wire, f"10 msgs within budget ({short_m}; synthetic filler)",
                         d, b, p, 1.5)
    long = _filler(wire, 2_000)
    session = wire.headers(f"bench-long-{wire.path}")
    first = client.post(f"{bases[2]}{wire.path}", content=long, headers=session)
    first.raise_for_status()
    count = max(4, samples // 4)
    before = [_cpu_ms(pid) for pid in pids]
    d, b, p, long_m = _triplets(client, wire, bases, long, count, session)
    bare_cpu, proxy_cpu = ((_cpu_ms(pid) - start) / count
                           for pid, start in zip(pids, before, strict=True))
    rows += _latency_rows(wire, f"2,000 msgs over budget, view reused ({long_m}; synthetic "
                          "filler)", d, b, p, 10.0)
    _LAST[wire.name].figures["proxy CPU per request, 2,000 msgs over budget (bare "
                             "forwarder's)"] = f"{proxy_cpu:.1f} ms ({bare_cpu:.1f} ms)"
    # CPU time does not wait for the other processes on a busy machine, as wall time does.
    rows.append(BenchRow(f"{wire.name}: proxy CPU per request, 2,000 msgs over budget, view "
                         "reused (baseline: the bare forwarder's CPU for the same request; "
                         f"{os.sysconf('SC_CLK_TCK')} Hz ticks)", proxy_cpu, "ms",
                         baseline=bare_cpu))
    return rows


# --------------------------------------------------------------------------- growing
def _tape() -> tuple[Any, str]:
    """The counter every wire's prompt units are measured with: o200k (offline)."""
    from benchmarks.vocab import ensure_offline
    from ctxstack.proxy.counting import ModelCounters

    reason = ensure_offline("o200k_base")
    counter = ModelCounters().get("gpt-4o")
    return counter, (counter.cache_key if reason is None else f"{counter.cache_key} ({reason})")


def _turn(wire: Wire, t: int) -> list[dict[str, Any]]:
    """One synthetic turn: a question, a ``read_log`` call with its ~300-token output, an
    answer, a follow-up question."""
    lines = "".join(f"2026-03-{1 + t % 28:02d} 12:{i:02d}:07 worker-{i % 4} shipped order "
                    f"#A-{1000 + t * 10 + i} (12 units, invoice INV-{t:03d}{i}) ok\n"
                    for i in range(10))
    return [wire.text("user", f"Turn {t}: check the shipping log of day {t}."),
            *wire.tool_exchange(f"call_{t}", f"d{t}.log", lines),
            wire.text("assistant", f"Day {t}: ten orders shipped, all ok."),
            wire.text("user", f"Anything unusual on day {t}?")]


def _truncated(wire: Wire, counter: Any, model: str, history: list[dict[str, Any]],
               fits: int) -> list[dict[str, Any]]:
    """The newest turns that fit ``fits`` with the system prompt and tools (a turn starts
    at a user's own message): the shortest such suffix found by bisection."""
    starts = [i for i, m in enumerate(history) if wire.starts_turn(m)]
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if wire.proxy_tokens(wire.body(model, history[starts[mid]:]), counter) <= fits:
            hi = mid
        else:
            lo = mid + 1
    return history[starts[lo]:]


def _growing(client: httpx.Client, stub: str, proxy: str, wire: Wire,
             turns: int) -> list[BenchRow]:
    from ctxstack.proxy.counting import ModelCounters
    from ctxstack.tokens._counter import effective_budget

    model = GROW_MODELS[wire.name]
    counter = ModelCounters().get(model)
    tape, tape_label = _tape()
    fits = effective_budget(GROW_BUDGET, counter)
    chat = ChatWire()

    def priced(body: dict[str, Any], by: Wire) -> PricedCall:
        units = by.units(body)
        return PricedCall.of(units, [tape.count_text(dumps(u)) for u in units])

    def tokens(history: list[dict[str, Any]]) -> int:
        return wire.proxy_tokens(wire.body(model, history), counter)

    history: list[dict[str, Any]] = []
    t = 0
    # Start just under the budget (ctxstack_recall's tokens included): the measured turns
    # are all past it.
    while wire.proxy_tokens(wire.with_recall(wire.body(model, history + _turn(wire, t))),
                            counter) < fits:
        history += _turn(wire, t)
        history.append(wire.text("assistant", "Nothing unusual."))
        t += 1
    client.delete(f"{stub}/_stub/requests")
    sent: list[list[dict[str, Any]]] = []
    session = wire.headers(f"bench-growing-{wire.path}")
    for turn in range(t, t + turns):
        history += _turn(wire, turn)
        sent.append(list(history))
        response = client.post(f"{proxy}{wire.path}", headers=session,
                               content=dumps(wire.body(model, history)).encode())
        if response.status_code != 200:
            raise RuntimeError(f"{wire.name}: the proxy answered {response.status_code}: "
                               f"{response.text[:2000]}")
        history += wire.answer(response.json())
    recorded = client.get(f"{stub}/_stub/requests").json()["requests"]
    bodies = [(r["path"], r["json"]) for r in recorded if r["json"]]
    forwarded = [b for path, b in bodies if path == wire.path and not is_summary(b)]
    summaries = [(path, b) for path, b in bodies if is_summary(b)]
    if len(forwarded) != turns:
        raise RuntimeError(f"{wire.name}: expected {turns} forwarded requests, got "
                           f"{len(forwarded)}")
    calls = [priced(b, wire) for b in forwarded]
    shares: list[float] = []
    over = overflows = 0
    for k, call in enumerate(calls):
        over += wire.proxy_tokens(forwarded[k], counter) > GROW_BUDGET
        if k:
            shares.append(shared_prefix_tokens(calls[k - 1], call) / call.tokens)
            grown = wire.proxy_tokens(forwarded[k - 1], counter) + tokens(sent[k]) - tokens(
                sent[k - 1])
        else:
            grown = tokens(sent[0])
        overflows += grown > fits
    unlimited = billed_input([priced(wire.body(model, h), wire) for h in sent])
    truncating = billed_input([priced(wire.body(model, _truncated(wire, counter, model, h,
                                                                 fits)), wire)
                               for h in sent])
    # Every call in the order the upstream received it, the summaries included (a
    # summary continuing the conversation's prefix reads it from the cache).
    proxy_bill = billed_input([priced(b, wire if path == wire.path else chat)
                               for path, b in bodies
                               if path == wire.path or is_summary(b)])
    median_share = statistics.median(shares)
    figures = _LAST.setdefault(wire.name, WireResult()).figures
    figures["stable-prefix share median / p10 / lowest"] = (
        f"{median_share * 100:.1f}% / {_pct(shares, 0.10) * 100:.1f}% / "
        f"{min(shares) * 100:.1f}%")
    figures["forwarded over the budget"] = f"{over} of {turns}"
    figures["summariser calls / overflows"] = f"{len(summaries)} / {overflows}"
    figures["billed input: proxy / unlimited / truncating"] = (
        f"{proxy_bill:,.0f} / {unlimited:,.0f} / {truncating:,.0f}")
    label = f"{turns} turns past a {GROW_BUDGET:,}-token budget, {model} counted by " \
            f"{counter.cache_key}; units measured by {tape_label}; synthetic agent session"
    return [
        BenchRow(f"{wire.name}: stable-prefix share of consecutive forwarded requests, "
                 f"median ({label})", median_share * 100, "%", target="≥ 90%",
                 met=median_share >= 0.9),
        BenchRow(f"{wire.name}: stable-prefix share, p10", _pct(shares, 0.10) * 100, "%"),
        BenchRow(f"{wire.name}: stable-prefix share, lowest (a recomputed view; the first "
                 "compaction also adds ctxstack_recall to the tools)", min(shares) * 100, "%"),
        BenchRow(f"{wire.name}: forwarded requests over the budget by the proxy's count "
                 f"({counter.cache_key})", over, "requests", target="0", met=over == 0,
                 invariant=True),
        BenchRow(f"{wire.name}: summariser calls in {turns} turns ({overflows} overflows)",
                 len(summaries), "calls", baseline=overflows, target="≤ 1.2 × overflows",
                 met=len(summaries) <= 1.2 * max(1, overflows)),
        BenchRow(f"{wire.name}: billed input under prompt caching, proxy (summaries "
                 "included; baseline: forwarding unchanged, unlimited window)",
                 proxy_bill, "tokens", baseline=unlimited,
                 ratio=unlimited / proxy_bill if proxy_bill else None),
        BenchRow(f"{wire.name}: billed input under prompt caching, proxy (baseline: "
                 "truncating every request to the budget)", proxy_bill, "tokens",
                 baseline=truncating,
                 ratio=truncating / proxy_bill if proxy_bill else None),
    ]


def _set_budgets(db_url: str) -> None:
    from ctxstack.store import create_engine_from_url, session_factory, upgrade
    from ctxstack.store.model_configs import set_model_config

    async def go() -> None:
        engine = create_engine_from_url(db_url)
        try:
            await upgrade(engine)
            # One active configuration per role: the two model names take one each (the
            # proxy reads a model's budget from whichever row names it).
            for role, model in (("main", "gpt-4o"), ("fast", "claude-sonnet-4-5")):
                await set_model_config(session_factory(engine), role, model,
                                       context_size=GROW_BUDGET + 1_000,
                                       max_output_tokens=1_000)
        finally:
            await engine.dispose()

    asyncio.run(go())


def run(quick: bool, wires: Sequence[str] | None = None) -> list[BenchRow]:
    """Measure (see the module docstring) and return the rows (``wires``: names of
    :data:`WIRE_FLAGS` to measure, all by default)."""
    smoke = os.environ.get("CTXSTACK_BENCH_SMOKE") == "1"
    samples = 6 if smoke else (40 if quick else 200)
    turns = 12 if smoke else TURNS
    chosen = [w for w in WIRES if wires is None or w.name in {WIRE_FLAGS[x] for x in wires}]
    _LAST.clear()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db_url = f"sqlite+aiosqlite:///{work / 'proxy.db'}"
        _set_budgets(db_url)
        ports = [_free_port() for _ in range(5)]
        stub, fixed, bare, proxy, grow = (f"http://127.0.0.1:{p}" for p in ports)
        py = sys.executable
        proxy_env = _env({"CTXSTACK_DATABASE_URL": db_url, "LLM_API_KEY": "bench"})
        with _process([py, "-c", _LAUNCH, "stub-llm", "--port", str(ports[0]), "--reply",
                       REPLY], _env({}), f"{stub}/v1/models", work / "stub.log"), \
                _process([py, "-m", "benchmarks.bare_forwarder", "--fixed", "--port",
                          str(ports[1])], _env({}), f"{fixed}/health", work / "fixed.log"), \
                _process([py, "-m", "benchmarks.bare_forwarder", "--upstream", f"{fixed}/v1",
                          "--port", str(ports[2])], _env({}), f"{bare}/health",
                         work / "bare.log") as bare_pid, \
                _process([py, "-c", _LAUNCH, "proxy", "--upstream", f"{fixed}/v1",
                          "--anthropic-upstream", fixed, "--port", str(ports[3]),
                          "--log-level", "warning"], proxy_env,
                         f"{proxy}/ctxstack/health", work / "proxy.log") as proxy_pid, \
                _process([py, "-c", _LAUNCH, "proxy", "--upstream", f"{stub}/v1",
                          "--anthropic-upstream", stub, "--port", str(ports[4]),
                          "--log-level", "warning"], proxy_env,
                         f"{grow}/ctxstack/health", work / "grow.log"), \
                httpx.Client(timeout=120) as client:
            rows: list[BenchRow] = []
            for wire in chosen:
                rows += _latency(client, wire, (fixed, bare, proxy), samples,
                                 (bare_pid, proxy_pid))
            for wire in chosen:
                rows += _growing(client, stub, grow, wire, turns)
    return rows


def report_markdown(quick: bool) -> str:
    """The figures of the three wires side by side (from the last :func:`run`)."""
    if not _LAST:
        return ""
    names = list(_LAST)
    keys: list[str] = []
    for result in _LAST.values():
        keys += [k for k in result.figures if k not in keys]
    lines = ["Side by side (the rows above, per wire; all conversations synthetic):", "",
             "| figure | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(_LAST[n].figures.get(key, "—")
                                               for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--wire", action="append", choices=sorted(WIRE_FLAGS),
                        help="measure only this wire (repeatable)")
    args = parser.parse_args(argv)
    rows = run(args.quick, args.wire)
    print_table(rows, TITLE + (" (quick)" if args.quick else ""))
    print(report_markdown(args.quick))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
