"""Held-out conversations: fact shapes and wording written apart from the extractor.

These were written for the recall benchmark without looking at the fact extractor's
patterns or the generator's value makers: identifier shapes with slashes and dots,
Windows paths, day-month dates, CJK dates and amounts, currencies with a symbol after,
versions with suffixes, e-mails, and *phrases* (a name, a place, a constraint in words)
that no numeric pattern can catch. Each conversation states its facts once, early, in a
user turn, then runs through tool-heavy filler; the question names the subject only.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict

from ctxstack.messages import ChatMessage, ToolCall

HELD_OUT_FACTS: list[tuple[str, str, str]] = [
    # (subject sentence with {v}, value, question)
    ("The shipment reference is {v}.", "KX/2291-B.7", "What is the shipment reference?"),
    ("Save the export to {v} please.", r"C:\Reports\q3\summary_final.xlsx",
     "Where should the export be saved?"),
    ("The audit happens on {v}.", "5 March 2026", "When does the audit happen?"),
    ("契約の開始日は{v}です。", "2026年4月1日", "契約の開始日はいつですか"),
    ("预算上限是{v}，不能超过。", "4万8千元", "预算上限是多少"),
    ("We pin the client library at {v}.", "v2.4.1-rc2", "Which client library version?"),
    ("Send the invoice to {v}.", "billing.ops@northwind-example.org",
     "Where should the invoice go?"),
    ("Our contact there is {v}, ask for her directly.", "Marguerite Okonkwo-Delacroix",
     "Who is our contact there?"),
    ("The team offsite will be at {v}.", "the Blue Heron Lodge on Lake Saimaa",
     "Where is the team offsite?"),
    ("The hard rule: {v}.", "no flights departing before 9 in the morning",
     "What is the hard rule about flights?"),
    ("The license key is {v}.", "Q7ZP-M2R4-W9XK", "What is the license key?"),
    ("Room rate agreed: {v} per night.", "€184,50", "What room rate was agreed?"),
]

FILLER_USER = [
    "Can you check the next batch of results?", "Keep going with the comparison.",
    "What does the latest page say?", "Any changes since the last check?",
    "次の結果も確認してください。", "继续比较下一组数据。",
]
FILLER_ASSISTANT = [
    "I checked the batch; nothing unusual so far.", "The comparison continues as planned.",
    "確認しました。特に問題はありません。", "已经检查，没有发现异常。",
]


class HeldOutConversation(BaseModel):
    """A held-out conversation and its facts ((value, question) pairs)."""

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    facts: list[tuple[str, str]]


def held_out(seed: int, *, turns: int = 40, per_conversation: int = 4) -> HeldOutConversation:
    """One held-out conversation: facts stated early, then tool-heavy filler turns."""
    rng = random.Random(seed)
    chosen = rng.sample(HELD_OUT_FACTS, per_conversation)
    msgs = [ChatMessage.system("You are an operations assistant.")]
    for sentence, value, _ in chosen:
        msgs.append(ChatMessage.user("Before we start, one detail. " + sentence.format(v=value)))
        msgs.append(ChatMessage.assistant("Noted, I will keep that in mind."))
    for t in range(turns):
        msgs.append(ChatMessage.user(rng.choice(FILLER_USER)))
        call = ToolCall(id=f"h{seed}_{t}", name="lookup", arguments={"batch": t})
        msgs.append(ChatMessage.assistant(None, tool_calls=[call]))
        rows = [{"row": i, "status": rng.choice(["ok", "late", "pending"]),
                 "score": round(rng.random() * 100, 2)} for i in range(25)]
        msgs.append(ChatMessage.tool(call.id, str(rows)))
        msgs.append(ChatMessage.assistant(rng.choice(FILLER_ASSISTANT)))
    msgs.append(ChatMessage.user("Summarise where we are.", pinned=True,
                                 metadata={"kind": "query"}))
    return HeldOutConversation(messages=msgs, facts=[(v, q) for _, v, q in chosen])
