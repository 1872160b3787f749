"""Cache-aligned summariser requests: how much of each summary request the cache serves.

Providers cache a prompt's prefix: a summariser request that starts byte for byte like the
conversation's previous model call is read from the cache (at about a tenth of the input
price) up to where the two first differ. This benchmark records every model call of
runs in which compaction summarises, and for each summariser request reports the share
of its tokens that is a byte-identical prefix of the previous *conversation* call (the
latest call carrying the same conversation: its system prompt first; a summary request
or the closing synthesis is not one). A call is compared as its OpenAI wire form —
the ``tools`` JSON, then the ``messages`` JSON (each :meth:`ChatMessage.to_openai`, key
order kept, compact separators) — since providers lay tools out before the messages;
tokens are counted with the default estimator. Per component, the median share over its
summary requests (target ≥ 80%), and as the baseline the same figure for the transcript
request of the same compactions (the same run with every cache-aligned call refused, so
the fallback is sent: today's request before this change).

Components, all offline (:class:`~ctxstack.testing.ScriptedLLM`, a deliberately lossy
summariser) and in process:

* **agent** — a :class:`~ctxstack.agent.ReActAgent` tool loop (large search results,
  an archive and its ``recall`` tool) whose guard compacts every few iterations;
* **DAG** — a two-step plan run by :class:`~ctxstack.dag.DAGExecutor`: step ``a`` is a
  long tool loop (its guard compacts) ending in an answer longer than its share of step
  ``b``'s starting message, so the ``step_dependency`` summary of it runs too;
* **DbMemory** — a chat stored turn by turn in SQLite: each turn loads the history with
  :class:`~ctxstack.store.memory.DbMemory` (system prompt and tools given, as the
  service gives them), sends the conversation call, stores the answer and saves the
  checkpoint; the load summarises once the history outgrows the budget;
* **service** — the chat service's turn composed in process from its own parts: the
  load as :meth:`ctxstack.server.turn.Turn._load_history` builds it and the ReAct run as
  ``_run_react`` builds it (its ``SYSTEM_PROMPT``, its tools, a guard on the same budget);
  and, at full size only, a real ``ctxstack serve`` process (SQLite) answering from the
  recording stub LLM, the shares computed on the request bodies the stub received.

Run: ``python -m benchmarks.bench_summarizer_prefix [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import BenchRow, print_table
from ctxstack.agent import ReActAgent, tool
from ctxstack.budget import ModelBudget
from ctxstack.compaction import HistoryArchive
from ctxstack.compaction._prompts import (
    LANGUAGE_INSTRUCTION,
    compaction_prompt,
    is_summary_instruction,
)
from ctxstack.dag import DAGExecutor, Plan, PlanStep
from ctxstack.errors import LLMError
from ctxstack.guard import ContextGuard
from ctxstack.messages import ChatMessage
from ctxstack.protocol import ToolSpec
from ctxstack.store import NewMessage, append_messages, create_conversation, create_user, upgrade
from ctxstack.store import session_factory as make_session_factory
from ctxstack.store.db import create_engine_from_url
from ctxstack.store.memory import DbMemory
from ctxstack.testing import ScriptedLLM, first_sentence_summarizer
from ctxstack.tokens import DEFAULT_COUNTER

TITLE = "Cache-aligned summariser requests: share served from the prompt cache"
ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.8
_last: dict[str, Any] = {}


# ---------------------------------------------------------------- recording
@dataclass(frozen=True)
class Call:
    messages: tuple[ChatMessage, ...]
    tools: tuple[Any, ...] | None

    @property
    def summary(self) -> bool:
        last = self.messages[-1] if self.messages else None
        system = "\n".join(m.text for m in self.messages if m.role == "system")
        prefix = last is not None and last.role == "user" and is_summary_instruction(last.text)
        return prefix or system.rstrip().endswith(LANGUAGE_INSTRUCTION)

    @property
    def dependency(self) -> bool:
        """A DAG ``step_dependency`` summary (of a finished step's answer)."""
        prompt = compaction_prompt("step_dependency")
        return any(prompt in m.text for m in self.messages if m.role in ("system", "user"))

    @property
    def cache_aligned(self) -> bool:
        last = self.messages[-1] if self.messages else None
        return last is not None and last.role == "user" and is_summary_instruction(last.text)

    def wire(self) -> str:
        """The call as laid out for the cache: tools JSON, then messages JSON."""
        dump = {"ensure_ascii": False, "separators": (",", ":")}
        tools = json.dumps(list(self.tools), **dump) if self.tools else ""  # type: ignore[arg-type]
        return tools + json.dumps([m.to_openai() for m in self.messages], **dump)  # type: ignore[arg-type]


@dataclass
class Timeline:
    """Every model call of a run, in order (the conversation's model and the summariser)."""

    calls: list[Call] = field(default_factory=list)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # the longest equal prefix, by halving (strings compare at C speed)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def shares(timeline: Timeline, conversation: Sequence[str], *,
           dependency: bool = False) -> list[float]:
    """Per summary request: the token share that is a byte-identical prefix of the latest
    conversation call before it (one whose first message is one of ``conversation``'s
    system prompts). ``dependency``: only DAG dependency summaries, else only the others."""
    out: list[float] = []
    previous: Call | None = None
    counter = DEFAULT_COUNTER
    for call in timeline.calls:
        if call.summary:
            if previous is None or call.dependency != dependency:
                continue
            wire, before = call.wire(), previous.wire()
            same = _common_prefix(wire, before)
            total = counter.count_text(wire)
            out.append(counter.count_text(wire[:same]) / total if total else 0.0)
        elif call.messages and call.messages[0].role == "system" and \
                call.messages[0].text in conversation:
            previous = call
    return out


# ---------------------------------------------------------------- scenarios
def _page(topic: str, i: int) -> str:
    return (f"Result {i} for {topic}: order ORD-{1000 + i} shipped on 2026-03-{1 + i % 28:02d}, "
            f"amount {120 + 7 * i} EUR. " + "The warehouse log lists pallets, bins and "
            "carrier notes for this order in detail. " * 60)


@tool
def search(query: str) -> str:
    """Search the order database."""
    return _page(query, len(query))


def _loop_handler(iterations: int, answer: str = "Done: the orders are listed above.", *,
                  tool_name: str = "search", argument: str = "query") -> Any:
    """A main model that calls ``tool_name`` ``iterations`` times per task, then answers."""
    counts: dict[str, int] = {}

    def reply(messages: Sequence[ChatMessage], tools: Any) -> Any:
        task = next((m.text.split("\n", 1)[0] for m in messages if m.kind == "query"), "")
        n = counts[task] = counts.get(task, 0) + 1
        if tools and n <= iterations:
            # models reason aloud before a call: text no mask clears
            thought = (f"Batch {n}: the previous results name orders and amounts; I note "
                       "them and look for the next batch of March shipments. ") * 6
            return ScriptedLLM.tool_call(tool_name, {argument: f"{task[:40]} batch {n}"},
                                         content=thought)
        return answer

    return reply


def _models(timeline: Timeline, handler: Any, baseline: bool
            ) -> tuple[ScriptedLLM, ScriptedLLM]:
    """The conversation's model and the summariser, recording their calls into one
    timeline. ``baseline``: the summariser refuses cache-aligned requests, so the
    transcript request is sent instead (as before this change); a refused call is not
    recorded."""

    def main(messages: Sequence[ChatMessage], tools: Any) -> Any:
        timeline.calls.append(Call(tuple(messages), tuple(tools) if tools else None))
        return handler(messages, tools)

    def summarise(messages: Sequence[ChatMessage], tools: Any) -> Any:
        call = Call(tuple(messages), tuple(tools) if tools else None)
        if baseline and call.cache_aligned:
            return LLMError("baseline: cache-aligned request refused")
        timeline.calls.append(call)
        return first_sentence_summarizer(messages, tools)

    return ScriptedLLM(handler=main, name="main"), ScriptedLLM(handler=summarise,
                                                                name="summariser")


AGENT_PROMPT = "You are an order-tracking agent. Use the search tool; cite order numbers."


async def agent_run(quick: bool, baseline: bool) -> list[float]:
    timeline = Timeline()
    main, summariser = _models(timeline, _loop_handler(24 if quick else 60), baseline)
    guard = ContextGuard(compact_llm=summariser, archive=HistoryArchive())
    agent = ReActAgent(main, [search], guard, system_prompt=AGENT_PROMPT, budget=8_000,
                       max_iterations=30 if quick else 70, checklist_threshold=None,
                       cycle_threshold=None)
    await agent.run("List every order shipped in March with its amount.")
    return shares(timeline, [AGENT_PROMPT])


async def _dag(quick: bool, baseline: bool) -> Timeline:
    timeline = Timeline()
    long_answer = "Orders found:\n" + "\n".join(
        f"- ORD-{1000 + i}: {120 + 7 * i} EUR, shipped 2026-03-{1 + i % 28:02d}, carrier notes "
        "checked against the warehouse log." for i in range(600))
    iterations = 22 if quick else 36
    main, summariser = _models(timeline, _loop_handler(iterations, long_answer), baseline)
    executor = DAGExecutor(main, [search], budget=ModelBudget(
        role="fast", context_size=16_000, max_output_tokens=4_000), compact_llm=summariser,
        max_concurrency=1, max_iterations=iterations + 2,
        agent_options={"checklist_threshold": None,
                                          "cycle_threshold": None})
    plan = Plan(steps=[PlanStep(id="a", task="Collect the March orders", dependencies=[]),
                       PlanStep(id="b", task="Total the March amounts", dependencies=["a"])])
    result = await executor.run(plan)
    assert result.all_done, [r.error for r in result.results]
    return timeline


async def dag_run(quick: bool, baseline: bool) -> list[float]:
    """The step guards' summaries."""
    from ctxstack.dag._prompts import STEP_SYSTEM_PROMPT

    return shares(await _dag(quick, baseline), [STEP_SYSTEM_PROMPT])


async def dependency_run(quick: bool, baseline: bool) -> list[float]:
    """The ``step_dependency`` summaries of a finished step's answer: the answer itself
    (the step model's output, never in any input yet) cannot be a cached prefix."""
    from ctxstack.dag._prompts import STEP_SYSTEM_PROMPT

    return shares(await _dag(quick, baseline), [STEP_SYSTEM_PROMPT], dependency=True)


CHAT_PROMPT = "You are a helpful assistant for a warehouse team."
CHAT_TOOLS: list[ToolSpec] = [search.spec()]


async def _chat_turns(quick: bool, baseline: bool, *, service: bool) -> list[float]:
    """DbMemory (and, for the service, the ReAct run) over a stored chat, turn by turn."""
    timeline = Timeline()
    main, summariser = _models(timeline, _loop_handler(
        1, "Answer: " + "the carriers and amounts are in the warehouse log. " * 60,
        tool_name="text_stats" if service else "search",
        argument="text" if service else "query"), baseline)
    turns = 16 if quick else 40
    budget = ModelBudget(role="main", context_size=12_000, max_output_tokens=4_000)
    if service:
        from ctxstack.server.tools import service_tool_specs, service_tools
        from ctxstack.server.turn import SYSTEM_PROMPT, StaticMemory
        system, specs = SYSTEM_PROMPT, service_tool_specs()
    else:
        system, specs = CHAT_PROMPT, CHAT_TOOLS
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine_from_url(f"sqlite+aiosqlite:///{tmp}/bench.db")
        await upgrade(engine)
        try:
            sf = make_session_factory(engine)
            owner = (await create_user(sf, "bench"))[0].id
            conv = (await create_conversation(sf, owner, "chat")).id
            for turn in range(turns):
                question = (f"Question {turn}: which orders shipped in week {turn % 5}? "
                            + "Please include amounts, carriers and pallet counts. " * 60)
                await append_messages(sf, conv, [NewMessage(role="user", content=question)])
                memory = DbMemory(conv, session_factory=sf, budget=budget,
                                  compact_llm=summariser, system_prompt=system, tools=specs)
                history = await memory.get_messages()
                if service:
                    guard = ContextGuard(compact_llm=summariser, default_budget=budget)
                    agent = ReActAgent(main, service_tools(), guard, system_prompt=system,
                                       memory=StaticMemory(history), budget=budget,
                                       checklist_threshold=None)
                    answer = (await agent.run(question)).answer
                else:
                    query = ChatMessage.query(question)
                    reply = await main.chat([ChatMessage.system(system), *history, query],
                                            tools=specs)
                    answer = reply.message.text or "(tool call)"
                await append_messages(sf, conv, [NewMessage(role="assistant", content=answer)])
                await memory.save_checkpoint()
        finally:
            await engine.dispose()
    return shares(timeline, [system])


async def dbmemory_run(quick: bool, baseline: bool) -> list[float]:
    return await _chat_turns(quick, baseline, service=False)


async def service_run(quick: bool, baseline: bool) -> list[float]:
    return await _chat_turns(quick, baseline, service=True)


# ---------------------------------------------------------------- the real service
def _body_wire(body: Any) -> str:
    dump = {"ensure_ascii": False, "separators": (",", ":")}
    tools = body.get("tools")
    return (json.dumps(tools, **dump) if tools else "") + json.dumps(  # type: ignore[arg-type]
        body.get("messages") or [], **dump)  # type: ignore[arg-type]


def _body_kind(body: Any, system_prompt: str) -> str:
    """``"prefix"`` / ``"transcript"`` (summary requests), ``"conversation"`` (a ReAct call:
    the chat's system prompt first, tools offered) or ``"other"``."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = last.get("content") if isinstance(last, dict) else None
    if last.get("role") == "user" and isinstance(content, str) and \
            is_summary_instruction(content):
        return "prefix"
    system = "\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    if system.rstrip().endswith(LANGUAGE_INSTRUCTION):
        return "transcript"
    if body.get("tools") and messages and messages[0].get("content") == system_prompt:
        return "conversation"
    return "other"


def real_service_run(turns: int, baseline: bool) -> list[float]:
    """A ``ctxstack serve`` process (SQLite) answering from the recording stub LLM, one
    conversation of ``turns`` turns in an 8,000-token window; shares computed on the request
    bodies the stub received. ``baseline``: the stub refuses cache-aligned requests."""
    import httpx

    from benchmarks.bench_service import serve_process
    from ctxstack.llm.stub import StubReply, StubServer
    from ctxstack.server.turn import SYSTEM_PROMPT

    def rule(request: Any) -> Any:
        kind = _body_kind(request.body, SYSTEM_PROMPT)
        if kind == "prefix" and baseline:
            return StubReply.failure(400, "baseline: cache-aligned request refused")
        if kind in ("prefix", "transcript"):
            return "Summary: the user asked about orders; the answers listed amounts."
        if request.tools:
            last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
            if not any(m.role == "tool" for m in request.messages[last_user:]):
                return StubReply.tool_call("calculate", {"expression": "6*7"})
            return StubReply.text("Brief: 42. " + "The amounts are listed. " * 30)
        return StubReply.text("The answer is 42. " * 60, chunk_size=200)

    with tempfile.TemporaryDirectory() as tmp, StubServer(rule=rule) as stub:
        env = {"CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/bench.db",
               "LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "bench", "LLM_MODEL": "stub",
               "LLM_CONTEXT_SIZE": "8000", "LLM_MAX_OUTPUT_TOKENS": "4000",
               "CTXSTACK_FILES_DIR": f"{tmp}/files"}
        with serve_process(ROOT, Path(tmp), env) as (url, _), \
                httpx.Client(base_url=url, timeout=120) as client:
            cid = client.post("/api/conversations", json={}).json()["id"]
            for turn in range(turns):
                query = f"Question {turn}: which orders shipped? " + "Include amounts. " * 20
                with client.stream("POST", "/api/chat", json={
                        "conversation_id": cid, "query": query}) as response:
                    response.raise_for_status()
                    for _ in response.iter_lines():
                        pass
        bodies = [r.body for r in stub.state.requests]
    out: list[float] = []
    previous: Any = None
    counter = DEFAULT_COUNTER
    for body in bodies:
        kind = _body_kind(body, SYSTEM_PROMPT)
        if kind == "conversation":
            previous = body
        elif kind in ("prefix", "transcript") and previous is not None and not (
                baseline and kind == "prefix"):
            wire, before = _body_wire(body), _body_wire(previous)
            total = counter.count_text(wire)
            out.append(counter.count_text(wire[:_common_prefix(wire, before)]) / total)
    return out


COMPONENTS = (("agent", agent_run), ("DAG steps (their guards)", dag_run),
              ("DAG dependency summaries", dependency_run), ("DbMemory", dbmemory_run),
              ("service", service_run))


# ---------------------------------------------------------------- report
async def _measure(quick: bool) -> dict[str, tuple[list[float], list[float]]]:
    out = {}
    for name, scenario in COMPONENTS:
        out[name] = (await scenario(quick, False), await scenario(quick, True))
    return out


REAL_SERVICE = "service (a real ctxstack serve process)"


def run(quick: bool) -> list[BenchRow]:
    measured = asyncio.run(_measure(quick))
    if not quick:  # a server process: seconds to start, so only at full size
        measured[REAL_SERVICE] = (real_service_run(14, False), real_service_run(14, True))
    _last["measured"] = measured
    rows = []
    for name, (aligned, transcript) in measured.items():
        value = statistics.median(aligned) if aligned else 0.0
        base = statistics.median(transcript) if transcript else None
        bounded = name.startswith("DAG dependency")
        rows.append(BenchRow(
            name=f"{name}: summary request tokens served as cached prefix "
                 f"(median of {len(aligned)}; min {min(aligned, default=0):.0%})",
            value=round(100 * value, 1), unit="%",
            baseline=round(100 * base, 1) if base is not None else None,
            # a dependency summary carries the step's answer, the model's output, which no
            # input has carried yet: its share is bounded by context / (context + answer)
            target="reported (at most context / (context + answer))" if bounded
            else f">= {TARGET:.0%} (baseline: the transcript request)",
            met=None if bounded else bool(aligned) and value >= TARGET))
    return rows


def report_markdown(quick: bool) -> str:
    measured = _last.get("measured") or {}
    lines = [f"Quick mode: the row for {REAL_SERVICE!r} is not measured (it starts a "
             "server); the in-process service row composes the same parts.\n"] if quick else []
    lines += ["| component | summary requests | median | min | transcript median |",
             "|---|---|---|---|---|"]
    for name, (aligned, transcript) in measured.items():
        lines.append(f"| {name} | {len(aligned)} | "
                     f"{statistics.median(aligned) if aligned else 0:.1%} | "
                     f"{min(aligned, default=0):.1%} | "
                     f"{statistics.median(transcript) if transcript else 0:.1%} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print_table(run(args.quick), TITLE)
    print(report_markdown(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
