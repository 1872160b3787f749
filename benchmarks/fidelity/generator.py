"""Seeded generator of long synthetic conversations with planted facts.

A conversation is a system prompt, then turns (a user message, zero or more tool rounds
— an assistant message with tool calls and one tool result per call, the results large
JSON documents — and an assistant answer), then the current question as a pinned user
message (metadata kind ``query``). It is written in English, Chinese, Japanese, or a mix
(each message, and sometimes each sentence, in one of the three).

Into it we plant the facts that summaries lose: exact numbers, IDs, file paths, dates and
constraints the user states once, early. Each :class:`PlantedFact` has a ``subject`` (the
phrase that names it, unique through a project codename), the exact ``value``, and a
``question`` that names the subject and never contains the value.

Guarantees the benchmark relies on (checked on every generation, a violation raises):

* same ``(seed, language, target_tokens, n_facts)`` → the identical conversation;
* every value occurs exactly once in the whole conversation (as a whole token: see
  :func:`benchmarks.fidelity.scorer.find_value`), so finding it after compaction means it
  was kept, never that it was re-created by chance;
* a fact never sits in the first sentence of its message, nor in the first
  ``FACT_MIN_OFFSET`` characters: the benchmark's lossy summariser keeps only first
  sentences, so every fact that survives compaction was preserved by the library itself.
"""

from __future__ import annotations

import itertools
import json
import random
import string
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from benchmarks.fidelity import phrases
from benchmarks.fidelity.phrases import Lang
from benchmarks.fidelity.scorer import count_value
from benchmarks.fidelity.sizing import sizing_counter
from ctxstack.messages import ChatMessage, Role, ToolCall

Language = Literal["en", "zh", "ja", "mixed"]
LANGUAGES: tuple[Language, ...] = ("en", "zh", "ja", "mixed")
FactKind = Literal["number", "id", "path", "date", "constraint"]
FACT_KINDS: tuple[FactKind, ...] = ("number", "id", "path", "date", "constraint")
FACT_MIN_OFFSET = 200
"""A fact's value starts at least this many characters into its message."""


class PlantedFact(BaseModel):
    """One fact planted in a conversation."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: FactKind
    subject: str
    value: str
    question: str
    message_index: int
    role: Role
    language: Lang


class Conversation(BaseModel):
    """A generated conversation: messages (system prompt first, pinned query last) + facts."""

    model_config = ConfigDict(frozen=True)

    seed: int
    language: Language
    messages: list[ChatMessage]
    facts: list[PlantedFact]

    @property
    def system_prompt(self) -> ChatMessage:
        return self.messages[0]

    @property
    def query(self) -> ChatMessage:
        return self.messages[-1]

    @property
    def tokens(self) -> int:
        return sizing_counter().count_messages(self.messages)


def _value_makers(rng: random.Random, cn: str) -> dict[FactKind, list[Callable[[], str]]]:
    """Value generators, index-aligned with ``phrases.SUBJECTS[kind][lang]``."""
    low = cn.lower()

    def letters(k: int) -> str:
        return "".join(rng.choice(string.ascii_uppercase) for _ in range(k))

    return {
        "number": [
            lambda: f"{rng.randint(10_000, 99_999)}.{rng.randint(10, 99)}",
            lambda: f"{rng.randint(1_000, 9_999)} req/s",
            lambda: f"{rng.randint(100_000, 999_999)}.{rng.randint(10, 99)}",
        ],
        "id": [
            lambda: f"INV-{rng.randint(1000, 9999)}-{letters(2)}{rng.randint(100, 999)}",
            lambda: f"TCK-{rng.randint(100_000, 999_999)}",
            lambda: f"CR-{rng.randint(2019, 2023)}-{rng.randint(1000, 9999)}",
        ],
        "path": [
            lambda: (f"/srv/{low}/exports/{rng.randint(2019, 2023)}-q{rng.randint(1, 4)}/"
                     f"ledger_{rng.randint(1000, 9999)}.csv"),
            lambda: (f"/etc/{low}/{rng.choice(phrases.SERVICES)}/"
                     f"settings-{rng.randint(100, 999)}.yaml"),
        ],
        "date": [
            lambda: f"{rng.randint(2019, 2023)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            lambda: f"{rng.randint(2019, 2023)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        ],
        "constraint": [
            lambda: f"replica-{low}-{rng.randint(10, 99)}",
            lambda: f"{rng.randint(1_000, 9_999)} rows",
            lambda: f"{rng.randint(10_000, 99_999)} EUR",
        ],
    }


class _Builder:
    """Stateful helper for one generation (all randomness from one seeded RNG)."""

    def __init__(self, seed: int, language: Language) -> None:
        self.rng = random.Random(f"ctxstack-fidelity:{seed}:{language}")
        self.language = language
        self.call_ids = 0

    # ---------------------------------------------------------------- text
    def lang(self) -> Lang:
        if self.language == "mixed":
            return self.rng.choice(("en", "zh", "ja"))
        return self.language

    def sentence(self, lang: Lang) -> str:
        template = self.rng.choice(phrases.FILLER[lang])
        return template.format(cn=self.rng.choice(phrases.CODENAMES),
                               svc=self.rng.choice(phrases.SERVICES), n=self.rng.randint(2, 60))

    @staticmethod
    def join(lang: Lang, sentences: list[str]) -> str:
        return (" " if lang == "en" else "").join(sentences)

    def paragraph(self, lang: Lang, n: int, fact_sentence: str | None = None) -> str:
        """An opener and ``n`` filler sentences; the fact sentence, if any, goes after at
        least ``FACT_MIN_OFFSET`` characters of filler (more filler is added if needed).

        In a mixed conversation a sentence switches language now and then.
        """
        parts = [(lang, self.rng.choice(phrases.OPENERS[lang]))]

        def add_filler() -> None:
            s_lang = self.lang() if self.language == "mixed" and self.rng.random() < 0.3 else lang
            parts.append((s_lang, self.sentence(s_lang)))

        if fact_sentence is not None:
            while len(parts) < 3 or sum(len(p[1]) + 1 for p in parts) < FACT_MIN_OFFSET:
                add_filler()
            parts.append((lang, fact_sentence))
            for _ in range(self.rng.randint(0, max(0, n - 2))):
                add_filler()
        else:
            for _ in range(n):
                add_filler()
        text = parts[0][1]
        for prev, cur in itertools.pairwise(parts):
            text += (" " if "en" in (prev[0], cur[0]) else "") + cur[1]
        return text

    # ---------------------------------------------------------------- tools
    def call_id(self) -> str:
        self.call_ids += 1
        return f"call_{self.call_ids:04d}"

    def tool_result(self, name: str, fact_record: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
        """Arguments and a large JSON result for one of four tools."""
        rng = self.rng
        lang = self.lang()
        n = rng.randint(8, 36)

        def stamp() -> str:  # timestamps only (never a bare date a fact could collide with)
            return (f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
                    f"T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z")

        args: dict[str, Any]
        records: list[dict[str, Any]]
        if name == "search_orders":
            args = {"customer": rng.choice(phrases.CODENAMES), "limit": n}
            records = [
                {"order_id": f"ORD-{rng.randint(10_000, 99_999)}",
                 "amount": round(rng.uniform(5, 999), 2), "currency": "EUR",
                 "status": rng.choice(["shipped", "pending", "returned", "cancelled"]),
                 "updated_at": stamp(), "note": self.sentence(lang)}
                for _ in range(n)
            ]
        elif name == "query_metrics":
            args = {"service": rng.choice(phrases.SERVICES), "window": "24h"}
            records = [
                {"ts": stamp(), "p50_ms": round(rng.uniform(3, 40), 1),
                 "p95_ms": round(rng.uniform(40, 400), 1), "errors": rng.randint(0, 9)}
                for _ in range(n)
            ]
        elif name == "list_deployments":
            args = {"environment": rng.choice(["staging", "production"])}
            records = [
                {"id": f"dep-{rng.randint(1000, 9999)}", "service": rng.choice(phrases.SERVICES),
                 "version": f"{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
                 "region": rng.choice(["eu-central", "us-east", "ap-northeast"]),
                 "started_at": stamp(), "comment": self.sentence(lang)}
                for _ in range(n)
            ]
        else:  # read_file
            args = {"path": f"docs/runbook-{rng.randint(2, 60)}.md"}
            records = [{"line": i + 1, "text": self.sentence(lang)} for i in range(n)]
        if fact_record is not None:
            records.insert(rng.randint(3, len(records)), fact_record)
        body = {"tool": name, "status": "ok", "count": len(records), "records": records}
        return args, json.dumps(body, ensure_ascii=False)


TOOLS = ("search_orders", "query_metrics", "list_deployments", "read_file")


def generate(
    seed: int,
    language: Language = "en",
    *,
    target_tokens: int = 40_000,
    n_facts: int = 20,
) -> Conversation:
    """Build one conversation of about ``target_tokens`` (heuristic) with ``n_facts`` facts.

    Raises ``ValueError`` for an unknown language or too many facts for the codenames.
    """
    if language not in LANGUAGES:
        raise ValueError(f"language: unknown {language!r} (expected one of {LANGUAGES})")
    if not 1 <= n_facts <= len(phrases.CODENAMES):
        raise ValueError(f"n_facts: must be between 1 and {len(phrases.CODENAMES)}")
    if target_tokens < 2_000:
        raise ValueError("target_tokens: must be at least 2000")
    b = _Builder(seed, language)
    rng = b.rng

    # Plan the facts: kinds round-robin, constraints first (they are stated early).
    kinds = [FACT_KINDS[i % len(FACT_KINDS)] for i in range(n_facts)]
    kinds.sort(key=lambda k: k != "constraint")
    codenames = rng.sample(phrases.CODENAMES, n_facts)
    # Where each fact goes, as a share of the conversation's length: constraints in the
    # first tenth (stated once, early), the rest anywhere.
    at_share = [rng.uniform(0.0, 0.1) if kind == "constraint" else rng.uniform(0.0, 0.95)
                for kind in kinds]

    system = ChatMessage.system(
        phrases.SYSTEM_PROMPT.format(policy=f"SP-{rng.randint(1000, 9999)}")
    )
    messages: list[ChatMessage] = [system]
    facts: list[PlantedFact] = []
    used: set[str] = set()
    pending = sorted(range(n_facts), key=lambda i: at_share[i])

    def make_fact(i: int, lang: Lang) -> tuple[str, str]:
        kind = kinds[i]
        options = phrases.SUBJECTS[kind][lang]
        which = rng.randrange(len(options))
        subject = options[which].format(cn=codenames[i])
        value = _value_makers(rng, codenames[i])[kind][which]()
        while value in used:
            value = _value_makers(rng, codenames[i])[kind][which]()
        used.add(value)
        return subject, value

    def record(i: int, subject: str, value: str, index: int, role: Role, lang: Lang) -> None:
        facts.append(PlantedFact(
            id=f"f{i:02d}", kind=kinds[i], subject=subject, value=value,
            question=phrases.QUESTION[lang].format(subject=subject),
            message_index=index, role=role, language=lang,
        ))

    size = sizing_counter()
    while pending or size.count_messages(messages) < target_tokens:
        progress = size.count_messages(messages) / target_tokens
        here = [i for i in pending if at_share[i] <= progress]
        for i in here:
            pending.remove(i)
        # Who states each fact this turn: constraints always the user; others vary.
        slots: dict[str, list[int]] = {"user": [], "tool": [], "assistant": []}
        for i in here:
            if kinds[i] == "constraint":
                slots["user"].append(i)
            else:
                slots[rng.choice(("user", "tool", "assistant"))].append(i)

        lang = b.lang()
        user_facts: list[int | None] = list(slots["user"]) or [None]
        for j, uf in enumerate(user_facts):
            fact_sentence = None
            if uf is not None:
                subject, value = make_fact(uf, lang)
                tmpl = (phrases.CONSTRAINT_SENTENCE[lang] if kinds[uf] == "constraint"
                        else rng.choice(phrases.FACT_SENTENCE[lang]))
                fact_sentence = tmpl.format(subject=subject, value=value)
                record(uf, subject, value, len(messages) + (1 if j else 0), "user", lang)
            if j == 0:
                messages.append(ChatMessage.user(b.paragraph(lang, rng.randint(2, 5), fact_sentence)))
            else:  # a second fact for the user this turn: a follow-up message and reply
                messages.append(ChatMessage.assistant(b.paragraph(lang, rng.randint(1, 3))))
                messages.append(ChatMessage.user(b.paragraph(lang, rng.randint(2, 4), fact_sentence)))

        tool_facts = list(slots["tool"])
        rounds = rng.choice((0, 0, 1, 1, 1, 2)) if not tool_facts else max(1, len(tool_facts))
        for r in range(rounds):
            parallel = 2 if rng.random() < 0.2 else 1
            calls = [ToolCall(id=b.call_id(), name=rng.choice(TOOLS), arguments={})
                     for _ in range(parallel)]
            results: list[ChatMessage] = []
            built_calls: list[ToolCall] = []
            for k, call in enumerate(calls):
                fact_record = None
                if k == 0 and r < len(tool_facts):
                    i = tool_facts[r]
                    t_lang = b.lang()
                    subject, value = make_fact(i, t_lang)
                    fact_record = {"label": subject, "value": value,
                                   "source": rng.choice(phrases.SERVICES)}
                    record(i, subject, value, len(messages) + 1 + k, "tool", t_lang)
                args, content = b.tool_result(call.name, fact_record)
                built_calls.append(call.model_copy(update={"arguments": args}))
                results.append(ChatMessage.tool(call.id, content, name=call.name))
            messages.append(ChatMessage.assistant(None, tool_calls=built_calls))
            messages.extend(results)

        assistant_facts: list[int | None] = list(slots["assistant"]) or [None]
        for j, af in enumerate(assistant_facts):
            fact_sentence = None
            if af is not None:
                subject, value = make_fact(af, lang)
                fact_sentence = rng.choice(phrases.FACT_SENTENCE[lang]).format(
                    subject=subject, value=value)
                record(af, subject, value, len(messages) + (1 if j else 0), "assistant",
                       lang)
            if j > 0:
                messages.append(ChatMessage.user(b.paragraph(lang, rng.randint(1, 3))))
            messages.append(ChatMessage.assistant(b.paragraph(lang, rng.randint(3, 7),
                                                              fact_sentence)))

    # The current question: pinned, about one planted fact chosen by the seed.
    asked = rng.choice(facts)
    q_lang: Lang = asked.language if language == "mixed" else language
    messages.append(ChatMessage.user(
        phrases.QUERY[q_lang].format(ref=f"Q-{rng.randint(1000, 9999)}", question=asked.question),
        pinned=True, metadata={"kind": "query"},
    ))
    conversation = Conversation(seed=seed, language=language, messages=messages,
                                facts=sorted(facts, key=lambda f: f.id))
    check(conversation)
    return conversation


def check(conversation: Conversation) -> None:
    """Assert the generator's guarantees (see the module docstring); raise ValueError."""
    from benchmarks.fidelity.scorer import context_text, first_sentence

    whole = context_text(conversation.messages)
    for fact in conversation.facts:
        msg = conversation.messages[fact.message_index]
        text = msg.text
        if count_value(fact.value, whole) != 1:
            raise ValueError(f"{fact.id}: value {fact.value!r} occurs "
                             f"{count_value(fact.value, whole)} times, expected once")
        pos = text.find(fact.value)
        if pos < 0 or msg.role != fact.role:
            raise ValueError(f"{fact.id}: not in message {fact.message_index} ({msg.role})")
        if pos < FACT_MIN_OFFSET or fact.value in first_sentence(text):
            raise ValueError(f"{fact.id}: value at offset {pos}, inside the first sentence "
                             "or too close to the start")
        if fact.subject not in fact.question or fact.value in fact.question:
            raise ValueError(f"{fact.id}: question must name the subject, not the value")
