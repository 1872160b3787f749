# requires: langchain, langchain_core
"""A LangChain v1 agent kept within a 4,000-token budget by ctxstack (offline, no API key).

    pip install 'ctxstack[langchain]'
    python examples/langchain_agent.py

The chat model is LangChain's own ``GenericFakeChatModel`` scripted to call a tool 30
times, so the example runs anywhere; swap in ``ChatOpenAI(...)`` (or any chat model) for
real use. The summariser is a second fake model behind ``LangChainSummarizer``: any
LangChain chat model can write ctxstack's summaries.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from ctxstack import ContextGuard
from ctxstack.integrations.langchain import (
    EVENT_NAME,
    ContextGuardMiddleware,
    LangChainSummarizer,
    to_chat_messages,
)

BUDGET = 4_000


class ScriptedToolModel(GenericFakeChatModel):
    """GenericFakeChatModel that accepts tools and remembers what it was sent."""

    calls: list[list[BaseMessage]] = []  # noqa: RUF012 - example brevity

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedToolModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> Any:
        self.calls.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def script() -> Iterator[AIMessage]:
    for i in range(30):
        yield AIMessage(f"Checking warehouse {i}.",
                        tool_calls=[{"name": "stock", "args": {"warehouse": i}, "id": f"c{i}"}])
    yield AIMessage("All 30 warehouses checked: 17 units each, 510 in total.")


@tool
def stock(warehouse: int) -> str:
    """Units in stock at a warehouse."""
    return f"Warehouse {warehouse}: 17 units of SKU-4411. " + "audit trail line. " * 60


class PrintEvents(AsyncCallbackHandler):
    async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == EVENT_NAME:
            print(f"  compaction ({data['method']}): {data['messages_before']} → "
                  f"{data['messages_after']} messages, {data['tokens_before']} → "
                  f"{data['tokens_after']} tokens")


async def main() -> None:
    summariser = LangChainSummarizer(GenericFakeChatModel(messages=itertools.repeat(
        AIMessage("Checked warehouses so far; each holds 17 units of SKU-4411."))))
    guard = ContextGuard(compact_llm=summariser)
    model = ScriptedToolModel(messages=script())
    agent = create_agent(model, [stock], system_prompt="You are an inventory assistant.",
                         middleware=[ContextGuardMiddleware(guard, BUDGET)])
    result = await agent.ainvoke(
        {"messages": [HumanMessage("How many units of SKU-4411 are in all 30 warehouses?")]},
        {"callbacks": [PrintEvents()], "recursion_limit": 100})
    largest = max(guard.counter.count_messages(to_chat_messages(c)) for c in model.calls)
    print(f"model calls: {len(model.calls)}, largest input: {largest} tokens "
          f"(budget {BUDGET}), compactions: {guard.totals.compactions}")
    print("answer:", result["messages"][-1].content)
    assert largest <= BUDGET


if __name__ == "__main__":
    asyncio.run(main())
