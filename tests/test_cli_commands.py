"""The terminal chat's slash commands (issue 16): /help, /context, /compact, /new, /quit —
handled by ``ctxstack chat`` itself and never sent to the model. Runs the real command
against the real stub server (``--stub``)."""

from __future__ import annotations

import io
import re

from click.testing import CliRunner

import ctxstack.cli.chat  # noqa: F401  (registers the command)
from ctxstack.cli import main
from ctxstack.cli.commands import Parsed, context_parts, meter_line, parse_line
from ctxstack.messages import ChatMessage, ToolCall


def test_parse_line_tells_commands_from_questions() -> None:
    assert parse_line("/help") == Parsed(command="help")
    assert parse_line("  /CONTEXT ") == Parsed(command="context")
    assert parse_line("/exit") == Parsed(command="quit")
    assert parse_line("quit") == Parsed(command="quit")
    assert parse_line("/compact now please") == Parsed(command="compact")
    assert parse_line("/frobnicate") == Parsed(unknown="/frobnicate")
    # a path is a question, not a command
    assert parse_line("/etc/hosts is missing") == Parsed(question="/etc/hosts is missing")
    assert parse_line("What is 6*7?") == Parsed(question="What is 6*7?")
    assert parse_line("   ") == Parsed()


def test_context_parts_split_the_last_call() -> None:
    call = ToolCall(id="c1", name="calculator", arguments={"expression": "6*7"})
    messages = [
        ChatMessage.system("You are helpful."),
        ChatMessage.system("[Conversation summary]\nEarlier: 2+2=4.", metadata={"kind": "summary"}),
        ChatMessage.user("What is 1+1?"), ChatMessage.assistant("2"),
        ChatMessage.user("What is 6*7?"),
        ChatMessage.assistant(None, tool_calls=[call]),
        ChatMessage(role="tool", content="42", tool_call_id="c1"),
    ]
    parts = context_parts(messages)
    assert all(parts[p] > 0 for p in ("system", "summary", "history", "question", "tools"))
    line = meter_line(parts, 4000)
    assert line.startswith(f"context {sum(parts.values()):,} / 4,000 tokens (")
    assert "tool outputs" in line


def test_slash_commands_are_handled_locally_and_never_sent() -> None:
    session = "\n".join([
        "/help", "/context", "What is 6*7?", "/context", "Count the words: one two three",
        "hello there", "/compact", "/context", "/frobnicate", "/new", "/context", "/quit",
        "this is never read",
    ]) + "\n"
    result = CliRunner().invoke(main, ["chat", "--stub", "--no-synthesis", "--budget", "4000"],
                                input=session)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "/help for commands" in out
    assert "/compact  summarise the earlier conversation now" in out
    assert "no model call yet" in out  # /context before any question, and after /new
    assert out.count("no model call yet") == 2
    # The budget shown is what the messages may use: 4,000 less the three tools' specs.
    meters = re.findall(r"context ([\d,]+) / (3,[\d]{3}) tokens \(\d+%\) — system \d+ · summary "
                        r"(\d+) · history [\d,]+ · tool outputs \d+ · question \d+", out)
    assert len(meters) == 2
    assert int(meters[0][2]) == 0  # nothing summarised yet
    assert re.search(r"⟲ compacted now: (\d+ message\(s\) summarised|summariser unavailable)",
                     out)
    assert "unknown command /frobnicate" in out
    # Three questions reached the model, no command did, and nothing after /quit.
    assert out.count("k in / ") == 3
    assert "You said: /" not in out
    assert "never read" not in out


def test_compact_with_nothing_to_fold_says_so() -> None:
    result = CliRunner().invoke(main, ["chat", "--stub", "--no-synthesis"],
                                input="/compact\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "nothing to compact yet" in result.output


def _o200k_offline() -> None:
    import pytest

    pytest.importorskip("tiktoken")
    from benchmarks.vocab import ensure_offline

    reason = ensure_offline("o200k_base")
    if reason is not None:
        pytest.skip(reason)


def test_chat_counts_with_the_configured_models_exact_tokenizer() -> None:
    _o200k_offline()
    runner = CliRunner()
    exact = runner.invoke(main, ["chat", "--stub", "--budget", "4000"], input="/quit\n",
                          env={"LLM_MODEL": "gpt-4o"})
    assert exact.exit_code == 0, exact.output
    assert "counting tokens with tiktoken:o200k_base (exact)" in exact.output
    unknown = runner.invoke(main, ["chat", "--stub", "--budget", "4000"], input="/quit\n",
                            env={"LLM_MODEL": "my-local-model"})
    assert unknown.exit_code == 0, unknown.output
    assert "counting tokens with bpe-heuristic (estimate; 10% of the budget kept free)" \
        in unknown.output


def test_demo_counts_with_the_named_models_tokenizer_and_fits_by_it() -> None:
    _o200k_offline()
    import asyncio

    from ctxstack.cli.walkthrough import run_demo
    from ctxstack.tokens import counter_for_model

    result = CliRunner().invoke(main, ["demo", "--turns", "4", "--model", "gpt-4o"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "counting tokens with tiktoken:o200k_base (exact)" in result.output
    assert "Tokens counted with tiktoken:o200k_base" in result.output
    counter = counter_for_model("gpt-4o")
    report = asyncio.run(run_demo(budget=3_000, turns=6, counter=counter))
    assert report.counter == "tiktoken:o200k_base"
    guard = report.outcomes[0]
    assert guard.tokens == counter.count_messages(report.final_context) <= 3_000


async def test_the_session_keeps_its_summary_between_overflows() -> None:
    """Issue 31: with a small budget every turn after the first overflow used to send a
    summariser request starting again from the first question, growing each turn. The
    session now checkpoints the rolling summary: later summariser requests start from it,
    and the summariser runs far less often than once per turn."""
    from rich.console import Console

    from ctxstack.agent import ReActAgent
    from ctxstack.agent._demo_tools import demo_tools
    from ctxstack.cli.chat import LastContext, SessionMemory, _turn
    from ctxstack.guard import ContextGuard
    from ctxstack.testing import ScriptedLLM

    summariser_requests: list[str] = []

    from ctxstack.compaction._prompts import is_summary_instruction

    def handler(messages: list[ChatMessage], tools: object) -> str:
        # the transcript request (a summary prompt as system message), or the cache-aligned
        # one (the conversation itself, with its tools, the summary instruction last)
        if (tools is None and any("summary" in (m.text or "").lower() for m in messages
                                  if m.role == "system")) or (
                messages[-1].role == "user" and is_summary_instruction(messages[-1].text)):
            summariser_requests.append("\n".join(m.text or "" for m in messages))
            return "Earlier the user asked numbered questions; each got a long answer."
        return "A long answer. " * 40

    llm = ScriptedLLM(handler=handler)
    seen = LastContext()
    guard = ContextGuard(compact_llm=llm, on_check=seen)
    memory = SessionMemory()
    agent = ReActAgent(llm, demo_tools(), guard, memory=memory, budget=1_200)
    console = Console(file=io.StringIO())
    for i in range(1, 13):
        assert await _turn(agent, console, f"Question number {i}: tell me more.", False,
                           memory, seen)
    assert summariser_requests, "the budget was meant to overflow"
    assert len(summariser_requests) <= 6  # not one per turn
    # after the first summary, no summariser request restarts from the first question
    assert all("Question number 1:" not in r for r in summariser_requests[1:])
    history = await memory.get_messages()
    assert history[0].kind == "summary"
    assert seen.messages is not None
    assert any(m.role == "system" and m.kind != "summary" for m in seen.messages)
    assert seen.messages[-1].text.startswith("Question number 12")  # the agent's own context


def test_chat_without_an_endpoint_uses_the_demo_model_and_says_so(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("LLM_BASE_URL", "FAST_LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, ["chat", "--no-synthesis", "--once", "What is 6*7?"])
    assert result.exit_code == 0, result.output
    assert "LLM_BASE_URL is not set: using the offline demo model" in result.output
    assert "42" in result.output
