"""Chat habits and resumable streams: regenerate, edit, compact now, resume, stop.

Every route checks that the conversation is the caller's first (404 otherwise, even
while a turn runs); a route that changes the conversation claims it like a turn does, so
it answers 409 while a turn is running there.

* ``POST /api/conversations/{id}/regenerate`` — answer the newest question again: what
  followed it (the answer, injects) is deleted, the question and its images stay, and a
  new turn streams like ``POST /api/chat``. The replaced answer leaves the model's
  history (it no longer exists), and a summary that covered it is dropped and rebuilt
  on the next turn (:mod:`ctxstack.store.rewrite`).
* ``POST /api/conversations/{id}/messages/{message_id}/edit`` — replace a sent question
  (and everything after it) with a new text (images kept unless ``file_ids`` is given)
  and answer it.
* ``GET /api/conversations/{id}/compact-preview`` / ``POST …/compact`` — Compact now
  (:mod:`ctxstack.server.compact_now`).
* ``GET /api/conversations/{id}/stream`` — the running turn's events from the start, or
  from ``Last-Event-ID`` (header, or ``last_event_id`` query parameter) — from any worker
  or host (:mod:`ctxstack.server.streams`); 204 when there is nothing to resume.
* ``POST /api/conversations/{id}/stop`` — stop the running turn wherever it runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response
from pydantic import Field, field_validator
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.messages._model import kind_metadata
from ctxstack.server.auth import UserDep
from ctxstack.server.compact_now import CompactNowOut, CompactPreviewOut, compact, plan
from ctxstack.server.errors import NoRunningTurnError
from ctxstack.server.identity import CurrentUser
from ctxstack.server.lifecycle import TurnLease
from ctxstack.server.schemas import (
    MAX_IMAGES_PER_MESSAGE,
    MAX_QUERY_CHARS,
    ErrorOut,
    Mode,
    _In,
    _not_blank,
)
from ctxstack.server.sse import event_stream
from ctxstack.server.sse import openapi_schema as sse_openapi_schema
from ctxstack.server.state import ServiceState, service_state
from ctxstack.server.streams import follow_log, parse_event_id
from ctxstack.server.turn import TurnSpec
from ctxstack.server.turn_start import new_turn_id, start_turn
from ctxstack.store import conversations as conv_store
from ctxstack.store.errors import NotFoundError
from ctxstack.store.files import FileRecord
from ctxstack.store.messages import NewMessage, append_messages_in
from ctxstack.store.rewrite import Question, delete_from, last_question, question_by_id
from ctxstack.tokens import DEFAULT_COUNTER, UsageMeter

router = APIRouter(prefix="/api")

_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": sse_openapi_schema()[0]}},
          "description": "The turn's SSE frames, as ``POST /api/chat`` sends them."},
    404: {"model": ErrorOut, "description": "Not found (or not yours)."},
    409: {"model": ErrorOut, "description": "A turn is already running here."},
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "Nothing to do (see the detail)."},
    404: {"model": ErrorOut, "description": "Not found (or not yours)."},
    409: {"model": ErrorOut, "description": "A turn is running here."},
}


class RegenerateRequest(_In):
    mode: Mode | None = Field(None, description="Defaults to the question's own mode.")


class EditRequest(_In):
    query: str = Field(..., min_length=1, max_length=MAX_QUERY_CHARS)
    mode: Mode | None = Field(None, description="Defaults to the question's own mode.")
    file_ids: list[str] | None = Field(
        None, max_length=MAX_IMAGES_PER_MESSAGE,
        description="The new question's images; omitted: the edited question's are kept.")

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, v: str) -> str:
        return _not_blank(v, "query")


def _state(request: Request) -> ServiceState:
    return service_state(request)


async def _images(state: ServiceState, user_id: int, file_ids: list[str], *,
                  strict: bool) -> list[FileRecord]:
    """The caller's files in order; ``strict``: a missing one is a 404 (ids the client
    sent), else skipped (ids stored on a question whose file was since deleted)."""
    if not file_ids:
        return []
    found = await state.files.infos(user_id, file_ids)
    missing = [f for f in file_ids if f not in found]
    if missing and strict:
        raise NotFoundError(f"file {missing[0]!r} not found")
    return [found[f] for f in dict.fromkeys(file_ids) if f in found]


def _mode(requested: Mode | None, question: Question) -> Mode:
    if requested is not None:
        return requested
    return "dag" if question.mode == "dag" else "react"


# ---------------------------------------------------------------------------- rewrite
async def _answer_again(
    request: Request, user: CurrentUser, cid: str, *,
    find: Callable[[AsyncSession], Awaitable[Question]],
    file_ids: list[str] | None,
    rewrite: Callable[[AsyncSession, Question, list[FileRecord]], Awaitable[None]],
    query: Callable[[Question], str],
    mode: Mode | None,
) -> Response:
    """A turn that answers a question again after rewriting the history from it on.

    In the claim's transaction: the conversation must be the user's, ``find`` gives the
    question, and its images are resolved — ``file_ids`` when given (each must exist),
    else the question's own (a deleted one skipped); then ``rewrite`` changes the
    history. The turn asks ``query(question)`` in ``mode`` (default: the question's).
    """
    started = time.perf_counter()
    state = _state(request)
    turn_id = new_turn_id()
    found: dict[str, Any] = {}

    async def check(session: AsyncSession) -> None:
        await conv_store.get_conversation_in(session, cid, owner_id=user.id)
        question = await find(session)
        found["question"] = question
        if file_ids is None:
            ids, strict = [str(i.get("file_id")) for i in question.images], False
        else:
            ids, strict = file_ids, True
        found["images"] = await _images(state, user.id, ids, strict=strict)

    async def write(session: AsyncSession) -> None:
        await rewrite(session, found["question"], found["images"])

    def spec() -> TurnSpec:
        question: Question = found["question"]
        return TurnSpec(turn_id=turn_id, user_id=user.id, conversation_id=cid,
                        query=query(question), mode=_mode(mode, question),
                        images=found["images"])

    return await start_turn(state, cid, turn_id=turn_id, check=check, write=write,
                            spec=spec, started=started)


@router.post("/conversations/{conversation_id}/regenerate", tags=["chat"],
             responses=_STREAM)
async def regenerate(request: Request, user: UserDep, conversation_id: str,
                     body: RegenerateRequest | None = None) -> Response:
    """Answer the newest question again, replacing what followed it (see the module
    docstring); streams the new turn."""
    cid = conversation_id

    async def rewrite(session: AsyncSession, question: Question,
                      images: list[FileRecord]) -> None:
        await delete_from(session, cid, question.seq + 1)

    return await _answer_again(
        request, user, cid, find=lambda session: last_question(session, cid), file_ids=None,
        rewrite=rewrite, query=lambda question: question.content,
        mode=body.mode if body else None)


@router.post("/conversations/{conversation_id}/messages/{message_id}/edit", tags=["chat"],
             responses={**_STREAM, 400: {"model": ErrorOut,
                                         "description": "The message is not a question."}})
async def edit_question(request: Request, user: UserDep, conversation_id: str,
                        message_id: int, body: EditRequest) -> Response:
    """Replace a sent question and everything after it, then answer the new text."""
    cid = conversation_id

    async def rewrite(session: AsyncSession, question: Question,
                      images: list[FileRecord]) -> None:
        await delete_from(session, cid, question.seq)
        meta = kind_metadata("query", mode=_mode(body.mode, question), edited=True)
        if images:
            meta["images"] = [{"file_id": r.id, "mime_type": r.mime_type} for r in images]
        await append_messages_in(session, cid, [NewMessage(role="user", content=body.query,
                                                           metadata=meta)],
                                 owner_id=user.id)

    return await _answer_again(
        request, user, cid, find=lambda session: question_by_id(session, cid, message_id),
        file_ids=body.file_ids, rewrite=rewrite, query=lambda question: body.query,
        mode=body.mode)


# ---------------------------------------------------------------------------- compact now
@router.get("/conversations/{conversation_id}/compact-preview",
            response_model=CompactPreviewOut, tags=["conversations"], responses=_ERRORS)
async def compact_preview(request: Request, user: UserDep,
                          conversation_id: str) -> CompactPreviewOut:
    """What Compact now would summarise, and the estimated saving (nothing changes)."""
    state = _state(request)
    main, fast = await state.budgets()
    _, fast_llm = state.llms.for_turn(main, fast, UsageMeter())
    planned = await plan(state.factory, conversation_id, user.id, budget=main,
                         fast_llm=fast_llm,
                         counter=state.llms.counter("main") or DEFAULT_COUNTER)
    return planned.preview


@router.post("/conversations/{conversation_id}/compact", response_model=CompactNowOut,
             tags=["conversations"], responses=_ERRORS)
async def compact_now(request: Request, user: UserDep, conversation_id: str) -> CompactNowOut:
    """Summarise now (what the preview listed); the next turn starts from the summary.
    Holds the conversation's claim while it runs (409 if a turn is running)."""
    state = _state(request)
    cid = conversation_id

    async def check(session: AsyncSession) -> None:
        await conv_store.get_conversation_in(session, cid, owner_id=user.id)

    lease = await TurnLease.claim(state.injects, cid, new_turn_id(),
                                  lease_seconds=state.settings.turn_lease, check=check,
                                  factory=state.factory)
    try:
        main, fast = await state.budgets()
        _, fast_llm = state.llms.for_turn(main, fast, UsageMeter())
        return await compact(state.factory, cid, user.id, budget=main, fast_llm=fast_llm,
                             counter=state.llms.counter("main") or DEFAULT_COUNTER)
    finally:
        with contextlib.suppress(Exception):  # lost or unreachable: release still runs
            await lease.finish()
        await lease.release()


# ---------------------------------------------------------------------------- streams
@router.get("/conversations/{conversation_id}/stream", tags=["chat"], responses={
    **_STREAM, 204: {"description": "No running turn (or that stream expired)."}})
async def resume_stream(
    request: Request, user: UserDep, conversation_id: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id_query: Annotated[str | None, Query(alias="last_event_id",
                                                     max_length=80)] = None,
) -> Response:
    """The conversation's running turn as SSE: from the start, or after
    ``Last-Event-ID`` (an id this service sent: ``<turn>.<n>``); replays what was missed
    and continues live, from any worker or host."""
    state = _state(request)
    await conv_store.get_conversation(state.factory, conversation_id, owner_id=user.id)
    hub = state.streams
    resume = parse_event_id(last_event_id or last_event_id_query)
    after = 0
    if resume is not None:
        info = await hub.log.info(resume[0])
        after = resume[1]
    else:
        info = await hub.log.latest(conversation_id)
        if info is not None and info.ended:
            info = None
    if info is None or info.conversation_id != conversation_id:
        return Response(status_code=204)
    keepalive = state.settings.keepalive_seconds
    local = hub.local.get(info.turn_id)
    if resume is None and local is not None and local.ended:
        return Response(status_code=204)  # ended here; its log's last write may lag
    if local is not None:
        return event_stream(local.frames(after), keepalive_seconds=keepalive,
                            on_disconnect=local.attach())

    followed = info.turn_id

    async def running() -> bool:
        """Whether the followed turn may still run: a newer turn of the conversation
        means it ended (one turn at a time), else the conversation's claim says."""
        newest = await hub.log.latest(conversation_id)
        if newest is not None and newest.turn_id != followed:
            return False
        return await state.injects.is_running(conversation_id)

    return event_stream(follow_log(hub, info.turn_id, after, running),
                        keepalive_seconds=keepalive)


@router.post("/conversations/{conversation_id}/stop", status_code=202, tags=["chat"],
             responses={404: _ERRORS[404], 409: {"model": ErrorOut,
                                                 "description": "No turn is running."}})
async def stop_turn(request: Request, user: UserDep, conversation_id: str) -> Response:
    """Stop the running turn (it saves what it produced, status "stopped"), on whichever
    worker runs it."""
    state = _state(request)
    await conv_store.get_conversation(state.factory, conversation_id, owner_id=user.id)
    info = await state.streams.log.latest(conversation_id)
    if info is None or info.ended:
        raise NoRunningTurnError("no turn is running in this conversation")
    local = state.streams.local.get(info.turn_id)
    if local is not None:
        local.stop()
    else:
        await state.streams.log.request_stop(info.turn_id)
    return Response(status_code=202)


__all__ = ["router"]
