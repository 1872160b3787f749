# requires: pydantic_ai
"""A pydantic-ai agent kept within a 4,000-token budget by ctxstack (offline, no API key).

    pip install 'ctxstack[pydantic-ai]'
    python examples/pydantic_ai_agent.py

The model is pydantic-ai's own ``FunctionModel`` scripted to call a tool 30 times, so the
example runs anywhere; use ``Agent("openai:gpt-4o", ...)`` for real work. The summariser is a
second ``FunctionModel`` behind ``PydanticAISummarizer``: any pydantic-ai model can write
ctxstack's summaries.
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from ctxstack import CompactionEvent, ContextGuard
from ctxstack.integrations.pydantic_ai import (
    PydanticAISummarizer,
    history_processor,
    to_chat_messages,
)

BUDGET = 4_000
sent: list[list[ModelMessage]] = []


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    sent.append(messages)
    step = len(sent) - 1
    if step < 30:
        return ModelResponse(parts=[TextPart(f"Checking warehouse {step}."),
                                    ToolCallPart("stock", {"warehouse": step})])
    return ModelResponse(parts=[TextPart("All 30 warehouses checked: 510 units in total.")])


def summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("Checked warehouses; each holds 17 units.")])


def show(event: CompactionEvent) -> None:
    print(f"  compaction ({event.method}): {event.messages_before} → {event.messages_after} "
          f"messages, {event.tokens_before} → {event.tokens_after} tokens")


guard = ContextGuard(compact_llm=PydanticAISummarizer(FunctionModel(summarise)), on_compact=show)
agent = Agent(FunctionModel(scripted), system_prompt="You are an inventory assistant.",
              capabilities=[ProcessHistory(history_processor(guard, BUDGET))])


@agent.tool_plain
def stock(warehouse: int) -> str:
    """Units in stock at a warehouse."""
    return f"Warehouse {warehouse}: 17 units of SKU-4411. " + "audit trail line. " * 60


async def main() -> None:
    result = await agent.run("How many units of SKU-4411 are in all 30 warehouses?")
    largest = max(guard.counter.count_messages(to_chat_messages(m)) for m in sent)
    print(f"model calls: {len(sent)}, largest input: {largest} tokens (budget {BUDGET}), "
          f"compactions: {guard.totals.compactions}")
    print("answer:", result.output)
    assert largest <= BUDGET


if __name__ == "__main__":
    asyncio.run(main())
