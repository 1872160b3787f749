"""``GET /api/health``: pid, resident memory, CPU seconds and the loop-lag summary."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import httpx

from ctxstack.server.app import create_app
from ctxstack.server.health import LoopLagProbe
from ctxstack.server.settings import Settings
from ctxstack.store.migrate import upgrade


async def test_health_reports_this_process_and_its_cpu_time(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'health.db'}"
    await upgrade(url)
    app = create_app(Settings(database_url=url, files_dir=tmp_path / "files", auth="token",
                              calibrate=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            first = (await client.get("/api/health")).json()
            digest = b"x"
            for _ in range(200_000):  # some CPU work between the two answers
                digest = hashlib.sha256(digest).digest()
            second = (await client.get("/api/health")).json()
    assert first["pid"] == second["pid"] == os.getpid()
    assert first["rss_bytes"] > 0
    assert 0 < first["cpu_seconds"] < second["cpu_seconds"]
    assert set(second["loop_lag_ms"]) == {"p50", "p99", "max"}


def test_an_empty_probe_summarises_to_zero() -> None:
    probe = LoopLagProbe(keep=4)
    assert probe.summary_ms() == {"p50": 0.0, "p99": 0.0, "max": 0.0}
    probe.samples.extend([0.001, 0.002, 0.003, 0.004, 0.1])  # the oldest falls out
    assert probe.summary_ms() == {"p50": 3.0, "p99": 4.0, "max": 100.0}


def test_a_window_summarises_only_the_recent_samples() -> None:
    probe = LoopLagProbe()
    now = time.perf_counter()
    probe.times.extend([now - 100, now - 1])
    probe.samples.extend([0.5, 0.002])  # a stall long ago, a small lag just now
    assert probe.summary_ms()["max"] == 500.0
    assert probe.summary_ms(window=10) == {"p50": 2.0, "p99": 2.0, "max": 2.0}
    assert probe.summary_ms(window=0.0001)["max"] == 0.0
