"""The service's archive: a conversation's stored messages, searched by the database.

:class:`ConversationArchive` implements :class:`ctxstack.compaction.Archive` over

* the conversation's stored ``user``/``assistant`` messages — they *are* the archive: a
  message DbMemory summarised or trimmed is still in the table (ref ``m<seq>``);
* ``archived_messages`` — what a turn's guard cleared or dropped that is not stored
  itself, tool outputs mostly (ref ``a<id>``);
* summaries (:class:`~ctxstack.compaction.SummaryStore`): the compaction checkpoints
  (``c<id>``, their hierarchy derived from the rows, :mod:`ctxstack.store.summaries`) and
  the summaries this turn's guard makes (``s<n>``, kept for the turn: the one that folds
  stored messages becomes the next checkpoint), and the checkpoint the turn's load offers
  before it is saved (``c0``). ``"summary"`` names the newest.

Search is the library's hybrid ranking (:mod:`ctxstack.compaction._archive`: word BM25
fused with character n-gram BM25 by reciprocal rank), run over candidates the database
picks with its own full-text machinery, each half by its own rank:

* **words** — SQLite FTS5 with the ``porter unicode61`` tokenizer ranked by ``bm25()``,
  PostgreSQL ``to_tsvector('english', …)`` ranked by ``ts_rank`` (migration 0010); the
  query's stop words are left out;
* **characters** — SQLite FTS5 with the ``trigram`` tokenizer, PostgreSQL ``pg_trgm``-
  indexed ``ILIKE`` and ``simple`` full-text search (migration 0004), for Chinese,
  Japanese and identifiers.

The candidates of both are then ranked in Python by the same fused ranking as the
in-memory :class:`~ctxstack.compaction.HistoryArchive`, so both backends and the library
order results alike — replies included: a stored candidate that asks a question brings
its reply (the next stored message, by ``seq``, of the other role) into the ranking,
linked to it, so the reply is credited with the question's score as in memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, and_, column, func, or_, select, text
from sqlalchemy import table as table_clause
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.compaction import ArchiveHit, HistoryArchive, SummaryNode
from ctxstack.compaction._archive import (
    ARCHIVE_REF_KEY,
    FUSION_DEPTH,
    MAX_QUERY_CHARS,
    STOP_WORDS,
    asks_question,
    fts_match,
    normalize_text,
    query_words,
)
from ctxstack.compaction._summaries import LATEST_SUMMARY_REF
from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage
from ctxstack.messages._model import binary_note
from ctxstack.store.checkpoints import CheckpointCandidate
from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.messages import HISTORY_ROLES
from ctxstack.store.models import ArchivedMessage, Message
from ctxstack.store.summaries import CHECKPOINT_REF, PENDING_ID, Checkpoint, checkpoint_nodes

CANDIDATES = 200
"""Rows the database returns per source before ranking."""
MAX_TERMS = 24
_REF = re.compile(r"^([ma])(\d+)$")
_SEARCH_OBJECTS = re.compile(r"_fts(_|$)|_content_(trgm|tsv)$")
_PUNCTUATION = "?!.,;:\"'()[]{}"
_WORD_FTS = {"messages": "messages_fts_words", "archived_messages": "archived_messages_fts_words"}


def is_search_object(name: str | None) -> bool:
    """Whether a database object is one of the search tables or indexes of migrations 0004
    and 0010 (outside the SQLAlchemy models; schema comparisons skip them)."""
    return bool(name) and bool(_SEARCH_OBJECTS.search(name or ""))


def query_terms(query: str) -> list[str]:
    """Terms to find candidates by: whitespace words of three or more characters (stop
    words left out), and for text without spaces (CJK) its overlapping trigrams (bigrams
    for a two-character query). At most :data:`MAX_TERMS`, longest first."""
    norm = normalize_text(query)
    terms: list[str] = []
    for word in norm.split():
        if word.strip(_PUNCTUATION) in STOP_WORDS:
            continue
        if word.isascii():
            if len(word) >= 3:
                terms.append(word)
        elif len(word) <= 3:
            terms.append(word)
        else:
            terms.extend(word[i : i + 3] for i in range(len(word) - 2))
    if not terms and norm:
        terms.append(norm[:3])
    unique = list(dict.fromkeys(terms))
    return sorted(unique, key=len, reverse=True)[:MAX_TERMS]


class ConversationArchive:
    """:class:`~ctxstack.compaction.Archive` over one conversation (see the module doc).

    Args:
        factory: the store's session factory.
        conversation_id: whose messages.
        before_seq: only stored messages with a smaller ``seq`` are part of the archive
            (the current question and later ones are not history yet).
        hidden: stored messages the load already moved out of the context (DbMemory's
            summarised or trimmed count): with what this archive adds, :func:`len`.
        pending: the checkpoint the turn's load offers, not saved yet (its summary is in
            the context): summary ``c0`` until then, and the newest.
    """

    def __init__(
        self, factory: SessionFactory, conversation_id: str, *, before_seq: int | None = None,
        hidden: int = 0, pending: CheckpointCandidate | None = None,
    ) -> None:
        self.factory = factory
        self.conversation_id = conversation_id
        self.before_seq = before_seq
        self.pending = (None if pending is None
                        else Checkpoint(PENDING_ID, pending.last_seq, pending.summary))
        self.hidden = max(0, hidden)
        self._added = 0
        self._summaries: dict[str, SummaryNode] = {}

    def __len__(self) -> int:
        return self.hidden + self._added

    def __repr__(self) -> str:
        return f"ConversationArchive({self.conversation_id!r}, {len(self)} archived)"

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Stored messages keep their ``m<seq>`` ref; others are written to
        ``archived_messages`` (one transaction) and get ``a<id>``."""
        refs: list[str | None] = []
        rows: list[tuple[int, ArchivedMessage]] = []
        for i, message in enumerate(messages):
            known = message.metadata.get(ARCHIVE_REF_KEY)
            seq = message.metadata.get("seq")
            if isinstance(known, str) and _REF.match(known):
                refs.append(known)
            elif isinstance(seq, int) and not isinstance(seq, bool):
                refs.append(f"m{seq}")
            else:
                refs.append(None)
                meta: dict[str, Any] = {}
                if message.tool_calls:
                    meta["tool_calls"] = [c.to_openai() for c in message.tool_calls]
                if message.tool_call_id:
                    meta["tool_call_id"] = message.tool_call_id
                rows.append((i, ArchivedMessage(
                    conversation_id=self.conversation_id, role=message.role,
                    name=(message.name or "")[:64] or None, content=_archived_text(message),
                    meta=meta)))
        if rows:
            async with transaction(self.factory, "archiving messages") as session:
                session.add_all([row for _, row in rows])
                await session.flush()
                for i, row in rows:
                    refs[i] = f"a{row.id}"
        self._added += len(messages)
        return [r for r in refs if r is not None]

    async def get(self, ref: str) -> ChatMessage | None:
        """The message ``ref`` names in this conversation, or None."""
        if not isinstance(ref, str):
            raise InputError(f"get: ref must be a string, got {type(ref).__name__}")
        match = _REF.match(ref.strip())
        if match is None:
            return None
        kind, number = match.group(1), int(match.group(2))
        async with reading(self.factory, "reading an archived message") as session:
            if kind == "m":
                stmt = select(Message).where(*self._stored(), Message.seq == number)
                row = (await session.scalars(stmt)).first()
                return None if row is None else _stored_message(row)
            arow = await session.get(ArchivedMessage, number)
            if arow is None or arow.conversation_id != self.conversation_id:
                return None
            return _archived_message(arow)

    async def add_summary(self, node: SummaryNode) -> str:
        """Keep a summary the turn's guard made (``s<n>``, for the turn)."""
        if not isinstance(node, SummaryNode):
            raise InputError(f"add_summary: expected a SummaryNode, got {type(node).__name__}")
        ref = f"s{len(self._summaries) + 1}"
        self._summaries[ref] = node.model_copy(update={"ref": ref})
        return ref

    def context_ref(self, ref: str) -> str:
        """What a summary this turn's guard makes names in its text: ``"summary"`` (the
        newest), since its own ``s<n>`` ends with the turn while its text lives on as the
        next checkpoint, which later turns load — and expand as the newest one."""
        return LATEST_SUMMARY_REF

    async def get_summary(self, ref: str) -> SummaryNode | None:
        """A checkpoint's node (``c<id>``), a summary of this turn (``s<n>``), or with
        ``"summary"`` the newest of them; None if there is none."""
        if not isinstance(ref, str):
            raise InputError(f"get_summary: ref must be a string, got {type(ref).__name__}")
        ref = ref.strip()
        if ref == LATEST_SUMMARY_REF and self._summaries:
            return self._summaries[f"s{len(self._summaries)}"]
        if ref in self._summaries:
            return self._summaries[ref]
        match = CHECKPOINT_REF.match(ref)
        if match is None and ref != LATEST_SUMMARY_REF:
            return None
        async with reading(self.factory, "reading the conversation's summaries") as session:
            nodes = await checkpoint_nodes(session, self.conversation_id, self.before_seq,
                                           self.pending)
        if match is None:  # the newest checkpoint (listed last)
            return list(nodes.values())[-1] if nodes else None
        return nodes.get(int(match.group(1)))

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """Database candidates ranked by n-gram BM25 (see the module doc)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("search: query must be a non-empty text")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"search: k must be a positive integer, got {k!r}")
        query = query[:MAX_QUERY_CHARS]
        terms = query_terms(query)
        words = query_words(query)
        ranker = HistoryArchive(in_order=False)
        refs: dict[str, str] = {}
        local_of: dict[str, str] = {}

        async def rank(candidates: dict[str, ChatMessage]) -> None:
            for ref, message in candidates.items():
                if ref not in local_of:
                    (local,) = await ranker.add([message.replace(metadata={
                        k2: v for k2, v in message.metadata.items() if k2 != ARCHIVE_REF_KEY})])
                    refs[local] = ref
                    local_of[ref] = local

        async with reading(self.factory, "searching the conversation archive") as session:
            found: dict[str, ChatMessage] = {}
            for model in (Message, ArchivedMessage):
                found.update(await self._word_candidates(session, model, words))
                found.update(await self._candidates(session, model, terms))
            await rank(found)
            # Only a question the fused ranking lists lends anything: fetch their replies.
            depth = max(k, FUSION_DEPTH)
            listed = {refs[r] for r in (*ranker.word_ranking(query, depth),
                                        *ranker.ngram_ranking(query, depth))}
            replies = await self._replies(session, {r: found[r] for r in listed})
        await rank({ref: message for ref, message in replies.values()})
        for question, (reply, _) in replies.items():
            ranker.link_reply(local_of[question], local_of[reply])
        hits = await ranker.search(query, k=k)
        ranker.close()
        return [
            hit.model_copy(update={
                "ref": refs[hit.ref],
                "message": hit.message.replace(metadata={
                    **hit.message.metadata, ARCHIVE_REF_KEY: refs[hit.ref]}),
            })
            for hit in hits
        ]

    # ------------------------------------------------------------------ internals
    async def _replies(self, session: AsyncSession, listed: dict[str, ChatMessage]
                       ) -> dict[str, tuple[str, ChatMessage]]:
        """The reply of each listed stored message that asks a question: the next stored
        history message by ``seq``, when its role is the other one. Rows are numbered
        without gaps, so the next ``seq`` is looked up by index; a question whose next row
        is not history (another role, or past ``before_seq``) has no reply here."""
        asking = {message.metadata["seq"]: ref for ref, message in listed.items()
                  if ref.startswith("m") and asks_question(message)}
        if not asking:
            return {}
        rows = (await session.scalars(select(Message).where(
            *self._stored(), Message.seq.in_([seq + 1 for seq in asking])))).all()
        out = {}
        for row in rows:
            question = asking[row.seq - 1]
            if row.role != listed[question].role:
                out[question] = (f"m{row.seq}", _stored_message(row))
        return out

    def _stored(self) -> list[Any]:
        conditions = [Message.conversation_id == self.conversation_id,
                      Message.role.in_(HISTORY_ROLES)]
        if self.before_seq is not None:
            conditions.append(Message.seq < self.before_seq)
        return conditions

    def _scope(self, model: type[Message] | type[ArchivedMessage]) -> list[Any]:
        if model is Message:
            return self._stored()
        return [ArchivedMessage.conversation_id == self.conversation_id]

    async def _word_candidates(
        self, session: AsyncSession, model: type[Message] | type[ArchivedMessage],
        words: list[str],
    ) -> list[tuple[str, ChatMessage]]:
        """The best :data:`CANDIDATES` word matches by the database's own rank (FTS5
        ``bm25()`` on SQLite, ``ts_rank`` on PostgreSQL)."""
        if not words:
            return []
        table = model.__tablename__
        dialect = session.get_bind().dialect.name
        if dialect == "sqlite":
            fts = _WORD_FTS[table]
            index = table_clause(fts, column("rowid"))
            ranked = (select(model.id)
                      .join_from(model, index, index.c.rowid == model.id)
                      .where(text(f"{fts} MATCH :match").bindparams(match=fts_match(words)),
                             *self._scope(model))
                      .order_by(text(f"bm25({fts})")).limit(CANDIDATES))
            ids = list((await session.scalars(ranked)).all())
            if not ids:
                return []
            rows = (await session.scalars(select(model).where(model.id.in_(ids)))).all()
        else:
            tsv = func.to_tsvector("english", func.coalesce(model.content, ""))
            tsq = func.to_tsquery("english", " | ".join(words))
            stmt = (select(model).where(*self._scope(model), tsv.op("@@")(tsq))
                    .order_by(func.ts_rank(tsv, tsq).desc()).limit(CANDIDATES))
            rows = (await session.scalars(stmt)).all()
        return _refs(model, rows)

    async def _candidates(
        self, session: AsyncSession, model: type[Message] | type[ArchivedMessage],
        terms: list[str],
    ) -> list[tuple[str, ChatMessage]]:
        if not terms:
            return []
        stmt: Select[Any]
        if model is Message:
            stmt = select(Message).where(*self._stored())
        else:
            stmt = select(ArchivedMessage).where(
                ArchivedMessage.conversation_id == self.conversation_id)
        dialect = session.get_bind().dialect.name
        table = model.__tablename__
        if dialect == "sqlite":
            long_terms = [t for t in terms if len(t) >= 3]
            likes = [model.content.like(f"%{_escape(t)}%", escape="\\")
                     for t in terms if len(t) < 3]
            clauses = likes
            if long_terms:
                match = " OR ".join('"' + t.replace('"', '""') + '"' for t in long_terms)
                clauses.append(model.id.in_(
                    select(text("rowid")).select_from(text(f"{table}_fts"))
                    .where(text(f"{table}_fts MATCH :match").bindparams(match=match))))
            stmt = stmt.where(or_(*clauses))
        else:
            tsv = func.to_tsvector("simple", func.coalesce(model.content, ""))
            words = [t for t in terms if t.isascii()]
            clauses = [model.content.ilike(f"%{_escape(t)}%", escape="\\") for t in terms]
            if words:
                clauses.append(tsv.op("@@")(func.plainto_tsquery("simple", " ".join(words))))
            stmt = stmt.where(and_(or_(*clauses)))
        order = model.seq.desc() if model is Message else model.id.desc()
        rows = (await session.scalars(stmt.order_by(order).limit(CANDIDATES))).all()
        return _refs(model, rows)


def _refs(model: type[Message] | type[ArchivedMessage], rows: Sequence[Any]
          ) -> list[tuple[str, ChatMessage]]:
    if model is Message:
        return [(f"m{r.seq}", _stored_message(r)) for r in rows]
    return [(f"a{r.id}", _archived_message(r)) for r in rows]


def _archived_text(message: ChatMessage) -> str:
    """What is archived (and indexed) of a message: its text, and a note naming each audio
    or file part — never the part's base64, which is no text to search, and may be
    megabytes."""
    if not message.binary_parts:
        return message.text
    return " ".join([message.text, *map(binary_note, message.binary_parts)]).strip()


def _escape(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _stored_message(row: Message) -> ChatMessage:
    return ChatMessage(role=row.role, content=row.content or "",
                       metadata={"seq": row.seq, ARCHIVE_REF_KEY: f"m{row.seq}"})


def _archived_message(row: ArchivedMessage) -> ChatMessage:
    meta = {ARCHIVE_REF_KEY: f"a{row.id}"}
    name = row.name
    if row.role == "tool":
        # A tool result alone would be an orphan in a context; it is shown as text.
        return ChatMessage(role="assistant", content=f"[tool output of {name or 'a tool'}]\n"
                           f"{row.content}", metadata=meta)
    return ChatMessage(role=row.role, content=row.content,
                       name=name, metadata=meta)
