"""A finished turn is freed by reference counting, not left to the cyclic collector.

The agent's guard holds a listener that closes over its turn (turn → agent → guard →
listener → turn). Left in place, every turn's object graph survived into the collector's
oldest generation, and collecting thousands of them at once held the event loop for
40-100 ms under load (issue 15). The turn drops its run when it ends.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import httpx

from ctxstack.server.app import create_app
from ctxstack.server.settings import Settings
from ctxstack.server.turn import Turn
from ctxstack.store.migrate import upgrade


async def _one_turn(client: httpx.AsyncClient, conversation: str) -> str:
    last = ""
    async with client.stream("POST", "/api/chat", json={
            "conversation_id": conversation, "query": "What is 6*7?"}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event:"):
                last = line[6:].strip()
    return last


async def test_a_finished_turn_needs_no_cycle_collection(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'turns.db'}"
    await upgrade(url)
    app = create_app(Settings(database_url=url, files_dir=tmp_path / "files", auth="none",
                              demo_delay=0, demo_chunk_delay=0, calibrate=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            conversation = (await client.post("/api/conversations", json={})).json()["id"]
            gc.collect()
            gc.disable()
            try:
                assert await _one_turn(client, conversation) == "done"
                state = app.state.ctxstack
                for _ in range(500):  # the task ends right after its last event
                    if not state.turns:
                        break
                    await asyncio.sleep(0.01)
                assert not state.turns
                alive = [o for o in gc.get_objects() if isinstance(o, Turn)]
            finally:
                gc.enable()
    assert alive == []
