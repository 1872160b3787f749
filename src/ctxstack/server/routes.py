"""The HTTP API: conversations, messages, chat turns, injects, files, model configs.

Every route that touches user data depends on :func:`~ctxstack.server.auth.current_user`
and passes the caller's id to the store, which answers "not found" for anyone else's rows:
another user's conversation or file is a 404 on every route, indistinguishable from one
that does not exist.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, HTTPException, Query, Request, UploadFile
from fastapi.responses import Response
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack import __version__
from ctxstack.budget import ModelBudget
from ctxstack.messages._model import kind_metadata
from ctxstack.server.auth import AdminDep, UserDep
from ctxstack.server.compactions import CompactionOut, list_compactions
from ctxstack.server.injects import MAX_INJECT_CHARS
from ctxstack.server.persist import interrupted_answer, stored_events, unanswered_question
from ctxstack.server.schemas import (
    MAX_INT,
    BudgetOut,
    ChatRequest,
    ConversationCreate,
    ConversationOut,
    ConversationRename,
    ErrorOut,
    FileOut,
    ImageRef,
    InfoOut,
    InjectOut,
    InjectRequest,
    MeOut,
    MessageOut,
    ModelConfigIn,
    ModelConfigOut,
    StoredEvent,
    UsageOut,
    check_text,
)
from ctxstack.server.sse import openapi_schema as sse_openapi_schema
from ctxstack.server.state import ServiceState, service_state
from ctxstack.server.turn import TurnSpec
from ctxstack.server.turn_start import new_turn_id, start_turn
from ctxstack.store import conversations as conv_store
from ctxstack.store import model_configs as config_store
from ctxstack.store.errors import NotFoundError
from ctxstack.store.files import FileRecord
from ctxstack.store.messages import (
    MessageRecord,
    NewMessage,
    append_messages_in,
    list_messages,
)

router = APIRouter(prefix="/api")

_404: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "Not found (or not yours)."}}
_TITLE_FROM_QUERY_CHARS = 60


def _state(request: Request) -> ServiceState:
    return service_state(request)


def _budget_out(budget: ModelBudget) -> BudgetOut:
    return BudgetOut(role=budget.role, context_size=budget.context_size,
                     max_output_tokens=budget.max_output_tokens,
                     usable_input_tokens=budget.usable_input_tokens, sources=budget.sources)


# ---------------------------------------------------------------------------- info
@router.get("/info", response_model=InfoOut, tags=["service"])
async def info(request: Request) -> InfoOut:
    """Public facts the page needs before signing in (no user data)."""
    state = _state(request)
    main, _ = await state.budgets()
    return InfoOut(version=__version__, demo_model=state.settings.demo_model,
                   model=state.llms.model_name, auth_required=state.settings.auth != "none",
                   budget=_budget_out(main), token_counters=state.llms.counter_names())


@router.get("/me", response_model=MeOut, tags=["service"])
async def me(user: UserDep) -> MeOut:
    """Who the token belongs to."""
    return MeOut(id=user.id, name=user.name, is_admin=user.is_admin)


# ---------------------------------------------------------------------------- conversations
@router.get("/conversations", response_model=list[ConversationOut], tags=["conversations"])
async def list_conversations(
    request: Request, user: UserDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> list[ConversationOut]:
    """The caller's conversations, most recently active first."""
    rows = await conv_store.list_conversations(_state(request).factory, user.id,
                                               limit=limit, offset=offset)
    return [ConversationOut.model_validate(r, from_attributes=True) for r in rows]


@router.post("/conversations", response_model=ConversationOut, status_code=201,
             tags=["conversations"])
async def create_conversation(
    request: Request, user: UserDep, body: ConversationCreate | None = None
) -> ConversationOut:
    """Start a conversation (its title defaults to the first question)."""
    title = body.title if body is not None and body.title else None
    row = await conv_store.create_conversation(_state(request).factory, user.id, title)
    return ConversationOut.model_validate(row, from_attributes=True)


@router.get("/conversations/{conversation_id}", response_model=ConversationOut,
            responses=_404, tags=["conversations"])
async def get_conversation(request: Request, user: UserDep,
                           conversation_id: str) -> ConversationOut:
    row = await conv_store.get_conversation(_state(request).factory, conversation_id,
                                            owner_id=user.id)
    return ConversationOut.model_validate(row, from_attributes=True)


@router.patch("/conversations/{conversation_id}", response_model=ConversationOut,
              responses=_404, tags=["conversations"])
async def rename_conversation(
    request: Request, user: UserDep, conversation_id: str, body: ConversationRename
) -> ConversationOut:
    row = await conv_store.rename_conversation(_state(request).factory, user.id,
                                               conversation_id, body.title)
    return ConversationOut.model_validate(row, from_attributes=True)


@router.delete("/conversations/{conversation_id}", status_code=204, responses=_404,
               tags=["conversations"])
async def delete_conversation(request: Request, user: UserDep, conversation_id: str) -> Response:
    """Delete a conversation with its messages (uploaded files stay with their owner)."""
    state = _state(request)
    await conv_store.get_conversation(state.factory, conversation_id, owner_id=user.id)
    if await state.injects.is_running(conversation_id):
        raise HTTPException(409, "a turn is running in this conversation; stop it first")
    await conv_store.delete_conversation(state.factory, user.id, conversation_id)
    return Response(status_code=204)


def message_out(record: MessageRecord) -> MessageOut:
    """A stored message as the page reads it (images, events and status unpacked)."""
    meta = record.metadata
    status = meta.get("status")
    mode = meta.get("mode")
    return MessageOut(
        id=record.id, seq=record.seq, role=record.role, content=record.content,
        kind=record.kind,
        images=[ImageRef(file_id=str(i.get("file_id")), mime_type=str(i.get("mime_type")))
                for i in record.image_refs],
        usage=UsageOut(input_tokens=record.usage.input_tokens,
                       output_tokens=record.usage.output_tokens) if record.usage else None,
        events=[StoredEvent.model_validate(e) for e in stored_events(meta)],
        status=status if status in ("ok", "failed", "stopped") else None,
        mode=mode if mode in ("react", "dag") else None,
        created_at=record.created_at,
    )


@router.get("/conversations/{conversation_id}/messages", response_model=list[MessageOut],
            responses=_404, tags=["conversations"])
async def get_messages(
    request: Request, user: UserDep, conversation_id: str,
    after_seq: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=10_000)] = None,
) -> list[MessageOut]:
    """The conversation's messages in order, with each answer's stored SSE events."""
    records = await list_messages(_state(request).factory, conversation_id, owner_id=user.id,
                                  after_seq=after_seq, limit=limit,
                                  roles=("user", "assistant"))
    return [message_out(r) for r in records]


@router.get("/conversations/{conversation_id}/compactions",
            response_model=list[CompactionOut], responses=_404, tags=["conversations"])
async def get_compactions(request: Request, user: UserDep,
                          conversation_id: str) -> list[CompactionOut]:
    """What the model remembers: the conversation's persisted summaries, oldest first —
    each with its prose, the facts kept verbatim and the stored messages it covers
    (``first_seq``..``last_seq``, ``summarized_messages`` of them)."""
    return await list_compactions(_state(request).factory, conversation_id, user.id)


# ---------------------------------------------------------------------------- chat
@router.post(
    "/chat", tags=["chat"], responses={
        200: {"content": {"text/event-stream": {"schema": sse_openapi_schema()[0]}},
              "description": "SSE frames (`event: <name>` / `data: <JSON payload>`): step, "
                             "inject, compact, context, answer, then done or error. The "
                             "schema is one frame as `{event, data}`."},
        409: {"model": ErrorOut, "description": "A turn is already running here."},
        **_404,
    },
)
async def chat(request: Request, user: UserDep, body: ChatRequest) -> Response:
    """Run one turn and stream it as Server-Sent Events.

    The question is stored before anything runs; the answer (or the failure, or what was
    produced before the client went away) is stored when the turn ends.
    """
    started = time.perf_counter()
    state = _state(request)
    cid = body.conversation_id
    turn_id = new_turn_id()
    images: list[FileRecord] = []
    title = ""  # the conversation's, as read in the claim's transaction

    async def owned(session: AsyncSession) -> None:
        """The caller's conversation (404 otherwise, before the claim: even while busy),
        then the caller's files (404 for one that is not)."""
        nonlocal title, images
        title = (await conv_store.get_conversation_in(session, cid, owner_id=user.id)).title
        if body.file_ids:
            found = await state.files.infos(user.id, body.file_ids)
            missing = [f for f in body.file_ids if f not in found]
            if missing:
                raise NotFoundError(f"file {missing[0]!r} not found")
            images = [found[f] for f in dict.fromkeys(body.file_ids)]

    async def store_question(session: AsyncSession) -> None:
        meta = kind_metadata("query", mode=body.mode)
        if images:
            meta["images"] = [{"file_id": r.id, "mime_type": r.mime_type} for r in images]
        question = NewMessage(role="user", content=body.query, metadata=meta)
        # an earlier question whose turn never stored an answer gets its outcome first
        before = [interrupted_answer()] if await unanswered_question(session, cid) else []
        await append_messages_in(session, cid, [*before, question], owner_id=user.id)
        if title == conv_store.DEFAULT_TITLE:
            await conv_store.rename_conversation_in(session, user.id, cid,
                                                    _title_from(body.query))

    # The ownership check, the claim and the stored question are one transaction (with
    # the database queue; Redis: a read, the claim, a write).
    return await start_turn(
        state, cid, turn_id=turn_id, check=owned, write=store_question, started=started,
        spec=lambda: TurnSpec(turn_id=turn_id, user_id=user.id, conversation_id=cid,
                              query=body.query, mode=body.mode, images=images))


def _title_from(query: str) -> str:
    line = " ".join(query.split())
    return line if len(line) <= _TITLE_FROM_QUERY_CHARS else (
        line[: _TITLE_FROM_QUERY_CHARS - 1].rstrip() + "…")


@router.post("/chat/inject", response_model=InjectOut, status_code=202, tags=["chat"],
             responses={409: {"model": ErrorOut, "description": "No turn is running."},
                        **_404})
async def inject(request: Request, user: UserDep, body: InjectRequest) -> InjectOut:
    """Send a message to the turn running in a conversation (it may run on another worker).

    The agent reads it at its next step, pinned so compaction never drops it.
    """
    state = _state(request)
    await conv_store.get_conversation(state.factory, body.conversation_id, owner_id=user.id)
    await state.injects.push(body.conversation_id, body.text[:MAX_INJECT_CHARS])
    return InjectOut()


# ---------------------------------------------------------------------------- files
@router.post("/files", response_model=FileOut, status_code=201, tags=["files"],
             responses={413: {"model": ErrorOut}, 415: {"model": ErrorOut}})
async def upload_file(
    request: Request, user: UserDep, file: Annotated[UploadFile, File(...)]
) -> FileOut:
    """Upload an image (PNG, JPEG, WebP or GIF, recognised by its bytes, not its name)."""
    state = _state(request)
    limit = state.settings.max_upload_bytes
    filename = check_text(file.filename, "file", "filename")
    data = await file.read(limit + 1)
    record = await state.files.save(user.id, data, filename=filename)
    return FileOut(id=record.id, mime_type=record.mime_type, size=record.size)


@router.get("/files/{file_id}", tags=["files"], responses={
    200: {"content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}, "image/gif": {}}},
    **_404})
async def get_file(request: Request, user: UserDep, file_id: str) -> Response:
    """The bytes of one of the caller's images."""
    loaded = await _state(request).files.load(user.id, file_id)
    return Response(loaded.data, media_type=loaded.record.mime_type, headers={
        "Cache-Control": "private, max-age=3600",
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": "inline",
    })


# ---------------------------------------------------------------------------- admin
Role = Literal["main", "fast"]


async def _config_out(state: ServiceState, role: Role) -> ModelConfigOut:
    row = await config_store.get_active_model_config(state.factory, role)
    main, fast = await state.budgets()
    return ModelConfigOut(
        role=role, model=row.model if row else None,
        context_size=row.context_size if row else None,
        max_output_tokens=row.max_output_tokens if row else None,
        tokenizer_path=row.tokenizer_path if row else None,
        budget=_budget_out(main if role == "main" else fast),
    )


@router.get("/admin/model-configs", response_model=list[ModelConfigOut], tags=["admin"],
            responses={403: {"model": ErrorOut}})
async def get_model_configs(request: Request, user: AdminDep) -> list[ModelConfigOut]:
    """The active model config of each role and the budget it resolves to (admins only)."""
    state = _state(request)
    return [await _config_out(state, "main"), await _config_out(state, "fast")]


@router.put("/admin/model-configs/{role}", response_model=ModelConfigOut, tags=["admin"],
            responses={403: {"model": ErrorOut}})
async def put_model_config(
    request: Request, user: AdminDep, role: Role, body: ModelConfigIn
) -> ModelConfigOut:
    """Set the model limits for a role; the next turn's budget is resolved from them."""
    state = _state(request)
    await config_store.set_model_config(state.factory, role, body.model,
                                        context_size=body.context_size,
                                        max_output_tokens=body.max_output_tokens,
                                        tokenizer_path=body.tokenizer_path)
    return await _config_out(state, role)
