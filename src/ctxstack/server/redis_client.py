"""The service's Redis client (the inject queue's and the stream log's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis.asyncio as aioredis


def redis_client(url: str, timeout: float) -> aioredis.Redis:
    """A client of the Redis at ``url`` that answers strings, with every call and every
    connect bounded by ``timeout`` seconds and a timed-out call not retried: a stuck Redis
    fails the caller fast (each caller turns that into its own error) instead of holding a
    turn. Imports ``redis`` only when called (it is the ``server`` extra's, and optional)."""
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(
        url, decode_responses=True, socket_timeout=timeout,
        socket_connect_timeout=timeout, retry_on_timeout=False)
