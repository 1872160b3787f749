# expect: all guard promises held
"""ContextGuard on its own: fit a long tool-using conversation into a small budget.

No agent, no database: a 160-message conversation (an analyst's assistant fetching
reports, with bulky JSON tool results) goes through ``ContextGuard.check_and_compact``
twice at a 3,000-token budget:

1. without a compact LLM — ``smart_truncate`` keeps the system prompt, the pinned
   question and the newest whole turns;
2. with a summariser (an offline ``ScriptedLLM`` that keeps only each message's first
   sentence, deliberately lossy) — the oldest history becomes one
   ``[Conversation summary]``, and exact values the summary dropped come back under
   "Facts kept verbatim".

It prints what each kept, then checks the guard's promises: the result fits, the system
prompt and the pinned question are kept, order is preserved, no tool result lost its call,
and the input list was not changed. Exits 1 if any promise is broken.

Run: ``python examples/guard_only.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ctxstack import ChatMessage, CompactionEvent, ContextGuard, ToolCall
from ctxstack.testing import ScriptedLLM, first_sentence_summarizer
from ctxstack.tokens import estimate_messages_tokens

BUDGET = 3_000


def conversation() -> list[ChatMessage]:
    """System prompt, 39 tool rounds with user turns, and the current (pinned) question."""
    messages = [ChatMessage.system("You are an analyst's assistant. Answer from the reports.")]
    messages.append(ChatMessage.user(
        "We review Q3 for the Osaka office. The budget ceiling is 4,200,000 JPY; never "
        "book anything above it. Report files live under /srv/reports/2026/."))
    for i in range(1, 40):
        call = ToolCall(id=f"call_{i}", name="fetch_report", arguments={"week": i})
        rows = [{"week": i, "line": j, "amount_jpy": 10_000 * i + j, "status": "ok"}
                for j in range(12)]
        messages += [
            ChatMessage.user(f"Now week {i}, please. Flag anything unusual."),
            ChatMessage.assistant(f"Fetching week {i}.", tool_calls=[call]),
            ChatMessage.tool(f"call_{i}", json.dumps({"rows": rows}), name="fetch_report"),
            ChatMessage.assistant(f"Week {i} looks normal. Ticket OPS-{7000 + i} logged."),
        ]
    messages.append(ChatMessage.user(
        "Which ticket did you log for week 3, and what is our budget ceiling?",
        pinned=True, metadata={"kind": "query"}))
    return messages


def describe(label: str, before: list[ChatMessage], after: list[ChatMessage]) -> None:
    print(f"\n== {label}")
    print(f"messages {len(before)} -> {len(after)}, tokens "
          f"{estimate_messages_tokens(before):,} -> {estimate_messages_tokens(after):,} "
          f"(budget {BUDGET:,})")
    shown = after if len(after) <= 10 else [*after[:6], None, *after[-3:]]
    for m in shown:
        if m is None:
            print(f"  … {len(after) - 9} more kept messages …")
            continue
        flags = " [pinned]" if m.pinned else ""
        kind = m.metadata.get("kind")
        flags += f" [{kind}]" if kind else ""
        text = m.text.replace("\n", " | ")
        if m.tool_calls:
            text = f"{text} -> {m.tool_calls[0].name}({m.tool_calls[0].arguments_json})"
        print(f"  {m.role:<9}{flags} {text[:110]}{'…' if len(text) > 110 else ''}")


def broken_promises(before: list[ChatMessage], after: list[ChatMessage]) -> list[str]:
    problems = []
    if estimate_messages_tokens(after) > BUDGET:
        problems.append("the result is over budget")
    if after[0] != before[0]:
        problems.append("the system prompt was not kept first")
    if before[-1] not in after:
        problems.append("the pinned question was dropped")
    positions = [before.index(m) for m in after if m in before]
    if positions != sorted(positions):
        problems.append("the kept messages are out of order")
    call_ids = {c.id for m in after for c in m.tool_calls or ()}
    if any(m.role == "tool" and m.tool_call_id not in call_ids for m in after):
        problems.append("a tool result was kept without its call")
    return problems


async def main() -> int:
    messages = conversation()
    snapshot = list(messages)
    events: list[CompactionEvent] = []

    truncating = ContextGuard(default_budget=BUDGET, on_compact=events.append)
    truncated = await truncating.check_and_compact(messages, hint="react_iteration")
    describe("no compact LLM: smart_truncate", messages, truncated)

    summariser = ScriptedLLM(handler=first_sentence_summarizer)
    summarising = ContextGuard(compact_llm=summariser, default_budget=BUDGET,
                               on_compact=events.append)
    summarised = await summarising.check_and_compact(messages, hint="react_iteration")
    describe("with a summariser: rolling summary + recent turns", messages, summarised)

    print("\ncompaction events:")
    for e in events:
        print(f"  method={e.method} messages {e.messages_before}->{e.messages_after} "
              f"tokens {e.tokens_before:,}->{e.tokens_after:,} summarized={e.summarized} "
              f"usage={e.usage.input_tokens} in / {e.usage.output_tokens} out")

    summary = next((m for m in summarised if m.metadata.get("kind") == "summary"), None)
    if summary is not None and "Facts kept verbatim:" in summary.text:
        facts = summary.text.split("Facts kept verbatim:", 1)[1].strip().splitlines()
        print(f"\nthe summary re-attached {len(facts)} exact values, e.g. "
              f"{[f for f in facts if len(f) > 6][:4]}")
    for value in ("OPS-7003", "4,200,000"):
        found = summary is not None and value in summary.text
        print(f"{value} still in the summarised context: {found}")

    problems = [f"truncate: {p}" for p in broken_promises(messages, truncated)]
    problems += [f"summary: {p}" for p in broken_promises(messages, summarised)]
    if messages != snapshot:
        problems.append("the input list was modified")
    if [e.method for e in events] != ["truncate", "llm"]:
        problems.append(f"expected one truncation and one LLM compaction, got {events}")
    if summary is None:
        problems.append("the summarising guard produced no [Conversation summary]")
    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    if not problems:
        print("all guard promises held")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
