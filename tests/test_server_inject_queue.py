"""The inject queues' contract, on real SQLite, PostgreSQL and Redis.

One claim per conversation; pushes only while a turn runs; ``take`` drains in order;
``end`` releases the claim and returns what was never taken; a claim whose worker stopped
beating can be taken over; ``waiting`` names the turns with something queued, and the
worker's one poller (``InjectDispatcher``) hands each inject to its own turn.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from ctxstack.server.errors import NoRunningTurnError, TurnBusyError
from ctxstack.server.inject_dispatch import InjectDispatcher
from ctxstack.server.injects import (
    DbInjectQueue,
    Deliver,
    InjectPoller,
    InjectQueue,
    RedisInjectQueue,
)
from ctxstack.store import create_conversation, create_engine_from_url, create_user, upgrade
from ctxstack.store.db import session_factory
from tests.service_support import SlowTakeQueue, until

PG_URL = os.environ.get("CTXSTACK_TEST_POSTGRES_URL",
                        "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("CTXSTACK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRED = os.environ.get("CTXSTACK_REQUIRE_POSTGRES") == "1"


async def _unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} is not reachable ({exc}); start it to run this test"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                        "redis"])
async def queue_and_conversations(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[InjectQueue, list[str]]]:
    schema = None
    if request.param == "postgres":
        schema = f"q_{secrets.token_hex(5)}"
        import asyncpg

        try:
            conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""), timeout=5)
            await conn.execute(f'CREATE SCHEMA "{schema}"')
            await conn.close()
        except Exception as exc:
            await _unavailable(f"PostgreSQL at {PG_URL}", exc)
        engine = create_engine_from_url(PG_URL, schema=schema)
    else:
        engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'q.db'}")
    await upgrade(engine)
    factory = session_factory(engine)
    user, _ = await create_user(factory, "q")
    ids = [(await create_conversation(factory, user.id)).id for _ in range(2)]
    queue: InjectQueue
    if request.param == "redis":
        queue = RedisInjectQueue(REDIS_URL, prefix=f"test-{secrets.token_hex(4)}:")
        try:
            await queue.is_running(ids[0])
        except Exception as exc:
            await queue.close()
            await _unavailable(f"Redis at {REDIS_URL}", exc)
    else:
        queue = DbInjectQueue(factory)
    try:
        yield queue, ids
    finally:
        await queue.close()
        await engine.dispose()
        if schema is not None:
            import asyncpg

            conn = await asyncpg.connect(PG_URL.replace("+asyncpg", ""), timeout=5)
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await conn.close()


async def test_one_turn_per_conversation(queue_and_conversations: tuple[InjectQueue, list[str]]
                                         ) -> None:
    queue, (a, b) = queue_and_conversations
    await queue.begin(a, "t1")
    with pytest.raises(TurnBusyError, match="already running"):
        await queue.begin(a, "t2")
    await queue.begin(b, "t3")  # another conversation is independent
    assert await queue.is_running(a)
    assert await queue.end(a, "t1") == []
    assert not await queue.is_running(a)
    await queue.begin(a, "t4")  # free again


async def test_pushes_are_taken_in_order_and_leftovers_returned(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    with pytest.raises(NoRunningTurnError):
        await queue.push(a, "too early")
    await queue.begin(a, "t1")
    await queue.push(a, "one")
    await queue.push(a, "two")
    assert await queue.take(a, "t1") == ["one", "two"]
    assert await queue.take(a, "t1") == []
    await queue.push(a, "three")
    assert await queue.end(a, "t1") == ["three"]  # never taken: handed back, not lost
    with pytest.raises(NoRunningTurnError):
        await queue.push(a, "too late")


async def test_concurrent_pushes_are_all_delivered(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    await queue.begin(a, "t1")
    texts = [f"msg {i}" for i in range(20)]
    await asyncio.gather(*(queue.push(a, t) for t in texts))
    got = await queue.take(a, "t1") + await queue.end(a, "t1")
    assert sorted(got) == sorted(texts)


async def test_a_dead_workers_claim_can_be_taken_over(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    queue.stale_after = 0.3  # type: ignore[union-attr]
    await queue.begin(a, "dead")
    with pytest.raises(TurnBusyError):
        await queue.begin(a, "new")
    await asyncio.sleep(0.5)  # no heartbeat
    assert not await queue.is_running(a)
    await queue.begin(a, "new")
    await queue.push(a, "for the new turn")
    assert await queue.take(a, "new") == ["for the new turn"]


async def test_poller_delivers_and_keeps_the_claim_alive(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    queue.stale_after = 0.6  # type: ignore[union-attr]
    await queue.begin(a, "t1")
    delivered: list[str] = []

    async def deliver(text: str) -> None:
        delivered.append(text)

    poller = InjectPoller(queue, a, "t1", interval=0.05, heartbeat_every=0.1)
    task = asyncio.create_task(poller.run(deliver))
    try:
        await queue.push(a, "hello")
        await asyncio.sleep(1.0)  # longer than stale_after: only the heartbeat keeps it
        assert await queue.is_running(a)
        assert delivered == ["hello"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_injects_for_a_dead_turn_go_to_the_next_and_saving_refuses_new_ones(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    queue.stale_after = 0.3  # type: ignore[union-attr]
    await queue.begin(a, "dead")
    await queue.push(a, "accepted for the dead turn")
    await asyncio.sleep(0.5)  # its worker died: no heartbeat
    await queue.begin(a, "next")
    assert await queue.take(a, "next") == ["accepted for the dead turn"]  # not deleted
    assert await queue.heartbeat(a, "dead") is False  # the dead turn learns it lost
    queue.stale_after = 30  # type: ignore[union-attr]
    await queue.heartbeat(a, "next")
    await queue.push(a, "late")
    assert await queue.finish(a, "next") == ["late"]
    with pytest.raises(NoRunningTurnError, match="finishing"):
        await queue.push(a, "while saving")
    with pytest.raises(TurnBusyError):
        await queue.begin(a, "third")  # the claim outlives the save
    await queue.release(a, "next")
    await queue.begin(a, "third")


@pytest.mark.parametrize("queue_and_conversations", [
    "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
async def test_settle_saves_the_leftovers_and_releases_in_one_commit(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    """The database queue's settle: the injects nobody took reach the save, the claim is
    gone once it commits; a failed save leaves the claim and the injects as they were; a
    lost claim saves nothing."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from ctxstack.server.lifecycle import LeaseLostError

    queue, (a, b) = queue_and_conversations
    assert isinstance(queue, DbInjectQueue)  # only the database queue settles in one commit
    await queue.begin(a, "t1")
    await queue.push(a, "late")

    async def broken(session: AsyncSession, leftovers: list[str]) -> None:
        assert leftovers == ["late"]
        raise RuntimeError("the save failed")

    with pytest.raises(RuntimeError, match="save failed"):
        await queue.settle(a, "t1", broken)
    assert await queue.is_running(a)  # rolled back: still claimed, still running
    await queue.push(a, "later")  # and still taking injects

    async def save(session: AsyncSession, leftovers: list[str]) -> list[str]:
        return leftovers

    assert await queue.settle(a, "t1", save) == ["late", "later"]
    assert not await queue.is_running(a)
    with pytest.raises(NoRunningTurnError):
        await queue.push(a, "after the answer")
    await queue.begin(a, "t2")  # the conversation is free for the next turn

    called: list[str] = []

    async def never(session: AsyncSession, leftovers: list[str]) -> None:
        called.append("saved")

    with pytest.raises(LeaseLostError):
        await queue.settle(b, "not-claimed", never)
    assert called == []


async def test_a_stopped_poller_finishes_its_query_instead_of_being_cancelled() -> None:
    queue = SlowTakeQueue()
    poller = InjectPoller(queue, "c", "t", interval=0.01)  # type: ignore[arg-type]
    delivered: list[str] = []

    async def deliver(text: str) -> None:
        delivered.append(text)

    task = asyncio.create_task(poller.run(deliver))
    await asyncio.wait_for(queue.entered.wait(), timeout=10)
    poller.stop()  # while take() is in flight
    queue.release.set()
    await asyncio.wait_for(task, timeout=10)
    assert (queue.finished, queue.cancelled) == (1, 0)
    # Stopped before it starts: no query at all.
    idle = SlowTakeQueue()
    early = InjectPoller(idle, "c", "t", interval=0.01)  # type: ignore[arg-type]
    early.stop()
    await asyncio.wait_for(early.run(deliver), timeout=10)
    assert not idle.entered.is_set()


# ---------------------------------------------------------------------------- one poller per worker
def _other_worker(queue: InjectQueue) -> InjectQueue:
    """A second queue over the same storage, as the worker an inject is posted to."""
    if isinstance(queue, DbInjectQueue):
        return DbInjectQueue(queue._factory, holder="another-host:1")
    assert isinstance(queue, RedisInjectQueue)
    return queue  # the state lives in Redis: one client is as good as another's


class _Counting:
    """Counts the dispatcher's calls into a real queue."""

    def __init__(self, queue: InjectQueue) -> None:
        self.queue = queue
        self.looks: list[int] = []  # turns asked about, per look
        self.takes: list[tuple[str, str]] = []

    async def waiting(self, turns: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        self.looks.append(len(turns))
        return await self.queue.waiting(turns)

    async def take(self, conversation_id: str, turn_id: str) -> list[str]:
        self.takes.append((conversation_id, turn_id))
        return await self.queue.take(conversation_id, turn_id)


async def test_waiting_names_the_turns_with_something_queued(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, b) = queue_and_conversations
    assert await queue.waiting([]) == set()
    await queue.begin(a, "ta")
    await queue.begin(b, "tb")
    assert await queue.waiting([(a, "ta"), (b, "tb")]) == set()
    await queue.push(a, "for a")
    assert await queue.waiting([(a, "ta"), (b, "tb")]) == {(a, "ta")}
    assert await queue.waiting([(a, "ta")]) == {(a, "ta")}  # a look takes nothing
    assert await queue.take(a, "ta") == ["for a"]
    assert await queue.waiting([(a, "ta"), (b, "tb")]) == set()


async def test_one_poller_delivers_each_inject_to_its_own_turn(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, ids = queue_and_conversations
    counting = _Counting(queue)
    poller = InjectDispatcher(counting, interval=0.02)  # type: ignore[arg-type]
    got: dict[str, list[str]] = {cid: [] for cid in ids}

    def deliver_to(cid: str) -> Deliver:
        async def deliver(text: str) -> None:
            got[cid].append(text)
        return deliver

    watched = []
    for cid in ids:
        await queue.begin(cid, f"turn-{cid[:6]}")
        watched.append(poller.watch(cid, f"turn-{cid[:6]}", deliver_to(cid)))
    elsewhere = _other_worker(queue)
    target = ids[-1]
    await elsewhere.push(target, "first")
    await elsewhere.push(target, "second")
    await until(lambda: got[target] == ["first", "second"])
    await elsewhere.push(ids[0], "to the first turn")
    await until(lambda: got[ids[0]] == ["to the first turn"])
    assert {cid: texts for cid, texts in got.items() if texts} == {
        target: ["first", "second"], ids[0]: ["to the first turn"]}
    # One look per tick for every watched turn; takes only where something was queued.
    assert counting.looks
    assert set(counting.looks) == {len(ids)}
    assert set(counting.takes) <= {(target, f"turn-{target[:6]}"),
                                   (ids[0], f"turn-{ids[0][:6]}")}
    for turn in watched:
        await poller.unwatch(turn)
        assert await queue.end(turn.conversation_id, turn.turn_id) == []
    await until(lambda: poller._task is not None and poller._task.done())  # idle: no loop
    looks = len(counting.looks)
    await asyncio.sleep(0.1)
    assert len(counting.looks) == looks
    await poller.close()


async def test_an_inject_pushed_after_unwatch_stays_queued_for_the_turns_finish(
    queue_and_conversations: tuple[InjectQueue, list[str]]
) -> None:
    queue, (a, _) = queue_and_conversations
    poller = InjectDispatcher(queue, interval=0.02)
    delivered: list[str] = []

    async def deliver(text: str) -> None:
        delivered.append(text)

    await queue.begin(a, "t1")
    turn = poller.watch(a, "t1", deliver)
    await poller.unwatch(turn)
    await queue.push(a, "late")
    await asyncio.sleep(0.1)
    assert delivered == []
    assert await queue.end(a, "t1") == ["late"]  # handed back by finish, not lost
    await poller.close()
