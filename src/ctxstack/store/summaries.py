"""The service's summary hierarchy: compaction checkpoints as summary nodes (issue 29).

Every checkpoint (``c<id>``, :mod:`ctxstack.store.checkpoints`) is a rolling summary of
the conversation's stored history up to its ``last_seq``, made by folding the newest
checkpoint of its time (if any) with the messages after it. So the hierarchy of
:mod:`ctxstack.compaction._summaries` follows from the rows themselves, with no column of
its own, and survives restarts wherever the checkpoints do:

* a checkpoint's **children** are the checkpoints before it (smaller ``id`` and smaller
  ``last_seq``; of several with one ``last_seq``, the newest — the one a load would have
  started from), oldest first: every earlier summary it condensed, two levels deep;
* its **own messages** are the history rows (``m<seq>``) after its newest child's
  ``last_seq`` up to its own; a child's own messages follow the same rule, so the
  children's and its own tile its whole range.

The checkpoint a turn's load offers is part of the hierarchy before it is saved
(:data:`PENDING_REF`, ``c0``): its summary is the one in that turn's context.

A rewrite (:mod:`ctxstack.store.rewrite`) deletes every checkpoint covering a deleted
message: the chains that remain still tile what they cover.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from ctxstack.compaction import SUMMARY_PREFIX, SummaryNode
from ctxstack.compaction._stages import RECALL_NOTE
from ctxstack.compaction._summaries import make_node, strip_ref_note
from ctxstack.store.messages import HISTORY_ROLES
from ctxstack.store.models import CompactionCheckpoint, Message

CHECKPOINT_REF = re.compile(r"^c(\d+)$")


def checkpoint_ref(checkpoint_id: int) -> str:
    """The summary ref of a checkpoint: ``c<id>``."""
    return f"c{checkpoint_id}"


@dataclass(frozen=True)
class Checkpoint:
    """What the hierarchy needs of one checkpoint row."""

    id: int
    last_seq: int
    summary: str


def checkpoint_text(summary: str) -> str:
    """A checkpoint's summary as a node keeps it (prefix and notes for the model removed)."""
    body = strip_ref_note(summary.removeprefix(SUMMARY_PREFIX))
    return body.replace(RECALL_NOTE, "").strip()


def children_of(target: Checkpoint, rows: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The checkpoints ``target`` condensed, oldest first (see the module doc)."""
    newest: dict[int, Checkpoint] = {}
    for row in rows:
        if row.id < target.id and row.last_seq < target.last_seq:
            kept = newest.get(row.last_seq)
            if kept is None or row.id > kept.id:
                newest[row.last_seq] = row
    return [newest[seq] for seq in sorted(newest)]


def build_nodes(rows: Sequence[Checkpoint], history: Sequence[int]) -> dict[int, SummaryNode]:
    """Every checkpoint's :class:`SummaryNode`, by id; ``history`` is the sorted ``seq`` of
    the conversation's history rows (up to the highest ``last_seq`` at least)."""

    def own(after: int, upto: int) -> list[str]:
        return [f"m{seq}" for seq in history if after < seq <= upto]

    out: dict[int, SummaryNode] = {}
    for row in sorted(rows, key=lambda r: r.id):
        children = children_of(row, rows)
        # each child's own messages, as its own node has them (rows are built in id order,
        # and every child has a smaller id)
        child_nodes = [out[c.id] for c in children]
        start = children[-1].last_seq if children else 0
        node = make_node(checkpoint_text(row.summary), own(start, row.last_seq), child_nodes)
        out[row.id] = node.model_copy(update={"ref": checkpoint_ref(row.id)})
    return out


async def read_checkpoints(session: AsyncSession, conversation_id: str,
                           before_seq: int | None = None) -> list[Checkpoint]:
    """The conversation's checkpoints (covering only ``seq < before_seq`` when given)."""
    stmt = select(CompactionCheckpoint.id, CompactionCheckpoint.last_seq,
                  CompactionCheckpoint.summary).where(
        CompactionCheckpoint.conversation_id == conversation_id)
    if before_seq is not None:
        stmt = stmt.where(CompactionCheckpoint.last_seq < before_seq)
    rows = (await session.execute(stmt.order_by(CompactionCheckpoint.id))).all()
    return [Checkpoint(int(r.id), int(r.last_seq), r.summary) for r in rows]


async def read_history_seqs(session: AsyncSession, conversation_id: str, upto: int
                            ) -> list[int]:
    """The ``seq`` of the conversation's history rows up to ``upto``, ascending."""
    stmt = (select(Message.seq)
            .where(Message.conversation_id == conversation_id, Message.seq <= upto,
                   Message.role.in_(HISTORY_ROLES))
            .order_by(Message.seq))
    return [int(s) for s in (await session.scalars(stmt)).all()]


PENDING_REF = "c0"
"""The ref of the checkpoint a turn's load offers and has not saved yet (its summary is
in the context for the turn; no saved checkpoint has id 0)."""
PENDING_ID = 0
_PENDING_ORDER = 2**62


async def checkpoint_nodes(
    session: AsyncSession, conversation_id: str, before_seq: int | None = None,
    pending: Checkpoint | None = None,
) -> dict[int, SummaryNode]:
    """:func:`build_nodes` over the conversation's checkpoints (two queries), by id; the
    newest one (what the next load starts from) is last. ``pending``, the checkpoint the
    turn's load offers (not saved yet), counts as the newest: id :data:`PENDING_ID`, ref
    :data:`PENDING_REF`."""
    rows = await read_checkpoints(session, conversation_id, before_seq)
    if pending is not None:
        rows.append(Checkpoint(_PENDING_ORDER, pending.last_seq, pending.summary))
    if not rows:
        return {}
    history = await read_history_seqs(session, conversation_id, max(r.last_seq for r in rows))
    nodes = build_nodes(rows, history)
    newest = max(rows, key=lambda r: (r.last_seq, r.id)).id
    if pending is not None:
        nodes[_PENDING_ORDER] = nodes[_PENDING_ORDER].model_copy(update={"ref": PENDING_REF})
    ordered = {**{i: n for i, n in nodes.items() if i != newest}, newest: nodes[newest]}
    return {PENDING_ID if i == _PENDING_ORDER else i: n for i, n in ordered.items()}


__all__ = ["CHECKPOINT_REF", "PENDING_ID", "PENDING_REF", "Checkpoint", "build_nodes",
           "checkpoint_nodes", "checkpoint_ref", "checkpoint_text", "children_of"]
