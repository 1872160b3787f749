"""Chat service throughput and overhead, against a stub LLM with a fixed latency.

A real ``ctxstack serve`` process (one worker, PostgreSQL when reachable, else SQLite)
answers turns whose every model call takes a fixed ``LATENCY`` at the stub. Measured:

* turns/s with 50 conversations × 10 turns running concurrently, next to the ideal rate
  if the service added nothing (concurrency ÷ model time per turn);
* the service's own time per turn — the turn's wall time minus the time spent waiting
  on the model (``done.elapsed - done.llm_seconds``, measured inside the server) — p50/p99;
* that overhead for a 10-message versus a 2,000-message conversation, turns run one at a
  time (target ≤ 2×: DbMemory loads from the newest checkpoint, so a long history costs
  one summarisation, not a load proportional to its length on every turn). Measured at
  the default 64k budget and at a 16k one: after a checkpoint the verbatim part of the
  history still fills up to ~60% of the budget, so at 64k the long conversation's every
  request carries ~900 messages against the short one's 10 — that part of the cost grows
  with the budget, not with the conversation's length.

``--quick`` runs a much smaller version (8 × 3 turns, a 400-message history);
``--history-only`` measures only the 10- versus long-conversation rows (to compare
builds of the history path quickly, e.g. before/after a change on the same machine).
Run: ``python -m benchmarks.bench_service [--quick] [--history-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import BenchRow, print_table

ROOT = Path(__file__).resolve().parent.parent
LATENCY = 0.05  # seconds per model call at the stub
PG_URL = os.environ.get("CTXSTACK_TEST_POSTGRES_URL",
                        "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
_LAUNCH = "import ctxstack.cli.serve\nfrom ctxstack.cli import main\nmain()\n"
FILLER = ("We compared the quarterly figures, the 3.2% growth, order #A-1042 and the "
          "shipping dates; the user wants the plan kept under budget. ")


def _rule(request: Any) -> Any:
    """Every role a turn needs, each answered after ``LATENCY`` seconds."""
    from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION
    from ctxstack.llm.stub import StubReply

    system = "\n".join(m.text for m in request.messages if m.role == "system")
    last = request.messages[-1] if request.messages else None
    if system.rstrip().endswith(LANGUAGE_INSTRUCTION) or (  # transcript or cache-aligned
            last is not None and last.role == "user"
            and last.text.rstrip().endswith(LANGUAGE_INSTRUCTION)):
        return StubReply.text("Summary: figures compared, growth 3.2%, order #A-1042.",
                              delay=LATENCY)
    if request.tools:
        last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
        if not any(m.role == "tool" for m in request.messages[last_user:]):
            return StubReply.tool_call("calculate", {"expression": "6*7"}, delay=LATENCY)
        return StubReply.text("Brief: 42.", delay=LATENCY)
    return StubReply.text("The answer is 42. " * 20, chunk_size=40, delay=LATENCY)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _database(workdir: Path) -> Iterator[tuple[dict[str, str], str]]:
    """PostgreSQL in a fresh schema when reachable, else a SQLite file."""
    import asyncpg

    schema = f"bench_{secrets.token_hex(5)}"
    dsn = PG_URL.replace("postgresql+asyncpg://", "postgresql://")

    async def execute(sql: str) -> None:
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(execute(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:
        print(f"PostgreSQL not reachable ({exc}); measuring on SQLite instead", file=sys.stderr)
        yield {"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'bench.db'}"}, "SQLite"
        return
    try:
        yield {"CTXSTACK_DATABASE_URL": PG_URL, "CTXSTACK_DATABASE_SCHEMA": schema}, "PostgreSQL"
    finally:
        asyncio.run(execute(f'DROP SCHEMA "{schema}" CASCADE'))


@contextlib.contextmanager
def _serve(workdir: Path, env_extra: dict[str, str], workers: int = 1) -> Iterator[str]:
    """``ctxstack serve`` (no auth) of this checkout on a free port with ``env_extra`` and
    none of the caller's ``LLM_*`` / ``CTXSTACK_*`` variables; yields its URL once it answers."""
    with serve_process(ROOT, workdir, env_extra, workers) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(root: Path, workdir: Path, env_extra: dict[str, str],
                  workers: int = 1) -> Iterator[tuple[str, int]]:
    """:func:`_serve` of the checkout at ``root`` (its ``src`` first on the path: another
    build can be served beside this one); yields its URL and process id."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LLM_", "FAST_LLM_", "CTXSTACK_"))}
    env.update(env_extra)
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + str(root)
    log_path = workdir / f"serve-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, "serve", "--port", str(port), "--no-auth",
             "--workers", str(workers), "--log-level", "warning"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ctxstack serve ({root}) did not start: "
                                   + log_path.read_text()[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/info", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass
class TurnTiming:
    elapsed: float
    llm_seconds: float

    @property
    def overhead(self) -> float:
        return max(0.0, self.elapsed - self.llm_seconds)


async def _turn(client: httpx.AsyncClient, cid: str, query: str) -> TurnTiming:
    async with client.stream("POST", "/api/chat",
                             json={"conversation_id": cid, "query": query}) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"chat answered {response.status_code}: {response.text}")
        return await _done_timing(response.aiter_lines())


async def _done_timing(lines: AsyncIterator[str]) -> TurnTiming:
    """The server's own timings from a chat turn's event stream (its ``done`` event)."""
    event = ""
    async for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event in ("done", "error"):
            data = json.loads(line[5:])
            if event == "error":
                raise RuntimeError(f"turn failed: {data}")
            return TurnTiming(float(data["elapsed"]), float(data["llm_seconds"]))
    raise RuntimeError("the stream ended without done")


async def _conversation(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/conversations", json={})
    response.raise_for_status()
    return str(response.json()["id"])


async def _concurrent(url: str, conversations: int, turns: int) -> tuple[float, list[TurnTiming]]:
    limits = httpx.Limits(max_connections=conversations + 10)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        ids = [await _conversation(client) for _ in range(conversations)]

        async def talk(cid: str) -> list[TurnTiming]:
            return [await _turn(client, cid, f"Turn {t}: what is 6*7?") for t in range(turns)]

        started = time.perf_counter()
        results = await asyncio.gather(*(talk(cid) for cid in ids))
        wall = time.perf_counter() - started
    return wall, [t for r in results for t in r]


async def _fill(env: dict[str, str], cid: str, count: int) -> None:
    """Append ``count`` alternating user/assistant messages straight into the store."""
    from ctxstack.store import NewMessage, append_messages, create_engine_from_url
    from ctxstack.store.db import session_factory

    engine = create_engine_from_url(env["CTXSTACK_DATABASE_URL"],
                                    schema=env.get("CTXSTACK_DATABASE_SCHEMA"))
    try:
        factory = session_factory(engine)
        batch: list[NewMessage] = []
        for i in range(count):
            role = "user" if i % 2 == 0 else "assistant"
            batch.append(NewMessage(role=role, content=f"Message {i}: {FILLER}"))
            if len(batch) == 200:
                await append_messages(factory, cid, batch)
                batch = []
        if batch:
            await append_messages(factory, cid, batch)
    finally:
        await engine.dispose()


async def _history_overhead(url: str, env: dict[str, str], long_count: int, turns: int,
                            context_size: int | None) -> tuple[list[TurnTiming], list[TurnTiming]]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        if context_size is not None:  # the admin model config is the first budget source
            response = await client.put("/api/admin/model-configs/main", json={
                "model": "stub-model", "context_size": context_size,
                "max_output_tokens": context_size // 2})
            response.raise_for_status()
        short, long = await _conversation(client), await _conversation(client)
        await _fill(env, short, 10)
        await _fill(env, long, long_count)
        # The first turn of each pays the one summarisation and writes the checkpoint.
        await _turn(client, short, "warm up")
        await _turn(client, long, "warm up")
        short_t, long_t = [], []
        for t in range(turns):
            short_t.append(await _turn(client, short, f"Question {t}: what is 6*7?"))
            long_t.append(await _turn(client, long, f"Question {t}: what is 6*7?"))
    return short_t, long_t


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _throughput_rows(wall: float, timings: list[TurnTiming], conversations: int,
                     turns: int, db_name: str) -> list[BenchRow]:
    total = len(timings)
    llm_per_turn = statistics.median(t.llm_seconds for t in timings)
    ideal = conversations / llm_per_turn
    rate = total / wall
    overheads = [t.overhead * 1000 for t in timings]
    label = f"{conversations} conv × {turns} turns, {db_name}, {LATENCY * 1000:.0f} ms/call"
    return [
        BenchRow(f"turns/s ({label})", rate, "turn/s", baseline=ideal,
                 ratio=rate / ideal, target="", met=None),
        BenchRow("server overhead per turn, p50 (vs model time)", statistics.median(overheads),
                 "ms", baseline=llm_per_turn * 1000,
                 ratio=statistics.median(overheads) / (llm_per_turn * 1000)),
        BenchRow("server overhead per turn, p99 (vs model time)", _pct(overheads, 0.99), "ms",
                 baseline=llm_per_turn * 1000,
                 ratio=_pct(overheads, 0.99) / (llm_per_turn * 1000)),
    ]


def run(quick: bool, history_only: bool = False) -> list[BenchRow]:
    """Measure (see the module docstring) and return the rows (``history_only``: only
    the 10- versus long-conversation rows)."""
    from ctxstack.llm.stub import StubServer

    conversations, turns = (8, 3) if quick else (50, 10)
    long_count, history_turns = (400, 4) if quick else (2000, 10)
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory() as tmp, StubServer(rule=_rule, max_recorded=0) as stub, \
            _database(Path(tmp)) as (db_env, db_name):
        env = {**db_env, "LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "bench",
               "LLM_MODEL": "stub-model", "CTXSTACK_FILES_DIR": str(Path(tmp) / "files")}
        with _serve(Path(tmp), env) as url:
            if not history_only:
                wall, timings = asyncio.run(_concurrent(url, conversations, turns))
                rows = _throughput_rows(wall, timings, conversations, turns, db_name)
            by_budget = {
                budget: asyncio.run(_history_overhead(url, env, long_count, history_turns,
                                                      budget))
                for budget in (None, 32_000)
            }

    for budget, (short_t, long_t) in by_budget.items():
        short_o = statistics.median(t.overhead * 1000 for t in short_t)
        long_o = statistics.median(t.overhead * 1000 for t in long_t)
        where = "64k budget (default)" if budget is None else f"{budget // 2 // 1000}k budget"
        rows.append(BenchRow(
            f"overhead p50, {long_count:,}-msg vs 10-msg conversation, {where}", long_o, "ms",
            baseline=short_o, ratio=long_o / short_o if short_o else None,
            target="≤ 2x", met=(long_o / short_o) <= 2.0 if short_o else None))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="a much smaller run")
    parser.add_argument("--history-only", action="store_true",
                        help="only the 10- versus long-conversation rows")
    args = parser.parse_args(argv)
    rows = run(args.quick, args.history_only)
    print_table(rows, "chat service (ctxstack serve)" + (" (quick)" if args.quick else "")
                + " — baselines: model time per turn / the 10-message conversation")
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
