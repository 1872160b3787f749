"""The script's next reply as one wire's HTTP response (shared by the stub's routes).

Every wire answers the same way — the reply's delay, then its raw body, its error, its
JSON answer or its event stream (cut after ``drop_after`` events when it says so) — and
differs only in the shapes, which the route passes in.
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
    send: Callable[[list[Event], StubReply], AsyncIterator[bytes]],
) -> Response:
    """Answer ``request`` with the script's next reply after its delay: a raw body as it
    is, an error as ``error`` shapes it, a plain request with ``answer``, a streaming one
    with the ``events`` of the reply written by ``send`` (its pacing and pauses) — only
    the first ``drop_after`` of them when the reply drops the stream, the response then
    left unfinished unless the drop is clean."""
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
    return SSEResponse(send(stream, reply),
                       complete=reply.drop_after is None or reply.drop_mode == "clean")
