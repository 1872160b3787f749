"""The ReAct agent through a long, real-shape tool run (fixtures: ``tests/realdata``).

35 tool turns of SWE-agent-like work — shell logs of thousands of tokens, parallel calls,
CJK file contents, one tool that fails — on a 12,000-token budget, with a summariser
and an archive, on top of history loaded from an exported conversation. What a user
relies on: every request the model receives fits the budget by o200k_base and is a valid
chat-completions request, the system prompt and the current question are always there,
and the run ends with the model's answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ctxstack import ChatMessage, ContextGuard, HistoryArchive, ToolCall, WindowMemory
from ctxstack.agent import ReActAgent, tool
from ctxstack.llm import ScriptedLLM
from ctxstack.messages import from_openai_messages
from ctxstack.messages._tool_turns import tool_turn_problems
from ctxstack.tokens import TiktokenCounter
from tests import realdata

pytest.importorskip("tiktoken")
O200K = TiktokenCounter("o200k_base")
BUDGET = 12_000
TOOL_TURNS = 35
SYSTEM = "You are a careful software engineer. Answer in the user's language."
QUERY = "ヘッダーのバグを直して、何を変えたか説明してください。"


@tool
def bash(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    if "pytest" in command:
        return realdata.shell_log(300)
    if "fail" in command:
        raise RuntimeError("exit status 2: No such file or directory")
    return realdata.MULTILINGUAL["ja"] + "\n" + realdata.unified_diff()


@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file's path.
    """
    return f"# {path}\n" + realdata.html_page()


def _scripted_model(seen: list[Sequence[ChatMessage]]) -> ScriptedLLM:
    turns = iter(range(TOOL_TURNS))

    def answer(messages: Sequence[ChatMessage], tools: object) -> ChatMessage | str:
        seen.append(list(messages))
        n = next(turns, None)
        if n is None:
            return "修正しました: Header._update がキーワードを大文字にします (NAXIS1)。"
        if n % 4 == 0:  # parallel calls, content alongside
            return ChatMessage.assistant(f"Step {n}: tests and the file.", tool_calls=[
                ToolCall(id=f"call_{n}_a", name="bash", arguments={"command": "pytest -q"}),
                ToolCall(id=f"toolu_{n}_b", name="read_file", arguments={"path": "header.py"}),
            ])
        command = "cat missing && fail" if n % 7 == 3 else f"git diff -- step{n}"
        return ChatMessage.assistant(None, tool_calls=[
            ToolCall(id=f"{n:08x}-uuid", name="bash", arguments={"command": command})])

    return ScriptedLLM(handler=answer)


async def test_react_agent_runs_35_real_tool_turns_within_budget() -> None:
    history = from_openai_messages(realdata.openai_export())[2:-1]  # after the two prompts
    memory = WindowMemory(30)
    for m in history:
        await memory.add_message(m)
    seen: list[Sequence[ChatMessage]] = []
    summariser = ScriptedLLM(handler=lambda m, t: "要約: NAXIS1 の修正中。pytest は 1 件失敗。")
    guard = ContextGuard(compact_llm=summariser, archive=HistoryArchive())
    agent = ReActAgent(_scripted_model(seen), [bash, read_file], guard, system_prompt=SYSTEM,
                       memory=memory, budget=BUDGET, max_iterations=60)
    result = await agent.run(QUERY)

    assert result.stopped_reason == "answer"
    assert "NAXIS1" in result.answer
    assert len(result.trace) >= TOOL_TURNS
    assert any(e.error and "exit status 2" in e.result_preview for e in result.trace)
    assert result.compactions, "a 12k budget must have forced compaction"
    assert len(seen) >= TOOL_TURNS + 1
    for request in seen:
        assert O200K.count_messages(request) <= BUDGET
        assert tool_turn_problems(request) == []
        assert request[0].role == "system"
        assert request[0].text.startswith(SYSTEM[:20])
        assert any(m.kind == "query" and m.text == QUERY for m in request)
        first = next(m for m in request if m.role != "system")
        assert first.role == "user"
