"""Messages the user sends while a DAG run works ("injects"), and where they go.

A ReAct agent has one context, so an inject simply enters it at the next iteration. A DAG
run has many: the planner's request, one context per step agent, the analyzer's request and
the synthesis prompt. An inject must reach all of those that are still to come, and the
step agents that are working right now. What happens depends only on the phase the run is
in (:func:`route_inject`, pure):

============  =============================================================================
phase         an inject …
============  =============================================================================
prepare       is remembered: the planner (if it has not been asked yet, and every replan),
              every step, the analyzer and the synthesis see it
execute       is handed to every running step agent (:meth:`ReActAgent.inject`, so it
              enters their context at their next iteration) **and** remembered as above
analyze       is remembered (the verdict being written may not account for it; a replan
              and the synthesis do)
synthesis     is refused: the answer is already being written, so the caller keeps the
              message for the next turn
============  =============================================================================

Remembered injects enter a step agent that starts later through the same door, before its
first iteration, so they sit in its context pinned with kind "inject" like in a ReAct run.
Everything here runs on the event loop without awaiting, so :meth:`RunInbox.offer` is safe
to call from another task: no phase change can interleave with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxstack.agent import ReActAgent
from ctxstack.dag._events import DAGInjectedEvent, InjectPhase

FOLLOWUP_HEADER = "Follow-up messages the user sent while the request was being worked on"


@dataclass(frozen=True)
class InjectRoute:
    """Where an inject goes: taken at all, and handed to the running step agents too."""

    accept: bool
    to_running_steps: bool


def route_inject(phase: InjectPhase) -> InjectRoute:
    """The routing rule of the module docstring's table (pure)."""
    if phase == "synthesis":
        return InjectRoute(accept=False, to_running_steps=False)
    return InjectRoute(accept=True, to_running_steps=phase == "execute")


def with_followups(query: str, injects: Sequence[str]) -> str:
    """``query`` followed by the injects so far, as the planner, analyzer and synthesis
    read it (pure). Without injects the query is returned unchanged."""
    if not injects:
        return query
    listed = "\n".join(f"- {text}" for text in injects)
    return f"{query}\n\n{FOLLOWUP_HEADER} (take them into account):\n{listed}"


class RunInbox:
    """The injects of one DAG run: what was taken, who is running, what to report.

    The engine sets :attr:`phase` and :attr:`round` as the run moves on; the executor
    :meth:`attach`-es each step agent before it runs and :meth:`detach`-es it after; the
    engine :meth:`drain`-s the events to yield between its own.
    """

    def __init__(self) -> None:
        self.phase: InjectPhase = "prepare"
        self.round = 0
        self.texts: list[str] = []
        self._running: dict[str, ReActAgent] = {}
        self._events: list[DAGInjectedEvent] = []

    def offer(self, text: str) -> bool:
        """Take ``text`` if the phase allows (see :func:`route_inject`); False if refused."""
        route = route_inject(self.phase)
        if not route.accept:
            return False
        steps: list[str] = []
        if route.to_running_steps:
            for step_id, agent in self._running.items():
                agent.inject(text)
                steps.append(step_id)
        self.texts.append(text)
        self._events.append(DAGInjectedEvent(
            text=text, round=self.round, phase=self.phase, steps=steps
        ))
        return True

    def attach(self, step_id: str, agent: ReActAgent) -> None:
        """A step agent is about to run: give it every inject so far, and later ones."""
        for text in self.texts:
            agent.inject(text)
        self._running[step_id] = agent

    def detach(self, step_id: str) -> None:
        """The step agent has finished (or failed): it gets no more injects."""
        self._running.pop(step_id, None)

    def query(self, query: str) -> str:
        """``query`` with the injects so far (:func:`with_followups`)."""
        return with_followups(query, self.texts)

    def drain(self) -> list[DAGInjectedEvent]:
        """The events of the injects taken since the last drain, oldest first."""
        events, self._events = self._events, []
        return events
