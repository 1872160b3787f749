"""``ctxstack demo``: show, offline, what the stack keeps when a conversation overflows."""

from __future__ import annotations

import asyncio

import click
from rich.console import Console
from rich.table import Table

from ctxstack.cli.app import main
from ctxstack.cli.commands import counter_label
from ctxstack.cli.walkthrough import FACTS, DemoReport, run_demo
from ctxstack.llm.config import LLMSettings, tokenizer_path
from ctxstack.tokens import counter_for_model


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k"


def render(report: DemoReport, console: Console) -> None:
    console.rule(f"[bold]ctxstack demo[/bold] — a {len(report.rows)}-turn multilingual "
                 "tool conversation")
    ratio = report.total_history_tokens / report.budget
    console.print(
        f"Budget: [bold]{report.budget:,}[/bold] input tokens. Full history: "
        f"{report.total_history_tokens:,} tokens (≈{ratio:.1f}× the budget). Summariser: a "
        "deliberately lossy scripted one (first sentence of each message), so what survives "
        f"beyond it is what ctxstack itself preserves. Tokens counted with {report.counter}.\n"
    )
    steps = Table(title="Layer 3 — ContextGuard, every turn", show_lines=False)
    for col in ("turn", "lang", "msgs in", "tokens in", "action", "msgs out", "tokens out",
                "summarised"):
        steps.add_column(col, justify="left" if col in ("action", "lang") else "right")
    for r in report.rows:
        style = "green" if r.action == "within budget" else "yellow"
        steps.add_row(str(r.turn), r.language, str(r.messages_in), _k(r.tokens_in),
                      f"[{style}]{r.action}[/{style}]", str(r.messages_out), _k(r.tokens_out),
                      str(r.summarized) if r.summarized else "")
    console.print(steps)

    facts = Table(title="Planted facts still in the final context")
    facts.add_column("fact")
    facts.add_column("value")
    for o in report.outcomes:
        facts.add_column(o.name, justify="center")
    for label, value in FACTS.items():
        facts.add_row(label, value, *("[green]kept[/green]" if o.facts_kept[label]
                                      else "[red]lost[/red]" for o in report.outcomes))
    facts.add_row("current question", "(pinned)",
                  *("[green]kept[/green]" if o.query_kept else "[red]lost[/red]"
                    for o in report.outcomes))
    facts.add_row("system prompt", "",
                  *("[green]kept[/green]" if o.system_kept else "[red]lost[/red]"
                    for o in report.outcomes))
    facts.add_row("tokens used", f"≤ {report.budget:,}",
                  *(f"{o.tokens:,}" for o in report.outcomes))
    console.print(facts)

    outline = Table(title="Final context the model would see")
    outline.add_column("#", justify="right")
    outline.add_column("role")
    outline.add_column("kind")
    outline.add_column("preview", overflow="fold")
    for i, m in enumerate(report.final_context):
        preview = m.text.replace("\n", " ")
        if m.tool_calls:
            preview = ", ".join(f"{c.name}({c.arguments_json})" for c in m.tool_calls)
        outline.add_row(str(i), m.role, m.kind or ("pinned" if m.pinned else ""),
                        preview[:110] + ("…" if len(preview) > 110 else ""))
    console.print(outline)


@main.command()
@click.option("--budget", default=3_000, show_default=True, type=click.IntRange(min=500),
              help="Input-token budget to squeeze the conversation into.")
@click.option("--turns", default=10, show_default=True, type=click.IntRange(1, 200),
              help="Conversation turns (each: question, tool call, large JSON result, answer).")
@click.option("--model", default=None, metavar="NAME",
              help="Count tokens as this model does: exact when its tokenizer is available "
                   "offline (e.g. gpt-4o, or LLM_TOKENIZER's tokenizer.json for LLM_MODEL), "
                   "else the heuristic. Default: LLM_MODEL.")
def demo(budget: int, turns: int, model: str | None) -> None:
    """Run a long multilingual tool conversation through the stack, offline, and show
    what each layer kept, summarised or dropped."""
    configured = LLMSettings.from_env().model
    name = model or configured
    # LLM_TOKENIZER belongs to LLM_MODEL: another --model counts by its own name.
    counter = counter_for_model(name, tokenizer_path("main") if name == configured else None)
    console = Console()
    console.print(f"[dim]counting tokens with {counter_label(counter)}[/]")
    report = asyncio.run(run_demo(budget=budget, turns=turns, counter=counter))
    render(report, console)
