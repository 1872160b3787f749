# requires: agents, sqlalchemy, aiosqlite, alembic
"""OpenAI Agents SDK + ctxstack: a guarded, database-backed session and a per-call filter.

Runs offline: the model is the SDK's own ``ScriptedModel`` (a tool call, then an answer),
the summariser is ctxstack's ``ScriptedLLM``, the database a SQLite file in a temporary
directory. With a real model, replace ``model=`` by a model name and the summariser by
``OpenAICompatibleLLM(...)``; pass a PostgreSQL URL as ``database_url`` to share sessions
between processes.

    pip install 'ctxstack[openai-agents]'
    python examples/openai_agents_session.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from ctxstack import ContextGuard
from ctxstack.integrations.openai_agents import CtxstackSession, input_filter
from ctxstack.testing import ScriptedLLM


@function_tool
def lookup(shelf: str) -> str:
    """Look a shelf up in the inventory."""
    return f"shelf {shelf}: " + ", ".join(f"item-{shelf}-{i}" for i in range(25))


def model_behaviour(call: ModelCall) -> list[Any]:
    """Call the tool for the shelf in the question, then answer from its output."""
    last = call.input[-1] if isinstance(call.input, list) else {}
    if last.get("type") == "function_call_output":
        return [assistant_message(f"Found it: {last['output'][:40]}...")]
    question = next(i["content"] for i in reversed(call.input) if i.get("role") == "user")
    shelf = "".join(c for c in question if c.isdigit())
    return [function_call("lookup", {"shelf": shelf}, call_id=f"call_{shelf}")]


async def main() -> None:
    summariser = ScriptedLLM(handler=lambda messages, tools: (
        "The user has been asking about inventory shelves; each was looked up."))
    guard = ContextGuard(compact_llm=summariser,
                         on_compact=lambda e: print(f"  [compaction: {e.method}, "
                                                    f"{e.tokens_before}→{e.tokens_after} tokens]"))
    agent = Agent(name="inventory", instructions="Answer inventory questions with lookup.",
                  model=ScriptedModel([ModelStep.respond(model_behaviour)] * 40),
                  tools=[lookup])
    config = RunConfig(call_model_input_filter=input_filter(guard, 1_000),
                       tracing_disabled=True)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'sessions.db'}"
        session = CtxstackSession("customer-7", guard, 800, url)
        for turn in range(1, 13):
            result = await Runner.run(agent, f"What is on shelf number {turn}?",
                                      session=session, run_config=config)
            print(f"turn {turn}: {result.final_output}")
        history = await session.get_items()
        print(f"history read by the next run: {len(history)} items, "
              f"starting with a {history[0].get('role')} message")
        await session.close()


if __name__ == "__main__":
    asyncio.run(main())
