# expect: answer: The lookup says: order A-1042: shipped.
"""Quickstart: the README's library example as a runnable script.

A ReAct agent with one tool, its context guarded by a ContextGuard that summarises with
the fast model, answering one question and then streaming a synthesised answer.

With ``LLM_BASE_URL`` (and ``LLM_API_KEY``, ``LLM_MODEL``) set it talks to that
OpenAI-compatible endpoint. Without it, it runs offline: a ``ScriptedLLM`` plays the model
(it calls the tool first, then answers from the tool's result), so the script shows the
whole flow on any machine.

Run: ``python examples/quickstart.py``. Exits 0 when the answer names the tool's result.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

from ctxstack import LLM, ChatMessage, ContextGuard, resolve_budget
from ctxstack.agent import ReActAgent, tool
from ctxstack.protocol import ToolSpec
from ctxstack.testing import ScriptedLLM


@tool
async def lookup(order_id: str) -> str:
    """Find an order.

    Args:
        order_id: the order number, e.g. "A-1042".
    """
    return f"order {order_id}: shipped"


def offline_model(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None
) -> str | ChatMessage:
    """What the scripted model answers: call ``lookup`` once, then answer from its result."""
    results = [m.text for m in messages if m.role == "tool"]
    if tools and not results:
        return ScriptedLLM.tool_call("lookup", {"order_id": "A-1042"})
    if results:
        return f"The lookup says: {results[-1]}."
    # The streamed synthesis: its prompt carries the tool results and the brief answer.
    brief = messages[-1].text.rsplit("Brief answer:", 1)[-1].strip()
    return f"Your order is on its way. ({brief})"


def models() -> tuple[LLM, LLM, str]:
    """(main model, fast model, where they come from)."""
    if os.environ.get("LLM_BASE_URL"):
        from ctxstack.llm.openai import OpenAICompatibleLLM

        llm = OpenAICompatibleLLM.from_env("main")  # LLM_BASE_URL, LLM_API_KEY, LLM_MODEL
        fast = OpenAICompatibleLLM.from_env("fast")  # FAST_LLM_* (falls back to LLM_*)
        return llm, fast, f"the endpoint at {os.environ['LLM_BASE_URL']}"
    scripted = ScriptedLLM(handler=offline_model)
    return scripted, scripted, "an offline ScriptedLLM (set LLM_BASE_URL for a real model)"


async def main() -> int:
    llm, fast, where = models()
    print(f"model: {where}")
    guard = ContextGuard(compact_llm=fast)  # summarises with the fast model

    agent = ReActAgent(llm, [lookup], guard, system_prompt="You are a support agent.",
                       budget=resolve_budget("main"))
    result = await agent.run("Where is order A-1042?")
    print(f"answer: {result.answer}")
    print(f"iterations: {result.iterations}, tool calls: {len(result.trace)}, "
          f"usage: {result.usage.input_tokens} in / {result.usage.output_tokens} out")
    print("streamed: ", end="")
    async for delta in agent.stream_answer("Where is order A-1042?", result):
        print(delta, end="", flush=True)
    print()

    if not result.trace or result.trace[0].tool != "lookup":
        print("FAILED: the agent did not call the lookup tool", file=sys.stderr)
        return 1
    if "shipped" not in result.trace[0].result_preview:
        print("FAILED: the tool result is missing from the trace", file=sys.stderr)
        return 1
    if not (result.synthesis or "").strip():
        print("FAILED: the streamed answer was empty", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
