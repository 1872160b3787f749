"""What one chat turn asks of the database (issue 15): the statements and the write
transactions of a steady-state turn.

Under load every statement is CPU in the worker (and, on SQLite, a hop to the driver's
thread and back), and every write transaction queues for SQLite's one writer. A turn
reads and claims its conversation and stores its question in one transaction, reads its
budgets and history, and stores its answer and releases the claim in a second one.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from sqlalchemy import event

from ctxstack.store.db import engine_of
from tests.service_support import in_process_service, turn_over, until

# Timing-dependent statements left out of the count: the worker's inject poller looks
# every 0.25 s and the lease's heartbeat beats every lease / 3 s while a turn runs.
_TIMED = (re.compile(r"^SELECT (DISTINCT )?pending_injects\.conversation_id, "
                     r"pending_injects\.turn_id(, pending_injects\.id)? FROM pending_injects"),
          re.compile(r"^UPDATE active_turns SET heartbeat_at=\? WHERE"))


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


async def test_a_turn_is_thirteen_statements_in_two_write_transactions(tmp_path: Path) -> None:
    async with in_process_service(tmp_path) as (state, client, conversation):
        assert await turn_over(client, conversation, "What is 6*7?") == "done"
        await until(lambda: not state.turns)  # the task ends right after its last event
        statements: list[str] = []
        commits: list[int] = []
        engine = engine_of(state.factory).sync_engine
        event.listen(engine, "before_cursor_execute",
                     lambda *args: statements.append(" ".join(args[2].split())))
        event.listen(engine, "commit", lambda *args: commits.append(1))
        assert await turn_over(client, conversation, "And 6*8?") == "done"
        # the turn, then its stream's last write (else the stream was never closed)
        await until(lambda: not state.turns and not state.streams.pumps)
    kept = [_kind(s) for s in statements if not any(p.match(s) for p in _TIMED)]
    counted = Counter(k for k in kept if "turn_stream" not in k)
    streams = Counter(k for k in kept if "turn_stream" in k)
    assert counted == Counter({
        # the route: the conversation (owner check, title), the claim, the injects an
        # earlier turn left queued adopted, its question checked for an answer (issue 30:
        # a failed or killed turn's question gets an outcome) and the question, one
        # transaction
        "SELECT conversations": 1, "INSERT active_turns": 1, "UPDATE conversations": 2, "INSERT messages": 2,
        "UPDATE pending_injects": 1,
        # budgets (admin model configs), the history after the latest checkpoint (and the
        # last exchange, above)
        "SELECT model_configs": 1, "SELECT compaction_checkpoints": 1, "SELECT messages": 2,
        # answer + release, one transaction (plus the UPDATE/INSERT counted above)
        "DELETE active_turns": 1, "DELETE pending_injects": 1,
    })
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
    assert 2 + 2 <= len(commits) <= 2 + sum(streams.values())
    # The owner check runs first in the claim's transaction (404 before 409).
    kinds = [_kind(s) for s in statements]
    assert kinds.index("SELECT conversations") < kinds.index("INSERT active_turns")
