"""When to try an LLM call again, and a small async driver that does it.

The decision is a pure function of (error, attempt number, time spent, a random draw), so
it is tested without sleeping; :func:`retry_async` is the only part that waits.

Policy:

* retry only what may succeed on its own: 429, 5xx, connection failures, timeouts
  (:func:`ctxstack.llm.classify.is_retryable`) — never authentication, bad requests or
  context overflow, which need a different request, not the same one again;
* wait ``base_delay * 2**(attempt-1)`` capped at ``max_delay``, shortened by up to
  ``jitter`` (a fraction) at random so that many clients hit by the same outage do not
  come back in lockstep;
* a server-sent ``Retry-After`` replaces the backoff exactly (never shortened: the server
  said when it will accept us); one longer than ``max_retry_after`` means "not soon" and
  the error is raised at once, carrying ``retry_after`` for the caller to schedule;
* at most ``max_attempts`` tries in all, and never start a wait that would end past
  ``max_total_time`` since the first try: a caller's latency budget is a bound, not a hint.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ctxstack.llm.classify import is_retryable, retry_after_of

log = logging.getLogger(__name__)

T = TypeVar("T")


class RetryPolicy(BaseModel):
    """Bounds and shape of retries (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=4, ge=1)
    base_delay: float = Field(default=0.5, ge=0)
    max_delay: float = Field(default=20.0, ge=0)
    max_total_time: float = Field(default=120.0, ge=0)
    max_retry_after: float = Field(default=60.0, ge=0)
    jitter: float = Field(default=0.5, ge=0, le=1)

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    def backoff(self, attempt: int, draw: float) -> float:
        """The jittered exponential wait after failed try number ``attempt`` (1-based)."""
        raw = min(self.max_delay, self.base_delay * 2.0 ** min(attempt - 1, 60))
        return raw * (1.0 - self.jitter * draw)

    def next_delay(
        self, error: BaseException, attempt: int, elapsed: float, draw: float
    ) -> float | None:
        """Seconds to wait before the next try, or ``None`` to give up and raise ``error``.

        Args:
            error: what try number ``attempt`` raised.
            attempt: 1-based number of the try that just failed.
            elapsed: seconds since the first try started.
            draw: a uniform random number in [0, 1) for the jitter.
        """
        if not is_retryable(error) or attempt >= self.max_attempts:
            return None
        retry_after = retry_after_of(error)
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None
            delay = retry_after
        else:
            delay = self.backoff(attempt, draw)
        if elapsed + delay > self.max_total_time:
            return None
        return delay


@dataclass(frozen=True)
class RetryEvent:
    """One decision to retry: which try failed, with what, and how long we wait."""

    attempt: int
    error: BaseException
    delay: float


async def retry_async(
    operation: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    draw: Callable[[], float] = random.random,
    on_retry: Callable[[RetryEvent], object] | None = None,
) -> T:
    """Run ``operation(attempt)`` until it succeeds or ``policy`` says stop.

    ``operation`` receives the 1-based attempt number. The error of the last try is
    re-raised unchanged in type; when retries happened, a note says how many tries and how
    long they took (visible in tracebacks, not in ``str(exc)``).
    """
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await operation(attempt)
        except Exception as exc:
            elapsed = clock() - start
            delay = policy.next_delay(exc, attempt, elapsed, draw())
            if delay is None:
                if attempt > 1:
                    exc.add_note(f"gave up after {attempt} attempts in {elapsed:.2f}s")
                raise
            log.info("LLM call failed (attempt %d): %s; retrying in %.2fs", attempt, exc, delay)
            if on_retry is not None:
                on_retry(RetryEvent(attempt=attempt, error=exc, delay=delay))
            await sleep(delay)
