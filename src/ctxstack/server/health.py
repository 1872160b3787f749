"""``GET /api/health``: is this worker alive, how late is its event loop, how big is it.

The event-loop lag probe is a task that sleeps ``interval`` seconds and records how much
later than asked it woke up: whatever ran on the loop in between (a slow regex, a big
JSON encode, a synchronous call) shows up as lag for *every* request of the worker. The
service's rule is that nothing CPU-bound holds the loop for more than 20 ms; the load
benchmark (``benchmarks/bench_load.py``) reads these figures under load.

``cpu_seconds`` is the process's CPU time so far: sampled before and after a load, it
gives the worker's CPU cost per request independently of how busy the machine is.

The answer is per worker process (``pid``); it holds no user data, so it needs no token
(a load balancer can poll it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

router = APIRouter(prefix="/api")


class LoopLagProbe:
    """Samples the event loop's lateness every ``interval`` seconds (last ``keep`` kept)."""

    def __init__(self, *, interval: float = 0.05, keep: int = 4096) -> None:
        self.interval = interval
        self.samples: deque[float] = deque(maxlen=keep)
        self.times: deque[float] = deque(maxlen=keep)  # when each sample was taken
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ctxstack-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(self.interval)
            woke = time.perf_counter()
            self.samples.append(max(0.0, woke - asked - self.interval))
            self.times.append(woke)

    def summary_ms(self, window: float | None = None) -> dict[str, float]:
        """p50, p99 and max lag in milliseconds over the kept samples, or over those of the
        last ``window`` seconds (0 when none): a load generator reads one phase's lag."""
        if window is None or len(self.times) != len(self.samples):
            chosen = list(self.samples)
        else:
            since = time.perf_counter() - window
            chosen = [lag for at, lag in zip(self.times, self.samples, strict=True)
                      if at >= since]
        ordered = sorted(chosen)
        if not ordered:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}

        def at(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] * 1000, 3)

        return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1] * 1000, 3)}


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc``; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class HealthOut(BaseModel):
    status: str = "ok"
    pid: int
    rss_bytes: int
    loop_lag_ms: dict[str, float]
    lag_samples: int
    cpu_seconds: float


@router.get("/health", response_model=HealthOut, tags=["service"])
async def health(request: Request, window: float | None = Query(
        None, gt=0, description="summarise the lag of the last this many seconds only"),
) -> HealthOut:
    """This worker's pid, resident memory, CPU time used so far (user + system, all its
    threads) and event-loop lag (p50/p99/max, ms)."""
    probe: LoopLagProbe | None = getattr(request.app.state, "loop_lag", None)
    lag = probe.summary_ms(window) if probe is not None else {"p50": 0.0, "p99": 0.0, "max": 0.0}
    return HealthOut(pid=os.getpid(), rss_bytes=rss_bytes(), loop_lag_ms=lag,
                     lag_samples=len(probe.samples) if probe is not None else 0,
                     cpu_seconds=round(time.process_time(), 4))
