"""The recorded turn streams (ctxstack.server.stream_log): numbered events read back after
an id, the end mark, the newest stream of a conversation, the stop flag, and bounded
retention — on SQLite and PostgreSQL (the ``turn_streams`` tables) and on Redis."""

from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy import update

from ctxstack.server.stream_log import DbStreamLog, Recorded, RedisStreamLog, StreamLog
from ctxstack.store import SessionFactory, UserRecord, create_conversation
from ctxstack.store.db import transaction
from ctxstack.store.models import TurnStream, utcnow
from tests.service_support import redis_url_or_skip


async def _contract(log: StreamLog, conversation_id: str) -> str:
    turn = secrets.token_hex(16)
    await log.open(turn, conversation_id)
    await log.append(turn, [Recorded(1, "context", "{}"), Recorded(2, "answer", '{"delta":"a"}')],
                     end=False)
    await log.append(turn, [Recorded(3, "answer", '{"delta":"b"}')], end=False)
    events, ended = await log.read(turn, 1)
    assert [e.seq for e in events] == [2, 3]
    assert events[1].data == '{"delta":"b"}'
    assert ended is False
    latest = await log.latest(conversation_id)
    assert latest is not None
    assert latest.turn_id == turn
    assert latest.ended is False
    await log.request_stop(turn)
    info = await log.info(turn)
    assert info is not None
    assert info.stop_requested is True
    assert info.conversation_id == conversation_id
    await log.append(turn, [Recorded(4, "done", "{}")], end=True)
    events, ended = await log.read(turn, 3)
    assert [e.event for e in events] == ["done"]
    assert ended is True
    assert (await log.read(turn, 4))[0] == []
    assert await log.info("0" * 32) is None
    return turn


async def test_database_stream_log_and_retention(sf: SessionFactory, alice: UserRecord) -> None:
    conv = await create_conversation(sf, alice.id, "streams")
    log = DbStreamLog(sf, retention=60)
    turn = await _contract(log, conv.id)
    assert await log.prune() == 0  # ended just now: kept for the retention period
    async with transaction(sf, "ageing a stream") as session:
        await session.execute(update(TurnStream).where(TurnStream.turn_id == turn).values(
            ended_at=utcnow() - timedelta(seconds=61)))
    assert await log.prune() == 1
    assert await log.info(turn) is None
    assert (await log.read(turn, 0))[0] == []


async def test_redis_stream_log_expires_after_retention() -> None:
    url = redis_url_or_skip()
    log = RedisStreamLog(url, retention=30, prefix=f"ctxstack-test-{secrets.token_hex(4)}:")
    try:
        turn = await _contract(log, "c" * 32)
        ttl = await log._redis.ttl(log._events(turn))
        assert 0 < ttl <= 30
        assert 0 < await log._redis.ttl(log._meta(turn)) <= 30
    finally:
        await log.close()
