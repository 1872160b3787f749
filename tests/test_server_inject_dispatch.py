"""The worker's one inject poller (issue 15), over fake queues: a turn stops only after a
take in flight for it has delivered (cancelled only past the grace), and a storage
hiccup is retried. Over the real queues (SQLite, PostgreSQL, Redis): one look for all
turns, each inject to its own turn, in tests/test_server_inject_queue.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from ctxstack.server.inject_dispatch import InjectDispatcher
from tests.service_support import SlowTakeQueue, until


async def test_unwatch_returns_once_a_take_in_flight_has_delivered() -> None:
    queue = SlowTakeQueue(["taken just before the turn ended"])
    poller = InjectDispatcher(queue, interval=0.01)  # type: ignore[arg-type]
    delivered: list[str] = []

    async def deliver(text: str) -> None:
        delivered.append(text)

    turn = poller.watch("c", "t", deliver)
    await asyncio.wait_for(queue.entered.wait(), timeout=10)
    stopping = asyncio.create_task(poller.unwatch(turn))  # while take() is in flight
    await asyncio.sleep(0.05)
    assert not stopping.done()  # waits for the take, never cancels it mid-query
    queue.release.set()
    await asyncio.wait_for(stopping, timeout=10)
    assert delivered == ["taken just before the turn ended"]
    assert queue.cancelled == 0
    await poller.close()


async def test_a_take_stuck_past_the_grace_is_cancelled() -> None:
    queue = SlowTakeQueue(["taken just before the turn ended"])
    poller = InjectDispatcher(queue, interval=0.01, grace=0.1)  # type: ignore[arg-type]

    async def deliver(text: str) -> None:
        raise AssertionError("nothing is delivered from a cancelled take")

    turn = poller.watch("c", "t", deliver)
    await asyncio.wait_for(queue.entered.wait(), timeout=10)
    await asyncio.wait_for(poller.unwatch(turn), timeout=10)
    assert queue.cancelled == 1
    await poller.close()


class _Flaky:
    def __init__(self) -> None:
        self.looks = 0

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        self.looks += 1
        if self.looks == 1:
            raise ConnectionError("storage hiccup")
        return set(turns)

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        return ["after the hiccup"]


async def test_a_storage_hiccup_is_retried_at_the_next_tick(
    caplog: pytest.LogCaptureFixture
) -> None:
    queue = _Flaky()
    poller = InjectDispatcher(queue, interval=0.01)  # type: ignore[arg-type]
    delivered: list[str] = []

    async def deliver(text: str) -> None:
        delivered.append(text)

    turn = poller.watch("c", "t", deliver)
    await until(lambda: bool(delivered))
    await poller.unwatch(turn)
    assert delivered[0] == "after the hiccup"
    assert "looking for injects" in caplog.text
    await poller.close()
