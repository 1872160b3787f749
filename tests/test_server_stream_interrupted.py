"""A resumed stream whose turn's worker died (issue 31, item 3), on the database log.

The two-host test (``tests/test_two_hosts.py``) kills a real host with Redis as the log;
here the same rule runs against the ``turn_streams`` tables on SQLite:

* a turn that stopped producing events and no longer runs ends its followers' streams
  with an "interrupted" error, recorded as the stream's end;
* a turn that ends just as it is found not running (its claim is released before its
  ``done`` reaches the log) is followed to its real end, never declared interrupted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ctxstack.server.identity import ensure_local_user
from ctxstack.server.persist import INTERRUPTED_ANSWER
from ctxstack.server.settings import Settings
from ctxstack.server.stream_log import DbStreamLog, Recorded
from ctxstack.server.streams import StreamHub, follow_log
from ctxstack.store.conversations import create_conversation
from ctxstack.store.db import create_engine_from_url, engine_of, session_factory
from ctxstack.store.migrate import upgrade

TURN = "a" * 32


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[tuple[StreamHub, str]]:
    """A hub on a fresh SQLite log (a short lease: a silent turn is checked after 2 s),
    with one turn recorded up to its third event."""
    engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp_path / 'streams.db'}")
    await upgrade(engine)
    factory = session_factory(engine)
    user_id, _ = await ensure_local_user(factory, "local")
    cid = (await create_conversation(factory, user_id)).id
    log = DbStreamLog(factory)
    await log.open(TURN, cid)
    await log.append(TURN, [Recorded(i, "step", json.dumps({"n": i})) for i in (1, 2, 3)],
                     end=False)
    settings = Settings.from_env({"CTXSTACK_TURN_LEASE": "0.1"})
    try:
        yield StreamHub(settings=settings, log=log), cid
    finally:
        await engine_of(factory).dispose()


def _ids_and_events(chunks: list[bytes]) -> list[tuple[str, str, str]]:
    out = []
    for block in b"".join(chunks).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            out.append((fields["id"], fields["event"], fields["data"]))
    return out


async def test_a_dead_turn_ends_with_its_recorded_interruption(
    hub: tuple[StreamHub, str],
) -> None:
    streams, _ = hub

    async def running() -> bool:
        return False  # its worker died: no claim any more

    got = _ids_and_events([c async for c in follow_log(streams, TURN, 1, running)])
    assert [(i, e) for i, e, _ in got] == [
        (f"{TURN}.2", "step"), (f"{TURN}.3", "step"), (f"{TURN}.4", "error")]
    assert json.loads(got[-1][2]) == {"message": INTERRUPTED_ANSWER, "kind": "failed"}
    # Recorded as the end: the stream reads as ended, the next reader gets it at once.
    events, ended = await streams.log.read(TURN, 3)
    assert ended
    assert [(e.seq, e.event) for e in events] == [(4, "error")]
    info = await streams.log.info(TURN)
    assert info is not None
    assert info.ended

    async def never() -> bool:
        raise AssertionError("an ended stream needs no liveness check")

    again = _ids_and_events([c async for c in follow_log(streams, TURN, 3, never)])
    assert [(i, e) for i, e, _ in again] == [(f"{TURN}.4", "error")]


async def test_a_turn_ending_as_it_is_found_not_running_is_not_interrupted(
    hub: tuple[StreamHub, str],
) -> None:
    streams, _ = hub

    async def released() -> bool:
        # The claim is gone; the turn's done lands in the log right after.
        await streams.log.append(TURN, [Recorded(4, "done", "{}")], end=True)
        return False

    got = _ids_and_events([c async for c in follow_log(streams, TURN, 3, released)])
    assert [(i, e) for i, e, _ in got] == [(f"{TURN}.4", "done")]
    events, ended = await streams.log.read(TURN, 0)
    assert ended
    assert [e.event for e in events] == ["step", "step", "step", "done"]
