"""The proxy's sessions: the view last forwarded per client session, its lease, its archive.

``ctxstack proxy`` keeps, per client session (:mod:`ctxstack.proxy.sessions`), the view
it forwarded after the last compaction, as a *recipe* over the client's messages (JSON:
:mod:`ctxstack.proxy.views`). A request continuing the conversation is forwarded as that
view plus its new messages, byte-identical to what went before, so the provider's prompt
cache keeps serving it; only when that overflows is the view recomputed and stored again.
Reads are one primary-key lookup; writes happen once per recompute, not per request.

The lease (``lease_owner`` / ``lease_until``) is the single flight across workers: the
worker that holds it recomputes (and may call the summariser); another waits for the new
view instead of summarising too. A lease expires on its own, so a worker that died while
holding one delays the session by at most the lease's length.

``proxy_archive`` keeps what compaction took out of a session's views, for
``ctxstack_recall``; an entry is keyed by its digest, so clearing the same tool output
again (the view recomputed) archives nothing new. ``proxy_summaries`` keeps the summaries
made for the session's views, each with the refs of what it covers, so recall can expand
one into its sources.

Every function raises :class:`~ctxstack.errors.StorageError` when the database fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from ctxstack.store.db import SessionFactory, reading, transaction
from ctxstack.store.errors import StorageError
from ctxstack.store.models import ProxyArchiveEntry, ProxySession, ProxySummary, utcnow


class SessionViewRecord(BaseModel):
    """One session's stored view (see :class:`~ctxstack.store.models.ProxySession`)."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    session_key: str
    model: str = ""
    covered: int = 0
    """Client messages the recipe stands for (0: no view yet, only a lease row)."""
    prefix_hash: str = ""
    recipe: str = ""
    view_tokens: int = 0
    covered_tokens: int = 0
    """Tokens of the client's first ``covered`` messages (by ``counter``)."""
    counter: str = ""
    summarized: int = 0
    method: str = ""
    version: int = 0
    archived: int = 0
    updated_at: datetime | None = None


async def load_session_view(factory: SessionFactory, session_key: str, *,
                            ttl: timedelta) -> SessionViewRecord | None:
    """The session's row if it was written within ``ttl``, else None."""
    # Columns, not an ORM entity: this read is on every over-budget request's path.
    stmt = select(*_VIEW_COLUMNS).where(ProxySession.session_key == session_key,
                                        ProxySession.updated_at >= utcnow() - ttl)
    async with reading(factory, "loading a proxy session") as session:
        row = (await session.execute(stmt)).first()
    return SessionViewRecord.model_construct(**row._mapping) if row is not None else None


_VIEW_COLUMNS = [getattr(ProxySession, name) for name in (
    "session_key", "model", "covered", "prefix_hash", "recipe", "view_tokens",
    "covered_tokens", "counter", "summarized", "method", "version", "archived",
    "updated_at")]


async def save_session_view(factory: SessionFactory, record: SessionViewRecord) -> None:
    """Store ``record`` as the session's view (its lease and archive count are kept)."""
    now = utcnow()
    values = {"model": record.model[:200], "covered": record.covered,
              "prefix_hash": record.prefix_hash, "recipe": record.recipe,
              "view_tokens": record.view_tokens, "covered_tokens": record.covered_tokens,
              "counter": record.counter[:100],
              "summarized": record.summarized, "method": record.method[:20],
              "updated_at": now}
    async with transaction(factory, "saving a proxy session view") as session:
        result = await session.execute(
            update(ProxySession).where(ProxySession.session_key == record.session_key)
            .values(**values, version=ProxySession.version + 1)
            .execution_options(synchronize_session=False))
        if getattr(result, "rowcount", 0):
            return
        session.add(ProxySession(session_key=record.session_key, version=1, archived=0,
                                 **values))


async def acquire_session_lease(factory: SessionFactory, session_key: str, owner: str, *,
                                seconds: float) -> bool:
    """Take the session's lease for ``seconds`` unless another owner holds a live one."""
    now = utcnow()
    until = now + timedelta(seconds=seconds)
    stmt = (update(ProxySession)
            .where(ProxySession.session_key == session_key,
                   or_(ProxySession.lease_until.is_(None), ProxySession.lease_until < now,
                       ProxySession.lease_owner == owner))
            .values(lease_owner=owner, lease_until=until)
            .execution_options(synchronize_session=False))
    async with transaction(factory, "taking a proxy session lease") as session:
        result = await session.execute(stmt)
        if getattr(result, "rowcount", 0):
            return True
        exists = await session.scalar(select(func.count()).select_from(ProxySession).where(
            ProxySession.session_key == session_key))
        if exists:
            return False
    try:
        async with transaction(factory, "creating a proxy session") as session:
            session.add(ProxySession(
                session_key=session_key, model="", covered=0, prefix_hash="", recipe="",
                view_tokens=0, covered_tokens=0, counter="", summarized=0, method="",
                version=0, archived=0,
                lease_owner=owner, lease_until=until, updated_at=now))
    except StorageError as exc:
        if isinstance(exc.__cause__, IntegrityError):
            return False  # another worker created it (and holds the lease) first
        raise
    return True


async def release_session_lease(factory: SessionFactory, session_key: str,
                                owner: str) -> None:
    """Give the lease back (only if ``owner`` still holds it)."""
    async with transaction(factory, "releasing a proxy session lease") as session:
        await session.execute(
            update(ProxySession)
            .where(ProxySession.session_key == session_key, ProxySession.lease_owner == owner)
            .values(lease_owner=None, lease_until=None)
            .execution_options(synchronize_session=False))


async def archive_session_messages(factory: SessionFactory, session_key: str,
                                   entries: Sequence[tuple[str, str]]) -> list[int]:
    """Archive ``(digest, message JSON)`` pairs; the id of each (an entry already archived
    keeps its id). Updates the session's ``archived`` count."""
    if not entries:
        return []
    digests = [d for d, _ in entries]
    async with transaction(factory, "archiving proxy messages") as session:
        found = dict((await session.execute(
            select(ProxyArchiveEntry.digest, ProxyArchiveEntry.id).where(
                ProxyArchiveEntry.session_key == session_key,
                ProxyArchiveEntry.digest.in_(set(digests))))).all())
        fresh: dict[str, ProxyArchiveEntry] = {}
        for digest, message in entries:
            if digest not in found and digest not in fresh:
                fresh[digest] = ProxyArchiveEntry(session_key=session_key, digest=digest,
                                                  message=message, created_at=utcnow())
        session.add_all(fresh.values())
        await session.flush()
        found.update({d: row.id for d, row in fresh.items()})
        total = await session.scalar(select(func.count()).select_from(ProxyArchiveEntry)
                                     .where(ProxyArchiveEntry.session_key == session_key))
        await session.execute(
            update(ProxySession).where(ProxySession.session_key == session_key)
            .values(archived=int(total or 0)).execution_options(synchronize_session=False))
    return [found[d] for d in digests]


async def load_session_archive(factory: SessionFactory, session_key: str,
                               ) -> list[tuple[int, str]]:
    """Every archived ``(id, message JSON)`` of the session, oldest first."""
    stmt = (select(ProxyArchiveEntry.id, ProxyArchiveEntry.message)
            .where(ProxyArchiveEntry.session_key == session_key)
            .order_by(ProxyArchiveEntry.id))
    async with reading(factory, "reading a proxy session archive") as session:
        return [(int(i), str(m)) for i, m in (await session.execute(stmt)).all()]


async def add_session_summary(factory: SessionFactory, session_key: str, node: str) -> int:
    """Keep one summary of the session (a ``SummaryNode`` as JSON); its id."""
    async with transaction(factory, "archiving a proxy summary") as session:
        row = ProxySummary(session_key=session_key, node=node, created_at=utcnow())
        session.add(row)
        await session.flush()
        return int(row.id)


async def load_session_summary(factory: SessionFactory, session_key: str,
                               summary_id: int | None) -> tuple[int, str] | None:
    """``(id, node JSON)`` of the session's summary ``summary_id`` (None: its newest), or
    None when the session has no such summary."""
    stmt = select(ProxySummary.id, ProxySummary.node).where(
        ProxySummary.session_key == session_key)
    stmt = (stmt.order_by(ProxySummary.id.desc()).limit(1) if summary_id is None
            else stmt.where(ProxySummary.id == summary_id))
    async with reading(factory, "reading a proxy summary") as session:
        row = (await session.execute(stmt)).first()
    return None if row is None else (int(row[0]), str(row[1]))


async def prune_proxy_sessions(factory: SessionFactory, *, ttl: timedelta) -> None:
    """Delete sessions not written for ``ttl``, and their archives and summaries."""
    cutoff = utcnow() - ttl
    async with transaction(factory, "pruning proxy sessions") as session:
        stale = select(ProxySession.session_key).where(ProxySession.updated_at < cutoff)
        await session.execute(delete(ProxyArchiveEntry).where(
            ProxyArchiveEntry.session_key.in_(stale.scalar_subquery())))
        await session.execute(delete(ProxySummary).where(
            ProxySummary.session_key.in_(stale.scalar_subquery())))
        await session.execute(delete(ProxySession).where(ProxySession.updated_at < cutoff))
