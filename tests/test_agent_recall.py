"""The recall tool: agents read back what their guard archived (ReAct and DAG steps)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ctxstack import ContextGuard, HistoryArchive
from ctxstack.agent import ReActAgent, tool
from ctxstack.budget import ModelBudget
from ctxstack.dag import DAGDoneEvent, DAGEngine
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import ChatMessage
from ctxstack.protocol import ToolSpec
from ctxstack.tokens import HEURISTIC
from tests.test_dag_engine import Router, collect, plan_json


@tool
def fetch(n: int) -> str:
    """Fetch one record.

    Args:
        n: record number.
    """
    return f"RECORD-{n:04d} owner=team{n} " + "payload " * 500


def tool_names(tools: Sequence[ToolSpec] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or ()]


def recall_script() -> Any:
    """Fetch six records, then search the archive, read one hit by ref, then answer."""
    state = {"n": 0}

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> Any:
        state["n"] += 1
        n = state["n"]
        if n <= 6:
            return ScriptedLLM.tool_call("fetch", {"n": n})
        if n == 7:
            assert "recall" in tool_names(tools)
            return ScriptedLLM.tool_call("recall", {"query": "RECORD-0001 owner"})
        if n == 8:
            found = re.search(r"ref (a\d+)", messages[-1].text)
            assert found, messages[-1].text
            return ScriptedLLM.tool_call("recall", {"ref": found.group(1)})
        return "Record 1 belongs to team1."

    return reply


async def test_react_agent_offers_recall_once_something_was_archived() -> None:
    llm = ScriptedLLM(handler=recall_script())
    archive = HistoryArchive()
    guard = ContextGuard(default_budget=2_500, archive=archive)
    agent = ReActAgent(llm, [fetch], guard, budget=2_500, checklist_threshold=None)
    result = await agent.run("Who owns record 1?")
    assert result.answer == "Record 1 belongs to team1."
    assert "recall" not in tool_names(llm.calls[0].tools)  # nothing archived yet
    assert len(archive) > 0
    recalls = [e for e in result.trace if e.tool == "recall"]
    assert len(recalls) == 2
    search_call, read_call = (c.messages for c in llm.calls[7:9])
    assert "RECORD-0001" in search_call[-1].text  # the search hit, with its ref
    assert search_call[-1].text.count("ref a") >= 1
    assert read_call[-1].text.startswith("[archived tool")
    assert "RECORD-0001 owner=team1" in read_call[-1].text
    # recall output passes through the same guard: every call stays within budget
    assert all(HEURISTIC.count_messages(c.messages) <= 2_500 for c in llm.calls)


async def test_recall_errors_are_tool_results_not_crashes() -> None:
    state = {"n": 0}

    def reply(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None) -> Any:
        state["n"] += 1
        if state["n"] <= 6:
            return ScriptedLLM.tool_call("fetch", {"n": state["n"]})
        if state["n"] == 7:
            return ScriptedLLM.tool_call("recall", {})
        if state["n"] == 8:
            assert "query" in messages[-1].text  # the error says what to pass
            return ScriptedLLM.tool_call("recall", {"ref": "a999"})
        assert "No archived message" in messages[-1].text
        return "done"

    llm = ScriptedLLM(handler=reply)
    guard = ContextGuard(default_budget=2_500, archive=HistoryArchive())
    agent = ReActAgent(llm, [fetch], guard, budget=2_500, checklist_threshold=None)
    assert (await agent.run("go")).answer == "done"


async def test_a_user_tool_named_recall_wins() -> None:
    @tool(name="recall")
    def own(query: str) -> str:
        """My own recall."""
        return "mine"

    llm = ScriptedLLM(["done"])
    guard = ContextGuard(archive=HistoryArchive())
    await ReActAgent(llm, [own], guard, checklist_threshold=None).run("q")
    assert tool_names(llm.calls[0].tools) == ["recall"]


async def test_dag_step_agents_get_recall_over_their_own_archive() -> None:
    script = recall_script()

    def step(messages: Sequence[ChatMessage]) -> Any:
        offered = ["recall"] if any(m.role == "tool" and "cleared" in m.text
                                    for m in messages) else []
        return script(messages, [{"type": "function", "function": {"name": n}}
                                 for n in offered])

    router = Router(plans=[plan_json(("a", []))], steps={"task a": step})
    llm = ScriptedLLM(handler=router)
    small = ModelBudget(role="fast", context_size=6_500, max_output_tokens=4_000)
    engine = DAGEngine(llm, [fetch], fast_budget=small)
    events = await collect(engine, "Who owns record 1?")
    assert isinstance(events[-1], DAGDoneEvent)
    step_calls = [c for c in llm.calls if router_role(c.messages) == "step"]
    assert any("recall" in tool_names(c.tools) for c in step_calls)
    assert "recall" not in tool_names(step_calls[0].tools)
    read_back = [m for c in step_calls for m in c.messages
                 if m.role == "tool" and m.text.startswith("[archived tool")]
    assert read_back
    assert "RECORD-0001 owner=team1" in read_back[0].text


def router_role(messages: Sequence[ChatMessage]) -> str:
    from tests.test_dag_engine import role_of

    return role_of(messages)


async def test_recall_answers_stay_bounded_for_huge_or_hostile_queries() -> None:
    """A model pasting a document (100K characters, NUL bytes, lone surrogates) into recall
    gets a short answer quickly, from the agent's tool and the proxy's alike — the query is
    quoted cut, and only its first ``MAX_QUERY_CHARS`` are searched."""
    from ctxstack.agent._recall import recall_tool
    from ctxstack.compaction._archive import MAX_QUERY_CHARS
    from ctxstack.proxy.recall import recall_text

    archive = HistoryArchive()
    await archive.add([ChatMessage.user(f"Note {i}: the vault code is 7391-ALPHA.")
                       for i in range(50)])
    tool_ = recall_tool(archive)
    for query in ("\x00" * 100_000, "zzqx " * 20_000, "\ud800" * 50_000, "(" * 100_000):
        answer = await tool_.call({"query": query})
        assert len(str(answer)) < 2_000, query[:5]
        proxied = await recall_text(archive, query, 500, HEURISTIC)
        assert len(proxied) < 2_000, query[:5]
    assert len(str(await tool_.call({"ref": "a" * 100_000}))) < 2_000
    # What is searched is the query's start: a long query whose start matches still finds.
    hits = await archive.search("vault code " + "filler " * 50_000, k=3)
    assert hits
    assert "7391-ALPHA" in hits[0].message.text
    assert MAX_QUERY_CHARS < 100_000
    # A blank query is a message to the model, not an error.
    assert "pass a `query`" in await recall_text(archive, "   ", 500, HEURISTIC)


async def test_a_proxy_recall_too_long_for_its_room_shows_the_part_the_query_names() -> None:
    """Near the budget a recall result has little room: a long matching message is shown
    around what the query names (the value), not as its head and tail."""
    from ctxstack.proxy.recall import recall_text

    archive = HistoryArchive()
    filler = " ".join(f"line {i}: shipped order #A-{i} ok." for i in range(400))
    await archive.add([ChatMessage.tool(
        "call_1", f"{filler}\nThe vault combination is 7391-ALPHA.\n{filler}", name="read_log")])
    answer = await recall_text(archive, "vault combination", 80, HEURISTIC)
    assert "7391-ALPHA" in answer
    assert HEURISTIC.count_text(answer) <= 80
    assert answer.startswith("[a1] ")


async def test_recall_after_a_compaction_returns_the_reply_to_the_matching_question() -> None:
    """A chat the guard truncated: the model recalls "why did John run again?" and gets
    the answer — which shares no word with the query, while other turns share several —
    beside the question that asked it, from the agent's tool and the proxy's alike."""
    from ctxstack.agent._recall import recall_tool
    from ctxstack.proxy.recall import recall_text

    filler = [f"Day {i}: John ran to the office again, late for the {i}th time."
              if i % 12 == 0 else
              f"Day {i}: we talked about the weather, the garden and the new fence."
              for i in range(120)]
    turns = [*filler[:61], "What made you decide to run for office again?",
             "Seeing the difference I made locally last time convinced me.",
             *filler[61:]]
    messages = [ChatMessage.user(t) if i % 2 == 0 else ChatMessage.assistant(t)
                for i, t in enumerate(turns)]
    archive = HistoryArchive()
    guard = ContextGuard(default_budget=1_000, archive=archive)
    kept = await guard.check_and_compact(messages)
    assert not any("Seeing the difference" in m.text for m in kept)  # left the context
    answer = str(await recall_tool(archive).call({"query": "Why did John run for office again?"}))
    assert "What made you decide" in answer
    assert "Seeing the difference I made locally" in answer
    proxied = await recall_text(archive, "Why did John run for office again?", 2_000, HEURISTIC)
    assert "Seeing the difference I made locally" in proxied
