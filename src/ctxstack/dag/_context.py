"""How step results travel between the DAG's phases: pure text building, no I/O.

Each phase gets a different, bounded view of the results (the seed's numbers):

* a step sees its dependencies' results through :func:`build_step_context`, cut so the
  whole message fits the guard's ``max_message_chars`` (50,000) — the guard would
  otherwise cut the message itself, blindly, possibly losing a whole dependency;
* the analyzer sees each step result cut to 10,000 chars (:func:`format_for_analysis`), so
  one verbose step cannot crowd out the rest;
* a replan sees each previous result cut to 500 chars (:func:`format_replan_context`): it
  needs what happened and what went wrong, not every detail;
* the synthesis sees the results within a total of 50,000 chars (:func:`format_for_synthesis`).

Cuts keep the head and the tail (a step's conclusion is usually at its end) and say how
many characters were removed. Where several results share one budget, the budget is split
fairly: results shorter than an equal share keep everything, and what they leave is shared
by the longer ones (water-filling), so no dependency is dropped to make room for another.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxstack.dag._plan import Plan, PlanStep
from ctxstack.dag._results import StepResult
from ctxstack.errors import InputError

STEP_CONTEXT_MAX_CHARS = 50_000
ANALYSIS_MAX_CHARS_PER_STEP = 10_000
REPLAN_MAX_CHARS_PER_STEP = 500
SYNTHESIS_MAX_CHARS = 50_000

HEAD_SHARE = 0.6
"""Fraction of a cut text's room kept from its head; the rest comes from its tail."""


def _marker(removed: int) -> str:
    return f"\n[… {removed:,} characters truncated …]\n"


def cut_middle(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its head and tail around a marker.

    The result (marker included) is never longer than ``max_chars`` when ``max_chars`` is
    at least the marker's length; below that only the head is kept, hard-cut.
    """
    if max_chars < 0:
        raise InputError(f"max_chars: must be >= 0, got {max_chars}")
    if len(text) <= max_chars:
        return text
    removed = len(text)
    # The marker's length depends on the count it shows; two passes settle it.
    for _ in range(2):
        room = max_chars - len(_marker(removed))
        if room < 0:
            return text[:max_chars]
        removed = len(text) - room
    room = max_chars - len(_marker(removed))
    head = int(room * HEAD_SHARE)
    tail = room - head
    return text[:head] + _marker(len(text) - head - tail) + (text[-tail:] if tail else "")


def fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` chars over texts of ``lengths``: short ones whole, long ones equal.

    Every share is at most its text's length and the shares sum to at most ``budget``.
    """
    budget = max(0, budget)
    shares = [0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    remaining = budget
    for rank, i in enumerate(order):
        equal = remaining // (len(order) - rank)
        shares[i] = min(lengths[i], equal)
        remaining -= shares[i]
    return shares


_BLOCK_SEPARATOR = "\n\n"


def _step_header(step_id: str, task: str) -> str:
    return f"### Step {step_id}: {task}\n"


def build_step_context(
    step: PlanStep,
    results: dict[str, StepResult],
    max_chars: int = STEP_CONTEXT_MAX_CHARS,
) -> str:
    """The query a step agent starts from: its task, then its dependencies' results.

    Each dependency result is labelled with the dependency's id and task and cut head+tail
    so that the whole text fits in ``max_chars`` (the guard's ``max_message_chars``). Only
    when the task and labels alone exceed ``max_chars`` can the text be longer (the task is
    never cut here; the step's guard deals with it).

    Raises:
        InputError: a dependency has no result (the executor only calls this once all of
            a step's dependencies are done).
    """
    head = _step_head(step)
    missing = [d for d in step.dependencies if d not in results]
    if missing:
        raise InputError(f"step {step.id!r}: no result yet for dependencies {missing}")
    deps = [results[d] for d in step.dependencies]
    if not deps:
        return head
    headers = [_step_header(r.step_id, r.task) for r in deps]
    shares = dependency_shares(step, results, max_chars)
    blocks = [
        header + cut_middle(result.answer, share)
        for header, result, share in zip(headers, deps, shares, strict=True)
    ]
    return head + _DEPS_INTRO + _BLOCK_SEPARATOR.join(blocks)


_DEPS_INTRO = "\n\nResults of the steps this task depends on:\n\n"


def _step_head(step: PlanStep) -> str:
    head = step.task
    if step.tool_hint:
        head += f"\n\n(Suggested tool: {step.tool_hint})"
    return head


def dependency_shares(
    step: PlanStep, results: dict[str, StepResult], max_chars: int = STEP_CONTEXT_MAX_CHARS
) -> list[int]:
    """The characters each dependency result may keep in the step's starting message
    (in ``step.dependencies`` order): what :func:`build_step_context` cuts each one to.

    A result longer than its share is *over its cut*: the executor first asks the fast
    model for a ``step_dependency`` summary of it, and the cut applies only when that
    fails or is still too long.
    """
    deps = [results[d] for d in step.dependencies]
    if not deps:
        return []
    headers = [_step_header(r.step_id, r.task) for r in deps]
    separators = len(_BLOCK_SEPARATOR) * (len(deps) - 1)
    overhead = (len(_step_head(step)) + len(_DEPS_INTRO) + sum(len(h) for h in headers)
                + separators)
    return fair_shares([len(r.answer) for r in deps], max_chars - overhead)


def _status_line(result: StepResult) -> str:
    if result.status == "done":
        return "done"
    return f"{result.status}: {result.error or 'no reason given'}"


def format_for_analysis(
    plan: Plan,
    results: dict[str, StepResult],
    max_chars_per_step: int = ANALYSIS_MAX_CHARS_PER_STEP,
) -> str:
    """Every step with its status and its result cut to ``max_chars_per_step`` chars."""
    blocks: list[str] = []
    for step in plan.steps:
        result = results.get(step.id)
        if result is None:
            blocks.append(f"{_step_header(step.id, step.task)}Status: not run")
            continue
        body = cut_middle(result.answer, max_chars_per_step) if result.ok else ""
        status = _status_line(result)
        if not result.ok:
            status = cut_middle(status, max_chars_per_step)
        blocks.append(f"{_step_header(step.id, step.task)}Status: {status}\n{body}".rstrip())
    return "\n\n".join(blocks)


def format_replan_context(
    plan: Plan,
    results: dict[str, StepResult],
    reasoning: str,
    *,
    round_number: int,
    max_chars_per_step: int = REPLAN_MAX_CHARS_PER_STEP,
) -> str:
    """What the planner sees of a previous round: steps, 500-char results, the verdict."""
    lines = [
        f"A previous plan (round {round_number}) did not achieve the goal. Its steps and "
        f"what they produced (each cut to {max_chars_per_step} characters):"
    ]
    for step in plan.steps:
        result = results.get(step.id)
        deps = f" (after {', '.join(step.dependencies)})" if step.dependencies else ""
        if result is None:
            outcome = "not run"
        elif result.ok:
            outcome = "done — " + cut_middle(result.answer, max_chars_per_step)
        else:
            outcome = cut_middle(_status_line(result), max_chars_per_step)
        lines.append(f"- {step.id}{deps}: {step.task}\n  Result: {outcome}")
    lines.append(f"Why it was judged not achieved: {reasoning.strip() or '(no reasoning given)'}")
    lines.append(
        "Write a new complete plan that fixes this. Reuse what worked by asking for it "
        "again only if it is still needed; do not repeat steps that failed the same way."
    )
    return "\n".join(lines)


def format_for_synthesis(
    results: Sequence[StepResult], max_chars: int = SYNTHESIS_MAX_CHARS
) -> str:
    """Step results for the final answer, in order.

    Done results share ``max_chars`` fairly (head+tail cuts); failed and skipped steps are
    listed with their reason so the answer can say what is missing.
    """
    done = [r for r in results if r.ok]
    headers = [_step_header(r.step_id, r.task) for r in done]
    overhead = sum(len(h) for h in headers) + len(_BLOCK_SEPARATOR) * len(done)
    shares = fair_shares([len(r.answer) for r in done], max_chars - overhead)
    blocks = [h + cut_middle(r.answer, s) for h, r, s in zip(headers, done, shares, strict=True)]
    missing = [f"- {r.step_id}: {r.task} ({_status_line(r)})" for r in results if not r.ok]
    if missing:
        blocks.append("Steps that did not produce a result:\n" + "\n".join(missing))
    return _BLOCK_SEPARATOR.join(blocks)
