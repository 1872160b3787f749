# expect: answer: Tokyo is warmer.
"""DAG mode: plan a request as a graph of steps, run independent steps in parallel, answer.

``DAGEngine`` runs six phases: the history and the query become an *enriched query*
(summarised if over 16,000 tokens), the planner turns it into a graph of steps, the steps
run as fresh ReAct agents (independent ones in parallel, each with its own ContextGuard on
the fast model's budget), an analyzer judges the results (replanning if they fall short),
and the answer is streamed.

Offline, one ``ScriptedLLM`` plays every role, recognising each by its system prompt: the
planner answers a three-step plan (two city look-ups that can run in parallel, then a
comparison that needs both), each step agent calls the ``weather`` tool or compares what
its dependencies found, the analyzer approves, and the synthesis writes the answer from
the step results it is given. The script prints the events as they arrive.

Run: ``python examples/dag_mode.py``. Exits 0 when the run finishes with every step done
and the answer carries both tool results.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

from ctxstack import ChatMessage
from ctxstack.agent import tool
from ctxstack.budget import ModelBudget
from ctxstack.dag import (
    AnalysisEvent,
    AnswerDeltaEvent,
    DAGDoneEvent,
    DAGEngine,
    DAGErrorEvent,
    PlanCreatedEvent,
    QueryEnrichedEvent,
    StepFinishedEvent,
    StepStartedEvent,
)
from ctxstack.dag._prompts import ANALYZER_ROLE, PLANNER_ROLE, STEP_ROLE, SYNTHESIS_ROLE
from ctxstack.protocol import ToolSpec
from ctxstack.testing import ScriptedLLM

FORECASTS = {"Paris": "14°C, light rain", "Tokyo": "22°C, clear"}


@tool
async def weather(city: str) -> str:
    """Today's forecast for a city.

    Args:
        city: the city name, e.g. "Paris".
    """
    await asyncio.sleep(0.05)  # a slow service: the two look-ups overlap
    return f"{city}: {FORECASTS.get(city, 'no data')}"


PLAN = {"steps": [
    {"id": "paris", "task": "Get today's forecast for Paris", "dependencies": [],
     "tool_hint": "weather"},
    {"id": "tokyo", "task": "Get today's forecast for Tokyo", "dependencies": [],
     "tool_hint": "weather"},
    {"id": "compare", "task": "Say which city is warmer today",
     "dependencies": ["paris", "tokyo"]},
]}


def scripted(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None
) -> str | ChatMessage:
    """Every role of the offline model, told apart by the system prompt."""
    system = messages[0].text if messages and messages[0].role == "system" else ""
    task = next((m.text for m in messages if m.role == "user"), "")
    if system.startswith(PLANNER_ROLE):
        return json.dumps(PLAN)
    if system.startswith(ANALYZER_ROLE):
        return json.dumps({"achieved": True, "confidence": 0.95,
                           "reasoning": "Both forecasts and the comparison are present."})
    if system.startswith(STEP_ROLE):
        results = [m.text for m in messages if m.role == "tool"]
        if results:
            return f"Forecast: {results[-1]}"
        for city in FORECASTS:
            if f"forecast for {city}" in task.splitlines()[0]:
                return ScriptedLLM.tool_call("weather", {"city": city})
        # The comparison step: its task message carries its dependencies' results.
        temps = {c: int(f.split("°")[0]) for c, f in FORECASTS.items() if f in task}
        if len(temps) < 2:
            return "I could not see both forecasts."
        warmer = max(temps, key=lambda c: temps[c])
        return f"{warmer} is warmer today ({temps[warmer]}°C)."
    if system.startswith(SYNTHESIS_ROLE):
        prompt = messages[-1].text
        found = [f"{c} {f}" for c, f in FORECASTS.items() if f in prompt]
        verdict = "Tokyo is warmer" if "Tokyo is warmer" in prompt else "no verdict"
        return f"{verdict}. Forecasts: {'; '.join(found)}."
    return "(unexpected call)"


async def main() -> int:
    llm = ScriptedLLM(handler=scripted)
    engine = DAGEngine(llm, [weather], fast_llm=llm,
                       fast_budget=ModelBudget(role="fast", context_size=32_000,
                                               max_output_tokens=8_000))
    history = [ChatMessage.user("I'm choosing where to fly tomorrow."),
               ChatMessage.assistant("Happy to help. Which cities?")]
    done: DAGDoneEvent | None = None
    finished: list[StepFinishedEvent] = []
    async for event in engine.run_events("Which is warmer today, Paris or Tokyo?",
                                         history=history):
        match event:
            case QueryEnrichedEvent():
                print(f"enriched query: {event.history_messages} history messages, "
                      f"{event.tokens_after} tokens (summarised: {event.summarized})")
            case PlanCreatedEvent():
                for step in event.plan.steps:
                    after = f" after {', '.join(step.dependencies)}" if step.dependencies else ""
                    print(f"plan, round {event.round}: [{step.id}] {step.task}{after}")
            case StepStartedEvent():
                print(f"  start  {event.step_id}")
            case StepFinishedEvent():
                finished.append(event)
                print(f"  finish {event.step_id} ({event.status}, {event.iterations} "
                      f"iterations): {event.answer}")
            case AnalysisEvent():
                print(f"analysis: achieved={event.achieved} confidence={event.confidence}")
            case AnswerDeltaEvent():
                pass  # the answer is printed whole from the done event
            case DAGDoneEvent():
                done = event
            case DAGErrorEvent():
                print(f"FAILED: {event.error_type}: {event.message}", file=sys.stderr)
                return 1
    if done is None:
        print("FAILED: the run ended without a done event", file=sys.stderr)
        return 1
    print(f"answer: {done.answer}")
    print(f"rounds: {done.rounds}, model calls: {done.usage.calls}, "
          f"usage: {done.usage.input_tokens} in / {done.usage.output_tokens} out")
    if sorted(s.step_id for s in finished if s.status == "done") != ["compare", "paris", "tokyo"]:
        print("FAILED: not every step finished", file=sys.stderr)
        return 1
    if "Tokyo is warmer" not in done.answer or "light rain" not in done.answer:
        print("FAILED: the answer does not carry the step results", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
