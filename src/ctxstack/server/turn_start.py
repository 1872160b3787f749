"""Starting a chat turn and answering with its (recorded, resumable) event stream.

Shared by every route that runs a turn — a new question (``POST /api/chat``), an answer
generated again and an edited question (:mod:`ctxstack.server.habit_routes`): claim the
conversation together with the route's reads and writes (one transaction with the
database queue, see :class:`~ctxstack.server.lifecycle.TurnLease`), run the
:class:`~ctxstack.server.turn.Turn` as its own task, record its events
(:class:`~ctxstack.server.streams.TurnRecorder`) and stream them with their ids.

Raises (before anything is claimed or written): whatever ``check`` raises (404 for a
conversation or file that is not the caller's); ``TurnBusyError`` (409) when a turn is
already running in the conversation.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

from fastapi.responses import Response
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.server.lifecycle import TurnLease
from ctxstack.server.sse import event_stream
from ctxstack.server.state import ServiceState
from ctxstack.server.streams import TurnRecorder
from ctxstack.server.turn import Turn, TurnSpec
from ctxstack.store.messages import append_retry_policy

Step = Callable[[AsyncSession], Awaitable[object]]


def new_turn_id() -> str:
    return secrets.token_hex(16)


async def start_turn(
    state: ServiceState, conversation_id: str, *, turn_id: str, check: Step, write: Step,
    spec: Callable[[], TurnSpec], started: float,
) -> Response:
    """Claim, run and stream one turn (see the module docstring). ``spec`` is called
    after the claim (``check`` may have filled in what it needs, e.g. the images)."""
    lease = await TurnLease.claim(
        state.injects, conversation_id, turn_id, lease_seconds=state.settings.turn_lease,
        check=check, write=write, factory=state.factory,
        retry=append_retry_policy(state.factory, conversation_id, "storing a question"))
    turn = Turn(state, spec(), lease, started=started)
    task = asyncio.create_task(turn.run(), name=f"ctxstack-turn-{turn_id}")
    state.track(task)
    recorder = TurnRecorder(state.streams, turn_id, conversation_id, turn.queue)
    await recorder.start(task)
    return event_stream(recorder.frames(), keepalive_seconds=state.settings.keepalive_seconds,
                        on_disconnect=recorder.attach())


__all__ = ["new_turn_id", "start_turn"]
