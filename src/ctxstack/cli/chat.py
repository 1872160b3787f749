"""``ctxstack chat``: talk to the ReAct agent in the terminal.

Uses the configured endpoint (``LLM_BASE_URL`` / ``LLM_API_KEY`` / ``LLM_MODEL``; the fast
model, for compaction summaries, from ``FAST_LLM_*`` falling back to those) or, with
``--stub``, a local scripted OpenAI-compatible server that needs no model at all. The agent
gets three harmless demo tools (calculator, clock, word counter). Each turn shows the tool
steps, any compaction of the context, the answer (streamed), and a "X.Xk in / X.Xk out"
line counting every LLM call of the turn — compaction and synthesis included.

Slash commands are handled here and never sent to the model (:mod:`ctxstack.cli.commands`):
``/help``, ``/context`` (the context meter in text), ``/compact`` (summarise the earlier
conversation now), ``/new`` and ``/quit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator, Sequence

import click
from rich.console import Console
from rich.markup import escape

from ctxstack.agent import AgentEvent, ReActAgent
from ctxstack.agent._demo_tools import demo_tools
from ctxstack.agent._prompts import DEFAULT_SYSTEM_PROMPT
from ctxstack.cli.app import main, needs_extra
from ctxstack.cli.commands import HELP, context_parts, counter_label, meter_line, parse_line
from ctxstack.compaction import CompactUtils
from ctxstack.errors import CtxstackError
from ctxstack.guard import ContextGuard, GuardCheckEvent
from ctxstack.llm.config import LLMSettings, tokenizer_path
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.stub.replies import StubReply, StubRequest
from ctxstack.memory import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, Usage
from ctxstack.server.tools import find_arithmetic
from ctxstack.tokens import TokenCounter, counter_for_model

EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}
COMPACT_KEEP_RECENT = 2


def format_usage(usage: Usage) -> str:
    """``"1.2k in / 0.3k out"``: what the done card and the CLI show after an answer."""
    return f"{usage.input_tokens / 1000:.1f}k in / {usage.output_tokens / 1000:.1f}k out"


class SessionMemory(BaseMemory):
    """The terminal session's history, in process, with its checkpoint.

    When the guard folds the history into a rolling summary, :meth:`adopt` keeps that
    summary in place of what it folded (as the service's checkpoints do): the next turn
    starts from the summary, not from the first question, so the summariser runs once
    per overflow instead of on every turn after the first.
    """

    def __init__(self) -> None:
        self._messages: list[ChatMessage] = []

    async def add_message(self, message: ChatMessage) -> None:
        self._messages.append(message)

    async def get_messages(self) -> list[ChatMessage]:
        return list(self._messages)

    async def clear(self) -> None:
        self._messages.clear()

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        """Swap the history for a compacted one (``/compact``)."""
        self._messages = list(messages)

    def adopt(self, context: Sequence[ChatMessage], stored_before: int) -> bool:
        """Checkpoint from the agent's last context: if it holds a summary this history
        does not have yet, the stored messages (of the first ``stored_before``, those
        that existed before the turn) that did not reach the context were folded into it;
        replace them, and any older summary, by the summary. Returns whether it did."""
        summary = next((m for m in context if m.kind == "summary"), None)
        if summary is None or any(m is summary for m in self._messages):
            return False
        shown = {id(m) for m in context}
        first = next((i for i, m in enumerate(self._messages[:stored_before])
                      if id(m) in shown), stored_before)
        kept = [m for m in self._messages[first:] if m.kind != "summary"]
        self._messages = [summary, *kept]
        return True


class LastContext:
    """A guard ``on_check`` listener remembering the agent's last context (for
    ``/context`` and the checkpoint) and the budget that check enforced. Only the agent's
    own iterations count (hint ``react_iteration``): the answer-writing call after them
    sends a different, shorter list that is not what the agent worked with."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] | None = None
        self.budget: int = 0

    def __call__(self, event: GuardCheckEvent) -> None:
        if event.hint != "react_iteration":
            return
        self.messages = list(event.result.messages)
        self.budget = event.budget


# --------------------------------------------------------------------------- stub script

def demo_rule(request: StubRequest) -> StubReply | str:
    """How the stub plays a tool-using model for the demo tools (deterministic, no model).

    Arithmetic in the question → ``calculator``; "time"/"clock" → ``clock``; "count" /
    "words" → ``word_count``; a tool result → an answer quoting it; the synthesis request
    → the brief answer; a summarisation request → a short summary.
    """
    last = request.messages[-1]
    text = request.last_user_text
    if request.tools is None:
        if "Brief answer" in last.text:
            return last.text.rsplit("Brief answer", 1)[1].split(":", 1)[-1].strip()
        if any("compress" in m.text for m in request.messages if m.role == "system"):
            return "Earlier, the user asked some questions and got answers from the tools."
        return f"(stub) You said: {text}"
    if last.role == "tool":
        return f"The result is {last.text}."
    if last.role == "user" and last.text.startswith("[Checklist]"):
        previous = [m.text for m in request.messages if m.role == "assistant" and m.text]
        return previous[-1] if previous else "Done."
    lowered = text.lower()
    # the service's linear scanner (a pattern here was quadratic on long digit runs)
    expression = find_arithmetic(text)
    if expression is not None:
        return StubReply.tool_call("calculator", {"expression": expression})
    if "time" in lowered or "clock" in lowered:
        return StubReply.tool_call("clock", {"timezone": "UTC"})
    if "count" in lowered or "words" in lowered:
        subject = text.split(":", 1)[1] if ":" in text else text
        return StubReply.tool_call("word_count", {"text": subject.strip()})
    return f"(stub) You said: {text}"


# --------------------------------------------------------------------------- rendering


def render(console: Console, event: AgentEvent, *, streamed: bool) -> None:
    """Print one agent event the way a person wants to follow a run."""
    match event.type:
        case "tool_call":
            args = json.dumps(event.arguments, ensure_ascii=False)
            console.print(f"  [cyan]→ {escape(event.tool)}[/]({escape(args)})")
        case "tool_result":
            style = "red" if event.error else "green"
            console.print(f"  [{style}]← {escape(event.result_preview[:200])}[/] "
                          f"[dim]({event.duration_s:.2f}s)[/]")
        case "compaction":
            c = event.compaction
            console.print(
                f"  [yellow]⟲ context compacted ({c.method}): {c.messages_before} → "
                f"{c.messages_after} messages, {c.tokens_before:,} → {c.tokens_after:,} "
                "tokens[/]"
            )
        case "warning":
            console.print(f"  [yellow]! {escape(event.message[:160])}[/]")
        case "checklist":
            console.print("  [dim]✓ checking the answer against the checklist[/]")
        case "injected":
            console.print(f"  [magenta]+ {escape(event.text)}[/]")
        case "answer_delta":
            console.print(event.text, end="", markup=False, highlight=False)
        case "done":
            result = event.result
            if streamed:
                console.print()
            else:
                console.print(result.answer, markup=False, highlight=False)
            console.print(
                f"[dim]{format_usage(result.usage)} · {result.iterations} iteration(s) · "
                f"{result.elapsed_s:.1f}s[/]"
            )
        case "error":
            console.print(f"[red]error ({event.error_type}): {escape(event.message)}[/]")
        case _:
            pass


async def _turn(agent: ReActAgent, console: Console, query: str, synthesize: bool,
                memory: SessionMemory | None = None, seen: LastContext | None = None) -> bool:
    ok = True
    stored_before = len(await memory.get_messages()) if memory is not None else 0
    async for event in agent.run_events(query, synthesize=synthesize):
        render(console, event, streamed=synthesize)
        ok = event.type != "error"
    if memory is not None and seen is not None and seen.messages is not None:
        memory.adopt(seen.messages, stored_before)
    return ok


async def _session(
    llm: LLM, fast: LLM, console: Console, *, once: str | None, budget: int | None,
    max_iterations: int, synthesize: bool, system_prompt: str | None,
) -> bool:
    try:
        return await _converse(llm, fast, console, once=once, budget=budget,
                               max_iterations=max_iterations, synthesize=synthesize,
                               system_prompt=system_prompt)
    finally:
        # The HTTP clients belong to this event loop: close them before it ends.
        for model in {id(m): m for m in (llm, fast)}.values():
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()


def model_counter(llm: LLM) -> TokenCounter:
    """The main model's counter (:func:`~ctxstack.tokens.counter_for_model`): exact
    when its tokenizer is available offline (``LLM_TOKENIZER``'s ``tokenizer.json``, else
    tiktoken by model name), else the heuristic with its margin."""
    name = getattr(llm, "model", None)
    return counter_for_model(name if isinstance(name, str) else None, tokenizer_path("main"))


async def _converse(
    llm: LLM, fast: LLM, console: Console, *, once: str | None, budget: int | None,
    max_iterations: int, synthesize: bool, system_prompt: str | None,
) -> bool:
    seen = LastContext()
    counter = model_counter(llm)
    guard = ContextGuard(compact_llm=fast, counter=counter, on_check=seen)
    memory = SessionMemory()
    agent = ReActAgent(llm, demo_tools(), guard, memory=memory, budget=budget,
                       max_iterations=max_iterations,
                       system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT)
    if once is not None:
        return await _turn(agent, console, once, synthesize)
    console.print(f"[bold]ctxstack chat[/] · budget {agent.budget:,} tokens · tools: "
                  f"{', '.join(agent.tools.names)} · /help for commands")
    console.print(f"[dim]counting tokens with {counter_label(counter)}[/]")
    while True:
        try:
            line = await asyncio.to_thread(console.input, "[bold blue]you>[/] ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return True
        parsed = parse_line(line)
        if parsed.command == "quit":
            return True
        if parsed.command is not None:
            await _command(parsed.command, console, memory, guard, seen, fast, agent.budget)
        elif parsed.unknown is not None:
            console.print(f"[yellow]unknown command {escape(parsed.unknown)}: "
                          "type /help for the list (it was not sent to the model)[/]")
        elif parsed.question is not None:
            await _turn(agent, console, parsed.question, synthesize, memory, seen)


async def _command(command: str, console: Console, memory: SessionMemory, guard: ContextGuard,
                   seen: LastContext, fast: LLM, budget: int) -> None:
    """Run a slash command (``quit`` is handled by the loop)."""
    if command == "help":
        console.print(HELP, markup=False, highlight=False, soft_wrap=True)
    elif command == "context":
        if seen.messages is None:
            console.print("[dim]no model call yet: ask something first[/]")
        else:
            console.print(meter_line(context_parts(seen.messages, guard.counter),
                                     seen.budget or budget), markup=False, soft_wrap=True)
    elif command == "new":
        await memory.clear()
        seen.messages = None
        console.print("[dim]new conversation: the history is forgotten[/]")
    elif command == "compact":
        await _compact_now(console, memory, guard, fast)


async def _compact_now(console: Console, memory: SessionMemory, guard: ContextGuard,
                       fast: LLM) -> None:
    """Fold all but the last exchange into a summary now, whatever the budget says."""
    history = await memory.get_messages()
    if len(history) <= COMPACT_KEEP_RECENT:
        console.print("[dim]nothing to compact yet[/]")
        return
    tokens = guard.counter.count_messages(history)
    result = await CompactUtils.compact_detailed(
        history, fast, max(1, tokens // 2), COMPACT_KEEP_RECENT, "general",
        counter=guard.counter)
    if result.method == "none":
        console.print("[dim]nothing to compact yet[/]")
        return
    memory.replace(result.messages)
    folded = len([m for m in result.summarized if m.metadata.get("kind") != "summary"])
    how = (f"{folded} message(s) summarised" if result.method == "llm"
           else f"summariser unavailable ({result.reason}); older messages dropped")
    console.print(f"  [yellow]⟲ compacted now: {how}; {result.messages_before} → "
                  f"{result.messages_after} messages, {result.tokens_before:,} → "
                  f"{result.tokens_after:,} tokens[/]")


@contextlib.contextmanager
def _models(use_stub: bool) -> Iterator[tuple[LLM, LLM]]:
    if use_stub:
        with needs_extra("server", "chat --stub"):
            from ctxstack.llm.stub.server import StubServer
        with StubServer(rule=demo_rule) as server:
            # The stub plays the configured model's name, so counting follows LLM_MODEL.
            name = LLMSettings.from_env().model
            llm = server.client(model=name) if name else server.client()
            yield llm, llm
        return
    yield OpenAICompatibleLLM.from_env(), OpenAICompatibleLLM.from_env("fast")


def _no_endpoint() -> bool:
    """No model endpoint configured: ``chat`` then uses the offline demo model, as
    ``serve`` does, and says so."""
    return LLMSettings.from_env().base_url is None


@main.command("chat")
@click.option("--stub", is_flag=True,
              help="Talk to a local scripted stub server instead of the configured endpoint.")
@click.option("--once", metavar="TEXT", default=None, help="Ask one question, print, exit.")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Input tokens per call (default: the model's window from LLM_* settings).")
@click.option("--max-iterations", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--no-synthesis", is_flag=True,
              help="Print the agent's brief answer instead of streaming a synthesised one.")
@click.option("--system-prompt", default=None, help="Replace the agent's system prompt.")
def chat(stub: bool, once: str | None, budget: int | None, max_iterations: int,
         no_synthesis: bool, system_prompt: str | None) -> None:
    """Chat with the ReAct agent (demo tools: calculator, clock, word counter)."""
    console = Console()
    if not stub and _no_endpoint():
        stub = True
        console.print("[yellow]LLM_BASE_URL is not set: using the offline demo model (a "
                      "local scripted stub; set LLM_BASE_URL / LLM_API_KEY / LLM_MODEL for "
                      "a real one)[/]")
    try:
        with _models(stub) as (llm, fast):
            ok = asyncio.run(_session(
                llm, fast, console, once=once, budget=budget, max_iterations=max_iterations,
                synthesize=not no_synthesis, system_prompt=system_prompt,
            ))
    except CtxstackError as exc:
        raise click.ClickException(str(exc)) from exc
    if not ok:
        raise SystemExit(1)
