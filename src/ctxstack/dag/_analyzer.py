"""Phase 5: judge whether a round's step results achieve the user's goal.

One structured call over the query and the step results, each cut to 10,000 characters so
one verbose step cannot crowd out the others. The verdict drives phase 6: the engine
replans when ``achieved`` is false and ``confidence`` is below its threshold.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ctxstack.dag._context import ANALYSIS_MAX_CHARS_PER_STEP, format_for_analysis
from ctxstack.dag._plan import Plan
from ctxstack.dag._prompts import ANALYZER_SYSTEM_PROMPT
from ctxstack.dag._results import StepResult
from ctxstack.dag._structured import structured_call
from ctxstack.errors import ConfigError
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.tokens import UsageMeter


class Analysis(BaseModel):
    """The analyzer's verdict (the schema of its structured answer)."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_extra={"description": "Whether the step results achieve the request."},
    )

    achieved: bool = Field(description="True if the results are enough to answer the request.")
    confidence: float = Field(
        ge=0.0, le=1.0, description="0..1: how sure the results suffice for a good answer."
    )
    reasoning: str = Field(description="What is covered, what is missing or wrong.")


class AnalysisResult(BaseModel):
    """A verdict and the usage of the call(s) that produced it."""

    model_config = ConfigDict(frozen=True)

    analysis: Analysis
    usage: Usage = Usage()


class PlanAnalyzer:
    """Judges a round's results with one structured call.

    Args:
        llm: the judging model.
        system_prompt: replaces :data:`~ctxstack.dag._prompts.ANALYZER_SYSTEM_PROMPT`.
        max_chars_per_step: each step result is cut head+tail to this (10,000).
        max_tokens: output cap passed to the structured call.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        system_prompt: str = ANALYZER_SYSTEM_PROMPT,
        max_chars_per_step: int = ANALYSIS_MAX_CHARS_PER_STEP,
        max_tokens: int | None = None,
    ) -> None:
        if max_chars_per_step < 1:
            raise ConfigError(f"max_chars_per_step: must be positive, got {max_chars_per_step}")
        self.llm = llm
        self.system_prompt = system_prompt
        self.max_chars_per_step = max_chars_per_step
        self.max_tokens = max_tokens

    def build_messages(
        self, query: str, plan: Plan, results: dict[str, StepResult]
    ) -> list[ChatMessage]:
        """The analyzer's two messages (pure)."""
        body = format_for_analysis(plan, results, self.max_chars_per_step)
        return [
            ChatMessage.system(self.system_prompt),
            ChatMessage.user(f"User request:\n{query}\n\nStep results:\n\n{body}"),
        ]

    async def analyze(
        self, query: str, plan: Plan, results: dict[str, StepResult]
    ) -> AnalysisResult:
        """Judge ``results`` of ``plan`` against ``query``.

        Raises:
            StructuredOutputError: the verdict did not parse after the structured re-ask.
            LLMError: the provider call failed.
        """
        meter = UsageMeter()
        messages = self.build_messages(query, plan, results)
        result = await structured_call(
            meter.wrap(self.llm), messages, Analysis, max_tokens=self.max_tokens
        )
        return AnalysisResult(analysis=result.value, usage=meter.usage)
