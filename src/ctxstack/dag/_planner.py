"""Phase 3: the planner turns the enriched query into a validated :class:`Plan`.

One structured call with exactly two messages — the system prompt and the enriched query —
and no ContextGuard: the enriched query was already bounded to 16,000 tokens (phase 2), so
there is nothing to compact. A replan is still two messages: the previous round (each step
result cut to 500 chars) and the analyzer's reasoning are appended to the user message.

The structured call (``ctxstack.dag._structured.structured_call``) takes care of JSON and
field-level validity (it re-asks once itself and raises ``StructuredOutputError``). The
*graph* — unique ids, known dependencies, no cycle, at least one step, at most
``max_steps`` — is checked here: a broken graph gets one re-ask that shows the model its
plan and every problem found; if the second plan is broken too, :class:`PlanError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from ctxstack.dag._context import REPLAN_MAX_CHARS_PER_STEP, format_replan_context
from ctxstack.dag._plan import Plan, PlanDraft, plan_problems
from ctxstack.dag._prompts import PLANNER_SYSTEM_PROMPT, describe_tools
from ctxstack.dag._results import StepResult
from ctxstack.dag._structured import structured_call
from ctxstack.errors import ConfigError, PlanError
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import UsageMeter

DEFAULT_MAX_STEPS = 20


class NamedTool(Protocol):
    """What the planner needs to know of a tool (``ctxstack.agent.Tool`` fits)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


class ReplanContext(BaseModel):
    """What a replan is told about the previous round."""

    model_config = ConfigDict(frozen=True)

    round: int
    plan: Plan
    results: dict[str, StepResult]
    reasoning: str


class PlanResult(BaseModel):
    """A valid plan, the usage of every call it took, and how many plans were asked for."""

    model_config = ConfigDict(frozen=True)

    plan: Plan
    usage: Usage = Usage()
    attempts: int = 1


class DAGPlanner:
    """Plans with one structured call (plus at most one re-ask for a broken graph).

    Args:
        llm: the model that plans (usually the main model).
        system_prompt: replaces :data:`~ctxstack.dag._prompts.PLANNER_SYSTEM_PROMPT`.
        tools: the tools the steps will have; their names and descriptions are listed in
            the system prompt so ``tool_hint`` can name them.
        max_steps: a plan with more steps is treated as invalid (re-ask, then error).
        max_tokens: output cap passed to the structured call.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        system_prompt: str = PLANNER_SYSTEM_PROMPT,
        tools: Sequence[NamedTool] = (),
        max_steps: int = DEFAULT_MAX_STEPS,
        max_tokens: int | None = None,
    ) -> None:
        if max_steps < 1:
            raise ConfigError(f"max_steps: must be at least 1, got {max_steps}")
        self.llm = llm
        self.system_prompt = system_prompt
        self.tools = list(tools)
        self.max_steps = max_steps
        self.max_tokens = max_tokens

    def system_message(self) -> ChatMessage:
        text = self.system_prompt
        if self.tools:
            text += "\n\n" + describe_tools([(t.name, t.description) for t in self.tools])
        return ChatMessage.system(text)

    def build_messages(
        self, enriched_query: str, previous: ReplanContext | None = None
    ) -> list[ChatMessage]:
        """The two messages of a planning call (pure)."""
        user = enriched_query
        if previous is not None:
            user += "\n\n" + format_replan_context(
                previous.plan, previous.results, previous.reasoning,
                round_number=previous.round, max_chars_per_step=REPLAN_MAX_CHARS_PER_STEP,
            )
        return [self.system_message(), ChatMessage.user(user)]

    def problems(self, draft: PlanDraft) -> list[str]:
        """Graph problems of ``draft``, plus the step-count limit."""
        problems = plan_problems(draft.steps)
        if len(draft.steps) > self.max_steps:
            problems.append(
                f"the plan has {len(draft.steps)} steps; at most {self.max_steps} are allowed"
            )
        return problems

    async def plan(
        self, enriched_query: str, *, previous: ReplanContext | None = None
    ) -> PlanResult:
        """Ask for a plan; re-ask once if its graph is invalid.

        Raises:
            PlanError: the graph was still invalid after the re-ask (the message lists the
                problems of the last plan).
            StructuredOutputError: the model's output did not parse as a plan at all.
            LLMError: the provider call failed.
        """
        meter = UsageMeter()
        llm = meter.wrap(self.llm)
        messages = self.build_messages(enriched_query, previous)
        draft = (await structured_call(llm, messages, PlanDraft, max_tokens=self.max_tokens)).value
        problems = self.problems(draft)
        if not problems:
            return PlanResult(plan=Plan(steps=draft.steps), usage=meter.usage, attempts=1)

        retry = [
            *messages,
            ChatMessage.assistant(draft.model_dump_json(exclude_none=True)),
            ChatMessage.user(
                "That plan cannot be run: " + "; ".join(problems) + ". Answer with a "
                "corrected, complete plan as JSON (all steps, not only the changed ones)."
            ),
        ]
        draft = (await structured_call(llm, retry, PlanDraft, max_tokens=self.max_tokens)).value
        problems = self.problems(draft)
        if problems:
            raise PlanError("the planner's plan is invalid after a re-ask: " + "; ".join(problems))
        return PlanResult(plan=Plan(steps=draft.steps), usage=meter.usage, attempts=2)
