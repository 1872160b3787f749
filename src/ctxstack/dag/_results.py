"""What running a plan produced: one :class:`StepResult` per step, and the round's total.

Times are seconds since the start of the execution (monotonic clock), so results of one
run can be compared with each other (which steps overlapped) without wall-clock noise.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxstack.protocol import Usage

StepStatus = Literal["done", "failed", "skipped"]


class StepResult(BaseModel):
    """The outcome of one step.

    * ``done``: the step agent answered; ``answer`` is its final answer.
    * ``failed``: the step agent raised; ``error`` is ``"<ExceptionType>: <message>"``.
    * ``skipped``: a step it depends on did not finish; ``error`` says which and why.

    ``usage`` covers every LLM call the step made, its guard's compactions included, also
    when it failed part-way. ``stopped_reason`` is the agent's own (``None`` if it did not
    run to an end).
    """

    model_config = ConfigDict(frozen=True)

    step_id: str
    task: str
    status: StepStatus
    answer: str = ""
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration: float = 0.0
    usage: Usage = Usage()
    iterations: int = 0
    compactions: int = 0
    stopped_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "done"


class ExecutionResult(BaseModel):
    """All step results of one execution, in plan order, with the summed usage."""

    model_config = ConfigDict(frozen=True)

    results: list[StepResult]
    elapsed: float = 0.0

    @property
    def usage(self) -> Usage:
        return sum((r.usage for r in self.results), Usage())

    @property
    def by_id(self) -> dict[str, StepResult]:
        return {r.step_id: r for r in self.results}

    @property
    def all_done(self) -> bool:
        return all(r.ok for r in self.results)
