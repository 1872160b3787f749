"""Search cases the hybrid archive ranking must get right on every backend (issue 29).

Each case is a small history (evidence among distractors that share the question's
words or characters) and a question; the evidence must rank first. Shared by the
in-memory archive's tests and the store's (SQLite and PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchCase:
    name: str
    texts: list[str]
    question: str
    evidence: str
    """A substring of the one message that answers."""


FILLER = [
    "We talked about the weather and the weekend plans again.",
    "What did you think of the film? I did not like the ending.",
    "When is the next train? I think it leaves at the top of the hour.",
    "Did you go to the market? They had the good bread again.",
    "The group chat was busy today, everyone was posting photos.",
    "Can you remind me what we said about the garden?",
]

CASES = [
    SearchCase(
        name="english question, evidence in other inflections",
        texts=[*FILLER,
               "Mia mentioned she went to her first support-group meeting last Tuesday, "
               "the one for caregivers at the library.",
               *FILLER,
               "Do you want to go to the group dinner on Friday? When did we last go?"],
        question="When did Mia go to the support group?",
        evidence="support-group meeting last Tuesday",
    ),
    SearchCase(
        name="chinese",
        texts=[*FILLER, "好的。", "我们的预算上限是四万八千元，请不要超过。", "预算的事情以后再说。",
               "上周的会议很长。", *FILLER],
        question="预算上限是多少",
        evidence="四万八千元",
    ),
    SearchCase(
        name="japanese",
        texts=[*FILLER, "了解しました。", "会議は東京本社の第三会議室で三月五日に行います。",
               "会議の資料はまだです。", "東京は雨でした。", *FILLER],
        question="会議室はどこですか",
        evidence="第三会議室",
    ),
    SearchCase(
        name="identifier among near misses",
        texts=[*FILLER, "Order ORD-99813-XK shipped on Monday.",
               "My order id is ORD-99812-XK and it weighs 3.14 kg.",
               "Order ORD-19812-XQ was cancelled.", *FILLER],
        question="status of ORD-99812-XK",
        evidence="ORD-99812-XK and it weighs",
    ),
]

ONE_SIDED = SearchCase(
    name="evidence only the n-gram half finds, among messages both halves match",
    texts=[*FILLER,
           "Kenji said the meeting notes are on the shared drive.",
           "Kenji said he would be late on Monday.",
           "Kenji mentioned the move again but nothing is decided.",
           "Kenji and I talked about lunch options near the office.",
           "Kenji said the printer on the third floor is broken.",
           "Kenji asked whether the head office has parking.",
           "そういえば東京本社の移転先は品川の新しいビルに決まりました。",
           *FILLER],
    question="What did Kenji say about 東京本社の移転?",
    evidence="品川の新しいビル",
)
"""A mixed-script question: its Japanese words match no word token of the evidence (FTS5
keeps a CJK run as one token), so only the n-gram half lists the evidence — first — while
six messages match both halves through "Kenji". A fusion that rewards appearing in both
lists above a clear first place (reciprocal rank fusion with its usual constant 60) leaves
the evidence out of the top 5."""
