"""The script's next reply as one wire's HTTP response (shared by the stub's routes).

Every wire answers the same way — the reply's delay, then its raw body, its error, its
JSON answer or its event stream (paced, paused, cut after ``drop_after`` events as the
reply says) — and differs only in the shapes, which the route passes in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar

from fastapi.responses import Response

from ctxstack.llm.stub.replies import StubReply, StubRequest
from ctxstack.llm.stub.sse import SSEResponse

Event = TypeVar("Event")


class Script(Protocol):
    """What answering uses of the stub's state."""

    delay: float

    def next_reply(self, request: StubRequest) -> StubReply: ...

    async def sleep(self, seconds: float) -> None: ...


async def scripted_response(
    state: Script,
    request: StubRequest,
    *,
    error: Callable[[StubReply], Response],
    answer: Callable[[StubReply], Response],
    events: Callable[[StubReply], list[Event]],
    frame: Callable[[Event], bytes],
) -> Response:
    """Answer ``request`` with the script's next reply after its delay: a raw body as it
    is, an error as ``error`` shapes it, a plain request with ``answer``, a streaming one
    with the ``events`` of the reply, each written as ``frame`` makes it — only the first
    ``drop_after`` of them when the reply drops the stream, the response then left
    unfinished unless the drop is clean."""
    reply = state.next_reply(request)
    await state.sleep(state.delay + reply.delay)
    if reply.raw_body is not None:
        return Response(reply.raw_body, status_code=reply.status,
                        media_type=reply.content_type, headers=dict(reply.headers))
    if reply.is_error:
        return error(reply)
    if not request.stream:
        return answer(reply)
    stream = events(reply)
    if reply.drop_after is not None:
        stream = stream[: max(0, reply.drop_after)]
    return SSEResponse(_paced(state, stream, reply, frame),
                       complete=reply.drop_after is None or reply.drop_mode == "clean")


async def _paced(state: Script, events: list[Event], reply: StubReply,
                 frame: Callable[[Event], bytes]) -> AsyncIterator[bytes]:
    """The events framed, ``chunk_delay`` apart, with the reply's one ``pause`` before event
    ``pause_after`` (the state's sleep, which wakes when the stub stops)."""
    for i, event in enumerate(events):
        if reply.chunk_delay and i:
            await state.sleep(reply.chunk_delay)
        if reply.pause_after is not None and i == reply.pause_after:
            await state.sleep(reply.pause)
        yield frame(event)
