"""A DAG plan: steps, their dependencies, graph validation and topological layers.

Two models, on purpose:

* :class:`PlanDraft` is the *shape* the planner LLM is asked for (a list of steps). It
  validates field types only, so a structurally sound answer with a graph mistake parses
  and the planner can show the model exactly what is wrong with its graph.
* :class:`Plan` is a draft whose graph is valid: at least one step, unique ids, every
  dependency names a step of the plan, no step depends on itself, no cycle. Building one
  from an invalid graph raises ``ValueError`` (pydantic ``ValidationError``) whose message
  lists every problem found, in words a model or a person can act on.

:func:`plan_problems` is the pure check both use. :meth:`Plan.layers` gives the
topological layers (steps whose dependencies are all in earlier layers), which is what the
executor's critical path is made of; the executor itself does not wait for whole layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ctxstack.errors import InputError


def _as_id(value: object, where: str) -> str:
    # Models often number their steps; 1 and "1" name the same step.
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a step id (string), got {value!r}")
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a step id (string), got {value!r}")
    text = value.strip()
    if not text:
        raise ValueError(f"{where}: a step id must not be empty")
    return text


class PlanStep(BaseModel):
    """One unit of work: run by its own agent once all ``dependencies`` are done.

    ``tool_hint`` names the tool the planner expects the step to need (advisory: the step
    agent still sees every tool).
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Short unique id of the step, e.g. 's1'.")
    task: str = Field(description="What this step must find out or produce, self-contained.")
    dependencies: list[str] = Field(
        default_factory=list,
        description="Ids of the steps whose results this step needs (empty if none).",
    )
    tool_hint: str | None = Field(
        default=None, description="Name of the tool this step will most likely need."
    )

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, v: object) -> str:
        return _as_id(v, "id")

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        text = v.strip()
        if not text:
            raise ValueError("task: a step's task must not be empty")
        return text

    @field_validator("dependencies", mode="before")
    @classmethod
    def _dependencies(cls, v: object) -> list[str]:
        if v is None:
            return []
        if isinstance(v, str | int) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list | tuple):
            raise ValueError(f"dependencies: expected a list of step ids, got {v!r}")
        seen: list[str] = []
        for i, item in enumerate(v):
            dep = _as_id(item, f"dependencies[{i}]")
            if dep not in seen:  # a repeated dependency means the same thing once
                seen.append(dep)
        return seen

    @field_validator("tool_hint", mode="before")
    @classmethod
    def _tool_hint(cls, v: object) -> object:
        if isinstance(v, str) and not v.strip():
            return None
        return v.strip() if isinstance(v, str) else v


class PlanDraft(BaseModel):
    """The planner's raw answer: steps with valid fields, graph not yet checked."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_extra={"description": "A plan: steps that together answer the request."},
    )

    steps: list[PlanStep] = Field(description="The steps of the plan, in any order.")


def find_cycle(steps: Sequence[PlanStep]) -> list[str] | None:
    """One dependency cycle as a closed path of ids (``[a, b, a]``), or ``None``.

    Unknown dependency ids and self-dependencies are ignored here (:func:`plan_problems`
    reports them in their own words).
    """
    deps = {s.id: [d for d in s.dependencies if d != s.id] for s in steps}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in deps.get(node, []):
            if dep not in deps:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for step in steps:
        if step.id not in state:
            found = visit(step.id)
            if found:
                return found
    return None


def plan_problems(steps: Sequence[PlanStep]) -> list[str]:
    """Every graph problem of ``steps``, as sentences; empty when the graph is valid."""
    if not steps:
        return ["the plan has no steps: it needs at least one"]
    problems: list[str] = []
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.id] = counts.get(s.id, 0) + 1
    for step_id, n in counts.items():
        if n > 1:
            problems.append(f"step id {step_id!r} is used by {n} steps: ids must be unique")
    known = set(counts)
    for s in steps:
        unknown = [d for d in s.dependencies if d not in known]
        if unknown:
            names = ", ".join(repr(d) for d in unknown)
            problems.append(
                f"step {s.id!r} depends on unknown step id(s) {names} "
                f"(known ids: {', '.join(sorted(known))})"
            )
        if s.id in s.dependencies:
            problems.append(f"step {s.id!r} depends on itself")
    cycle = find_cycle(steps)
    if cycle:
        problems.append(f"dependency cycle: {' -> '.join(cycle)}")
    return problems


def topological_layers(steps: Sequence[PlanStep]) -> list[list[PlanStep]]:
    """Steps grouped by depth: layer 0 has no dependencies, layer k needs only layers < k.

    Within a layer, steps keep the plan's order. Assumes a valid graph (see :class:`Plan`).
    """
    depth: dict[str, int] = {}
    by_id = {s.id: s for s in steps}

    def depth_of(step_id: str) -> int:
        if step_id not in depth:
            deps = by_id[step_id].dependencies
            depth[step_id] = 1 + max((depth_of(d) for d in deps), default=-1)
        return depth[step_id]

    layers: list[list[PlanStep]] = []
    for s in steps:
        d = depth_of(s.id)
        while len(layers) <= d:
            layers.append([])
        layers[d].append(s)
    return layers


class Plan(PlanDraft):
    """A plan whose dependency graph is a valid DAG (see the module docstring)."""

    @model_validator(mode="after")
    def _valid_graph(self) -> Self:
        problems = plan_problems(self.steps)
        if problems:
            raise ValueError("invalid plan: " + "; ".join(problems))
        return self

    @classmethod
    def from_steps(cls, steps: Sequence[PlanStep | dict[str, Any]]) -> Plan:
        """Build and validate a plan from steps or step dicts."""
        return cls.model_validate({"steps": list(steps)})

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.steps]

    def step(self, step_id: str) -> PlanStep:
        """The step with ``step_id``; :class:`InputError` naming it if there is none."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise InputError(f"no step {step_id!r} in the plan (ids: {', '.join(self.ids)})")

    def layers(self) -> list[list[PlanStep]]:
        """Topological layers; see :func:`topological_layers`."""
        return topological_layers(self.steps)

    def dependants(self, step_id: str) -> list[str]:
        """Ids of every step that needs ``step_id``, directly or transitively, in plan order."""
        found: set[str] = {step_id}
        changed = True
        while changed:
            changed = False
            for s in self.steps:
                if s.id not in found and any(d in found for d in s.dependencies):
                    found.add(s.id)
                    changed = True
        return [s.id for s in self.steps if s.id in found and s.id != step_id]
