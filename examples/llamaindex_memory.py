# requires: llama_index
"""LlamaIndex + ctxstack: a FunctionAgent whose memory is fitted to a token budget.

Runs offline: the LLM is LlamaIndex's own ``MockFunctionCallingLLM`` (a tool call, then an
answer), the summariser ctxstack's ``ScriptedLLM``. With a real model, pass any
LlamaIndex function-calling LLM and a real summariser (``OpenAICompatibleLLM(...)``).

    pip install 'ctxstack[llamaindex]'
    python examples/llamaindex_memory.py
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from ctxstack import ContextGuard
from ctxstack.integrations.llamaindex import GuardedMemory
from ctxstack.testing import ScriptedLLM


def lookup(shelf: str) -> str:
    """Look a shelf up in the inventory."""
    return f"shelf {shelf}: " + ", ".join(f"item-{shelf}-{i}" for i in range(25))


def model_behaviour(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Call the tool for the shelf in the question, then answer from its output."""
    if messages[-1].role == MessageRole.TOOL:
        return ChatMessage(role="assistant", content=f"Found: {messages[-1].content[:40]}...")
    question = next(m.content or "" for m in reversed(messages) if m.role == MessageRole.USER)
    shelf = "".join(c for c in question if c.isdigit())
    return ChatMessage(role="assistant", blocks=[ToolCallBlock(
        tool_call_id=f"call_{shelf}", tool_name="lookup", tool_kwargs={"shelf": shelf})])


async def main() -> None:
    summariser = ScriptedLLM(handler=lambda messages, tools: (
        "The user has been asking about inventory shelves; each was looked up."))
    guard = ContextGuard(compact_llm=summariser)
    memory = GuardedMemory.from_defaults(guard=guard, budget=800)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup)],
                          llm=MockFunctionCallingLLM(response_generator=model_behaviour),
                          system_prompt="Answer inventory questions with lookup.")
    for turn in range(1, 13):
        answer = await agent.run(f"What is on shelf number {turn}?", memory=memory)
        print(f"turn {turn}: {answer}")
    for event in memory.events:
        print(f"  [compaction: {event.method}, {event.tokens_before}→{event.tokens_after} tokens]")
    history = await memory.aget()
    print(f"stored: {len(memory.get_all())} messages; the agent reads {len(history)}, "
          f"the first after any system prompt being: {history[0].content[:60]!r}")


if __name__ == "__main__":
    # LlamaIndex's workflow engine touches pydantic attributes that warn as deprecated.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    asyncio.run(main())
