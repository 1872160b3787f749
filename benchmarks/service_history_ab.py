"""Two builds of the service side by side: a long conversation's turn against a short one's.

``bench_service``'s history rows judge one build by wall time (the server's overhead p50
of a turn on a 2,000-message conversation against a 10-message one). On a shared machine
that figure moves with whatever else runs, so a change to the history path is compared
here instead, two source trees at once:

* one ``ctxstack serve`` (1 worker) per tree, each on its own fresh PostgreSQL schema
  (SQLite when PostgreSQL is not reachable), both answered by the same stub model;
* each gets a 10-message and a 2,000-message conversation (two warm-up turns each: the
  first writes the checkpoint);
* then rounds of batches of turns, the trees interleaved within each round (short on A,
  short on B, long on A, long on B), so both see the same background load;
* per batch, the server process's CPU time (``/proc``: user + system, children
  included) divided by the turns, and each turn's overhead as ``bench_service`` takes it.

Printed per tree: the median over rounds of CPU per turn, short and long, and their
ratio; the median overhead of all turns, short and long, and their ratio. CPU time is
the steadier figure; ``/proc`` counts in clock ticks (10 ms), hence batches of turns.

Run: ``python -m benchmarks.service_history_ab base=/path/to/checkout new=.``
(``--rounds``, ``--turns`` per batch, ``--budget`` to set the main model's context size,
e.g. 32000 for a 16K usable budget). Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks import bench_service as service

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its children so far."""
    pids = [pid] + [int(p) for p in subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()]
    total = 0
    for p in pids:
        with contextlib.suppress(FileNotFoundError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


@dataclass
class Tree:
    """One build under test and what was measured on it."""

    name: str
    url: str
    pid: int
    conversations: dict[str, str] = field(default_factory=dict)  # "short"/"long" → id
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"short": [], "long": []})
    overhead: dict[str, list[float]] = field(default_factory=lambda: {"short": [], "long": []})


async def _prepare(tree: Tree, env: dict[str, str], budget: int | None) -> None:
    async with httpx.AsyncClient(base_url=tree.url, timeout=300) as client:
        if budget is not None:
            response = await client.put("/api/admin/model-configs/main", json={
                "model": "stub-model", "context_size": budget,
                "max_output_tokens": budget // 2})
            response.raise_for_status()
        for kind, count in (("short", 10), ("long", 2000)):
            cid = await service._conversation(client)
            await service._fill(env, cid, count)
            for warm in ("warm up", "warm up again"):
                await service._turn(client, cid, warm)
            tree.conversations[kind] = cid


async def _batch(tree: Tree, kind: str, turns: int) -> None:
    async with httpx.AsyncClient(base_url=tree.url, timeout=300) as client:
        before = process_cpu(tree.pid)
        timings = [await service._turn(client, tree.conversations[kind], "What is 6*7?")
                   for _ in range(turns)]
        after = process_cpu(tree.pid)
    tree.cpu[kind].append((after - before) / turns * 1000)
    tree.overhead[kind].extend(t.overhead * 1000 for t in timings)


def compare(roots: dict[str, Path], rounds: int, turns: int, budget: int | None) -> list[Tree]:
    """Measure every tree (see the module docstring)."""
    from ctxstack.llm.stub import StubServer

    with tempfile.TemporaryDirectory() as tmp, \
            StubServer(rule=service._rule, max_recorded=0) as stub, \
            contextlib.ExitStack() as stack:
        trees, envs = [], []
        for name, root in roots.items():
            db_env, _ = stack.enter_context(service._database(Path(tmp)))
            env = {**db_env, "LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "bench",
                   "LLM_MODEL": "stub-model",
                   "CTXSTACK_FILES_DIR": str(Path(tmp) / f"files-{name}")}
            url, pid = stack.enter_context(service.serve_process(root, Path(tmp), env))
            trees.append(Tree(name, url, pid))
            envs.append(env)
        for tree, env in zip(trees, envs, strict=True):
            asyncio.run(_prepare(tree, env, budget))
        for _ in range(rounds):
            for kind in ("short", "long"):
                for tree in trees:
                    asyncio.run(_batch(tree, kind, turns))
    return trees


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("trees", nargs="+", metavar="NAME=PATH",
                        help="a checkout to serve from (its src/ is put first on the path)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turns", type=int, default=10, help="turns per batch")
    parser.add_argument("--budget", type=int, default=None,
                        help="the main model's context size (default: the service's)")
    args = parser.parse_args(argv)
    roots = {}
    for item in args.trees:
        name, _, path = item.partition("=")
        if not path:
            parser.error(f"expected NAME=PATH, got {item!r}")
        roots[name] = Path(path).resolve()
    for tree in compare(roots, args.rounds, args.turns, args.budget):
        cpu_s, cpu_l = (statistics.median(tree.cpu[k]) for k in ("short", "long"))
        wall_s, wall_l = (statistics.median(tree.overhead[k]) for k in ("short", "long"))
        print(f"{tree.name:>8}: CPU per turn {cpu_s:6.1f} ms (10 msgs) {cpu_l:6.1f} ms "
              f"(2,000 msgs) ratio {cpu_l / cpu_s:4.2f} | overhead p50 {wall_s:6.1f} / "
              f"{wall_l:6.1f} ms ratio {wall_l / wall_s:4.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
