"""Faults the stub can be told to inject from the command line (``ctxstack stub-llm``).

A :class:`FaultPlan` names one fault and how many requests it hits; :func:`with_faults`
wraps the stub's rule so the first ``times`` requests get the fault and later ones the
normal answer ("fail N times then succeed"); without ``times`` every request fails.

============  ===========================================================================
fault         what the client sees
============  ===========================================================================
status        HTTP ``status`` (429, 500, 503, …) with OpenAI's error body, and a
              ``Retry-After`` header when ``retry_after`` is set
hang          the connection is accepted and no answer ever comes (until the stub stops)
garbage       HTTP 200 whose body is not JSON (what a misconfigured proxy returns)
drop          a streamed answer cut after its first chunks (the connection closes
              mid-body); a non-streamed one is JSON cut in the middle
overflow      OpenAI's context-length 400 (``code: context_length_exceeded``)
============  ===========================================================================
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

from ctxstack.errors import ConfigError
from ctxstack.llm.stub.replies import ReplyLike, Rule, StubReply, StubRequest

FaultKind = Literal["status", "hang", "garbage", "drop", "overflow"]
HANG_SECONDS = 24 * 3600.0
GARBAGE_BODY = "<html><body><h1>502 Bad Gateway</h1>upstream sent garbage</body></html>"


@dataclass(frozen=True)
class FaultPlan:
    """One fault: which, with what status / Retry-After, for how many requests."""

    kind: FaultKind
    status: int = 503
    retry_after: float | None = None
    times: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "status" and not 400 <= self.status <= 599:
            raise ConfigError(f"fault status: expected 400-599, got {self.status}")
        if self.times is not None and self.times < 0:
            raise ConfigError(f"fault times: expected >= 0, got {self.times}")
        if self.retry_after is not None and self.retry_after < 0:
            raise ConfigError(f"retry-after: expected >= 0 seconds, got {self.retry_after}")


def fault_reply(plan: FaultPlan, request: StubRequest) -> StubReply:
    """The reply that injects ``plan``'s fault into the answer to ``request``."""
    if plan.kind == "status":
        headers = {} if plan.retry_after is None else {"retry-after": f"{plan.retry_after:g}"}
        if plan.status == 429:
            return StubReply.rate_limited(plan.retry_after)
        return StubReply.failure(plan.status, f"stub: injected HTTP {plan.status}",
                                 type="server_error" if plan.status >= 500 else
                                 "invalid_request_error", headers=headers)
    if plan.kind == "hang":
        return StubReply.text("never sent", delay=HANG_SECONDS)
    if plan.kind == "garbage":
        return StubReply.raw(GARBAGE_BODY, status=200, content_type="application/json")
    if plan.kind == "drop":
        if request.stream:
            return StubReply.dropped("This answer is cut off in the middle of a sentence",
                                     after=3, chunk_size=6)
        return StubReply.raw('{"id": "chatcmpl-stub", "choices": [{"message": {"content": "cut',
                             status=200)
    return StubReply.overflow()


def with_faults(plan: FaultPlan, rule: Rule) -> Rule:
    """``rule`` behind ``plan``: the first ``plan.times`` requests (all, when ``None``)
    get the fault, the others ``rule``'s answer."""
    lock = threading.Lock()
    seen = [0]

    def faulty(request: StubRequest) -> ReplyLike:
        with lock:
            seen[0] += 1
            hit = plan.times is None or seen[0] <= plan.times
        return fault_reply(plan, request) if hit else rule(request)

    return faulty
