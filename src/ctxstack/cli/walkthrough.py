"""The offline demo: a long multilingual tool-using conversation run through the stack.

``ctxstack demo`` renders what :func:`run_demo` computes. The scenario is deterministic:
an operations assistant planning an offsite over many turns, in English, Japanese and
Chinese, with tool calls whose JSON results are large. Facts a summary tends to lose — an
amount, a ticket ID, a file path, a date, a constraint stated once early — are planted in
the early turns, and the final question depends on them.

Each turn the conversation grows and goes through :class:`~ctxstack.guard.ContextGuard`
the way an agent's context would, at a small budget, with a deliberately lossy scripted
summariser (:func:`~ctxstack.testing.first_sentence_summarizer`). At the end the same
history is also cut by plain ``smart_truncate`` and by a naive "drop the oldest messages"
baseline, and the report shows which planted facts each approach still carries.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxstack.compaction import CompactUtils
from ctxstack.guard import CompactionEvent, ContextGuard
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.testing import ScriptedLLM, first_sentence_summarizer
from ctxstack.tokens import HEURISTIC, TokenCounter

SYSTEM_PROMPT = (
    "You are Atlas, an operations assistant. You plan company events with the tools you "
    "have, keep exact figures, and answer in the user's language."
)

FACTS: dict[str, str] = {
    "budget cap": "$48,250",
    "ticket": "OPS-4471",
    "headcount": "42名",
    "dates": "2026-03-14",
    "report path": "/data/reports/offsite-2026.xlsx",
    "dietary constraint": "nut-free",
}

_USER_TURNS: list[tuple[str, str]] = [
    ("en", "I'm planning our Q3 offsite. The budget is capped at $48,250 and everything "
           "must stay nut-free because of two severe allergies. Track it under ticket OPS-4471."),
    ("ja", "参加者は42名です。日程は2026-03-14から3日間でお願いします。"
           "京都駅から30km以内が条件です。"),
    ("zh", "请把预算报告保存到 /data/reports/offsite-2026.xlsx，并每周更新一次。"),
    ("en", "Can you compare the three cheapest venues and check their catering options?"),
    ("ja", "交通手段も調べてください。バスのチャーターは可能ですか？"),
    ("zh", "再查一下附近的酒店，每晚价格不要超过两万日元。"),
    ("en", "Draft an agenda with two workshops a day and a long lunch."),
    ("ja", "雨天の場合の代替プランも用意してください。"),
    ("en", "Summarise the options we have so far in a short table."),
    ("zh", "确认一下所有供应商是否都能提供发票。"),
]

FINAL_QUERY = (
    "Give me the final plan: which venue, total cost against our cap, the ticket to update, "
    "where the report goes, and how the catering meets our constraint."
)


def _tool_result(turn: int, topic: str) -> str:
    """A large, realistic JSON tool result (the kind that floods a context window)."""
    rows = [
        {
            "id": f"{topic[:3].upper()}-{turn:02d}{i:03d}",
            "name": f"{topic.title()} option {i}",
            "price_jpy": 180_000 + 7_500 * i + 1_000 * turn,
            "distance_km": round(4.5 + 2.25 * i, 2),
            "rating": round(3.5 + (i % 5) * 0.3, 1),
            "notes": "Catering on site; allergen menu available on request; invoices issued "
                     "monthly; shuttle from the station every 30 minutes.",
        }
        for i in range(14)
    ]
    return json.dumps({"query": topic, "results": rows}, ensure_ascii=False)


_TOPICS = ["venues", "catering", "transport", "hotels", "agenda", "weather", "summary",
           "invoices", "vendors", "rooms"]


def build_turns(turns: int) -> list[list[ChatMessage]]:
    """``turns`` conversation turns, each [user, assistant tool call, tool result, answer]."""
    out: list[list[ChatMessage]] = []
    for t in range(turns):
        lang, text = _USER_TURNS[t % len(_USER_TURNS)]
        topic = _TOPICS[t % len(_TOPICS)]
        call = ToolCall(id=f"call_{t}", name=f"search_{topic}", arguments={"turn": t, "lang": lang})
        answer = (
            f"I looked up {topic}: option 0 is the cheapest at ¥{180_000 + 1_000 * t:,}. "
            "Details are in the tool result above; tell me which you prefer."
        )
        out.append([
            ChatMessage.user(text, metadata={"lang": lang}),
            ChatMessage.assistant(None, tool_calls=[call]),
            ChatMessage.tool(call.id, _tool_result(t, topic), name=call.name),
            ChatMessage.assistant(answer),
        ])
    return out


@dataclass(frozen=True)
class TurnRow:
    """What the guard did at one turn."""

    turn: int
    language: str
    messages_in: int
    tokens_in: int
    action: str
    messages_out: int
    tokens_out: int
    summarized: int
    dropped: int


@dataclass(frozen=True)
class StrategyOutcome:
    """One approach's final context and which planted facts it still carries."""

    name: str
    messages: int
    tokens: int
    facts_kept: dict[str, bool]
    query_kept: bool
    system_kept: bool


@dataclass
class DemoReport:
    budget: int
    counter: str = HEURISTIC.cache_key
    """The ``cache_key`` of the counter every figure was made with."""
    rows: list[TurnRow] = field(default_factory=list)
    outcomes: list[StrategyOutcome] = field(default_factory=list)
    final_context: list[ChatMessage] = field(default_factory=list)
    total_history_tokens: int = 0


def _drop_oldest(messages: Sequence[ChatMessage], budget: int,
                 counter: TokenCounter = HEURISTIC) -> list[ChatMessage]:
    """The naive baseline: drop the oldest non-system messages until the rest fits."""
    head = [m for m in messages[:1] if m.role == "system"]
    rest = list(messages[len(head):])
    while rest and counter.count_messages(head + rest) > budget:
        rest.pop(0)
    return head + rest


def _outcome(name: str, context: Sequence[ChatMessage], query: ChatMessage,
             counter: TokenCounter) -> StrategyOutcome:
    text = "\n".join(m.text for m in context)
    return StrategyOutcome(
        name=name,
        messages=len(context),
        tokens=counter.count_messages(context),
        facts_kept={label: value in text for label, value in FACTS.items()},
        query_kept=any(m.text == query.text for m in context),
        system_kept=bool(context) and context[0].text == SYSTEM_PROMPT,
    )


async def run_demo(budget: int = 3_000, turns: int = 10,
                   counter: TokenCounter = HEURISTIC) -> DemoReport:
    """Grow the conversation turn by turn through a guard at ``budget`` tokens, every
    count by ``counter`` (the CLI passes the configured model's, exact when known)."""
    report = DemoReport(budget=budget, counter=counter.cache_key)
    events: list[CompactionEvent] = []
    guard = ContextGuard(
        compact_llm=ScriptedLLM(handler=first_sentence_summarizer, name="demo-summariser"),
        default_budget=budget,
        on_compact=events.append,
        counter=counter,
    )
    system = ChatMessage.system(SYSTEM_PROMPT)
    query = ChatMessage.query(FINAL_QUERY)
    context: list[ChatMessage] = [system]
    full_history: list[ChatMessage] = [system]
    for t, turn in enumerate(build_turns(turns)):
        context = [*context, *turn]
        full_history.extend(turn)
        before_events = len(events)
        tokens_in = counter.count_messages(context)
        result = await guard.check_and_compact(context, hint="react_iteration")
        event = events[-1] if len(events) > before_events else None
        summarized = event.summarized if event else 0
        report.rows.append(TurnRow(
            turn=t + 1,
            language=str(turn[0].metadata.get("lang", "")),
            messages_in=len(context),
            tokens_in=tokens_in,
            action="within budget" if event is None else (
                "LLM summary" if event.method == "llm" else f"truncate ({event.reason or 'no LLM'})"
            ),
            messages_out=len(result),
            tokens_out=counter.count_messages(result),
            summarized=summarized,
            dropped=len(context) - len(result) if event and event.method == "truncate" else 0,
        ))
        context = result
    final = await guard.check_and_compact([*context, query], hint="react_iteration")
    report.final_context = final
    report.total_history_tokens = counter.count_messages([*full_history, query])
    everything = [*full_history, query]
    truncated = CompactUtils.smart_truncate(everything, budget, counter=counter)
    report.outcomes = [
        _outcome("ctxstack guard (LLM summary + facts)", final, query, counter),
        _outcome("smart_truncate only", truncated, query, counter),
        _outcome("naive: drop oldest", _drop_oldest(everything, budget, counter), query,
                 counter),
    ]
    return report
