"""A finished turn is freed by reference counting, not left to the cyclic collector.

The agent's guard holds a listener that closes over its turn (turn → agent → guard →
listener → turn). Left in place, every turn's object graph survived into the collector's
oldest generation, and collecting thousands of them at once held the event loop for
40-100 ms under load (issue 15). The turn drops its run when it ends.
"""

from __future__ import annotations

import gc
from pathlib import Path

from ctxstack.server.turn import Turn
from tests.service_support import in_process_service, turn_over, until


async def test_a_finished_turn_needs_no_cycle_collection(tmp_path: Path) -> None:
    async with in_process_service(tmp_path) as (state, client, conversation):
        gc.collect()
        gc.disable()
        try:
            assert await turn_over(client, conversation, "What is 6*7?") == "done"
            await until(lambda: not state.turns)  # the task ends right after its last event
            alive = [o for o in gc.get_objects() if isinstance(o, Turn)]
        finally:
            gc.enable()
    assert alive == []
