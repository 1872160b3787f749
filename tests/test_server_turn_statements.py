"""What one chat turn asks of the database (issue 15): the statements and the write
transactions of a steady-state turn.

Under load every statement is CPU in the worker (and, on SQLite, a hop to the driver's
thread and back), and every write transaction queues for SQLite's one writer. A turn
reads and claims its conversation and stores its question in one transaction, reads its
budgets and history, and stores its answer and releases the claim in a second one.
A conversation whose stored history is many times its budget asks no more: its history
is read from its checkpoint on, in LIMITed pages.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event

from ctxstack.store import NewMessage, append_messages
from ctxstack.store.checkpoints import read_latest_checkpoint
from ctxstack.store.db import engine_of, reading
from tests.service_support import in_process_service, turn_over, until

# Timing-dependent statements left out of the count: the worker's inject poller looks
# every 0.25 s, the lease's heartbeat beats every lease / 3 s and the stream's watchdog
# reads its stream's row every second (ctxstack.server.streams.WATCH_INTERVAL) while a
# turn runs — a turn over a second long on a loaded host reads it once or more.
_TIMED = (re.compile(r"^SELECT (DISTINCT )?pending_injects\.conversation_id, "
                     r"pending_injects\.turn_id(, pending_injects\.id)? FROM pending_injects"),
          re.compile(r"^UPDATE active_turns SET heartbeat_at=\? WHERE"),
          re.compile(r"^SELECT turn_streams\.turn_id, .*\sFROM turn_streams\s+"
                     r"WHERE turn_streams\.turn_id = \?\s*$", re.S))


def _kind(sql: str) -> str:
    """``"INSERT active_turns"``, ``"SELECT messages"``, … for one statement."""
    words = sql.split()
    verb = words[0].upper()
    if verb == "SELECT":
        table = words[words.index("FROM") + 1]
    elif verb in ("INSERT", "DELETE"):
        table = words[2]
    else:  # UPDATE
        table = words[1]
    return f"{verb} {table}"


_TURN = Counter({
    # the route: the conversation (owner check, title), the claim, the injects an earlier
    # turn left queued adopted, its question checked for an answer (issue 30: a failed or
    # killed turn's question gets an outcome) and the question, one transaction
    "SELECT conversations": 1, "INSERT active_turns": 1, "UPDATE conversations": 2,
    "INSERT messages": 2, "UPDATE pending_injects": 1,
    # budgets (admin model configs), the history after the latest checkpoint (one page
    # here; and the last exchange, above)
    "SELECT model_configs": 1, "SELECT compaction_checkpoints": 1, "SELECT messages": 2,
    # answer + release, one transaction (plus the UPDATE/INSERT counted above)
    "DELETE active_turns": 1, "DELETE pending_injects": 1,
})
"""A steady-state turn's own statements by kind (its stream's writes apart)."""


@dataclass
class Recorded:
    """What one turn ran: each statement (whitespace collapsed) with its parameters, and
    the commits."""

    statements: list[tuple[str, Any]] = field(default_factory=list)
    commits: int = 0

    def kinds(self) -> list[str]:
        """The untimed statements' kinds, in order."""
        return [_kind(s) for s, _ in self.statements if not any(p.match(s) for p in _TIMED)]


async def _record_turn(state: Any, client: httpx.AsyncClient, conversation: str,
                       query: str) -> Recorded:
    """Ask ``query`` (after any turn still running) and record its statements."""
    await until(lambda: not state.turns)  # the task ends right after its last event
    out = Recorded()
    engine = engine_of(state.factory).sync_engine

    def statement(conn: Any, cursor: Any, sql: str, params: Any, *rest: Any) -> None:
        out.statements.append((" ".join(sql.split()), params))

    def commit(conn: Any) -> None:
        out.commits += 1

    event.listen(engine, "before_cursor_execute", statement)
    event.listen(engine, "commit", commit)
    try:
        assert await turn_over(client, conversation, query) == "done"
        # the turn, then its stream's last write (else the stream was never closed)
        await until(lambda: not state.turns and not state.streams.local)
    finally:
        event.remove(engine, "before_cursor_execute", statement)
        event.remove(engine, "commit", commit)
    return out


async def test_a_turn_is_thirteen_statements_in_two_write_transactions(tmp_path: Path) -> None:
    async with in_process_service(tmp_path) as (state, client, conversation):
        assert await turn_over(client, conversation, "What is 6*7?") == "done"
        turn = await _record_turn(state, client, conversation, "And 6*8?")
    kept = turn.kinds()
    statements = [s for s, _ in turn.statements]
    commits = turn.commits
    counted = Counter(k for k in kept if "turn_stream" not in k)
    streams = Counter(k for k in kept if "turn_stream" in k)
    assert counted == _TURN
    # The turn's recorded event stream (issue 31: resumable streams; without Redis the
    # database holds it) is written apart from the turn's own transactions: opened once,
    # its events appended in batches, marked ended when the turn ends (a reader's visits
    # also touch it).
    assert streams["INSERT turn_streams"] == 1
    assert streams["INSERT turn_stream_events"] >= 1
    assert streams["UPDATE turn_streams"] >= 1
    assert set(streams) == {"INSERT turn_streams", "INSERT turn_stream_events",
                            "UPDATE turn_streams"}
    # two for the turn itself; the stream log's writes commit on their own (the open, and
    # at least one append that also marks the end)
    assert 2 + 2 <= commits <= 2 + sum(streams.values())
    # The owner check runs first in the claim's transaction (404 before 409).
    kinds = [_kind(s) for s in statements]
    assert kinds.index("SELECT conversations") < kinds.index("INSERT active_turns")


async def test_a_long_conversations_turn_reads_only_what_follows_its_checkpoint(
        tmp_path: Path) -> None:
    """A steady-state turn of a conversation whose stored history is many times its budget
    (summarised once, by its first turn) asks the database what a short one's turn asks:
    no statement more, and every read of the messages bounded — the history's pages start
    after the checkpoint and have a LIMIT. (bench_service's long- versus short-conversation
    rows rely on this: the long turn's extra cost is the budget's worth of rows it loads
    and sends, not its stored history.)"""
    stored = 600
    async with in_process_service(tmp_path) as (state, client, conversation):
        response = await client.put("/api/admin/model-configs/main", json={
            "model": "ctxstack-demo", "context_size": 32_000, "max_output_tokens": 16_000})
        assert response.status_code == 200, response.text
        await append_messages(state.factory, conversation, [
            NewMessage(role="user" if i % 2 == 0 else "assistant",
                       content=f"Message {i}: we compared the quarterly figures, order "
                               f"#A-{i}, and kept the plan under budget. " * 2)
            for i in range(stored)])
        # the first turn summarises the history and saves the checkpoint
        assert await turn_over(client, conversation, "What is 6*7?") == "done"
        turn = await _record_turn(state, client, conversation, "And 6*8?")
        async with reading(state.factory, "reading the checkpoint") as session:
            checkpoint = await read_latest_checkpoint(session, conversation)
    assert checkpoint is not None
    assert checkpoint.last_seq > stored // 2
    counted = Counter(k for k in turn.kinds() if "turn_stream" not in k)
    pages = counted.pop("SELECT messages")
    assert counted == _TURN - Counter({"SELECT messages": _TURN["SELECT messages"]})
    reads = [(sql, params) for sql, params in turn.statements
             if sql.startswith("SELECT") and "FROM messages" in sql]
    assert len(reads) == pages
    assert all(" LIMIT " in sql for sql, _ in reads), reads
    history = [params for sql, params in reads if "messages.seq > ?" in sql]
    assert history, reads
    assert all(params[1] == checkpoint.last_seq for params in history), history
