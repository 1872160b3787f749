"""Realistic calibration traffic: growing conversations, one provider call per turn.

A provider call carries the whole request — system prompt, tool schemas, the conversation
so far — and consecutive calls of one conversation share all but their newest messages.
This module builds such traffic from the **evaluation** split of
:mod:`benchmarks.token_corpus` (never the texts the estimator was fitted on) and replays
it through a fresh :class:`~ctxstack.tokens.CalibratingCounter` per conversation:
before each call the counter predicts the request's size, then it observes what the
"provider" reported (tiktoken's exact count of the same messages, with the same
per-message arithmetic, plus the tool schemas' JSON). Errors are collected from the 6th
call on (after 5 observed calls).

Three predictors on the same calls: the counter as shipped (per-kind factors plus the
anchor on the previous call's reported total), the same counter with its anchor dropped
after every call (per-kind factors only), and the uncalibrated heuristic.

Read the uncalibrated column too: a whole request sums many texts, whose errors partly
cancel, so against ``o200k_base`` (the tokenizer the default weights were fitted to) even
the uncalibrated heuristic is within a few % per call here. The calibration's work shows
against ``cl100k_base`` with the default (o200k) weights — a provider whose tokenizer the
estimator does not model — where the uncalibrated error on CJK and mixed traffic is large.

The tool schemas are written here (three small OpenAI function specs, the kind an agent
sends); everything else is corpus text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.protocol import ToolSpec, Usage
from ctxstack.tokens import HEURISTIC, CalibratingCounter, TokenCounter

CALLS_OBSERVED = 5
TRAFFIC_KINDS = ("tool-heavy JSON", "code", "English prose", "CJK", "mixed chat")


def _spec(name: str, description: str, **props: str) -> ToolSpec:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "required": list(props),
                       "properties": {k: {"type": "string", "description": v}
                                      for k, v in props.items()}}}}


TOOLS: list[ToolSpec] = [
    _spec("search", "Full-text search over the project's documents.", q="the query"),
    _spec("read_file", "Read a file of the repository.", path="relative path"),
    _spec("query", "Run a read-only SQL query.", sql="the statement", db="database name"),
]


@dataclass
class TrafficErrors:
    """Relative errors (predicted − reported) / reported of every call after the first 5."""

    anchored: list[float] = field(default_factory=list)
    factors_only: list[float] = field(default_factory=list)
    uncalibrated: list[float] = field(default_factory=list)


def _turn_picker(kind: str, pools: dict[str, list[str]],
                 rng: random.Random) -> Callable[[int], list[ChatMessage]]:
    def pick(*kinds: str, cap: int = 3000) -> str:
        usable = [k for k in kinds if pools.get(k)] or ["prose"]
        text = rng.choice(pools[rng.choice(usable)])
        top = min(cap, len(text))
        return text[: rng.randint(min(200, top), top)]

    def tool_turn(turn: int, ask: tuple[str, ...]) -> list[ChatMessage]:
        call = ToolCall(id=f"call_{turn}", name=rng.choice(("search", "read_file", "query")),
                        arguments={"q": pick(*ask, cap=160)})
        return [ChatMessage.user(pick(*ask, cap=600)),
                ChatMessage.assistant(None, tool_calls=[call]),
                ChatMessage.tool(call.id, pick("json", "json", "code"))]

    def turn(i: int) -> list[ChatMessage]:
        if kind == "tool-heavy JSON":
            return tool_turn(i, ("prose",)) if rng.random() < 0.75 else [
                ChatMessage.assistant(pick("prose", cap=800))]
        if kind == "code":
            return [ChatMessage.user(pick("prose", "code", cap=800)),
                    ChatMessage.assistant(pick("code"))]
        if kind == "English prose":
            return [ChatMessage.user(pick("prose", cap=800)), ChatMessage.assistant(pick("prose"))]
        if kind == "CJK":
            return [ChatMessage.user(pick("zh", "ja", cap=600)),
                    ChatMessage.assistant(pick("zh", "ja"))]
        roll = rng.random()
        if roll < 0.4:
            return tool_turn(i, ("prose", "zh", "ja", "mixed"))
        return [ChatMessage.user(pick("prose", "zh", "ja", "mixed", cap=800)),
                ChatMessage.assistant(pick("prose", "code", "zh", "ja"))]

    return turn


def replay(kind: str, pools: dict[str, list[str]], exact: TokenCounter, conversations: int,
           calls: int, seed: int = 5) -> TrafficErrors:
    """``conversations`` growing conversations of ``kind``, ``calls`` provider calls each."""
    rng = random.Random(f"{seed}:{kind}")
    out = TrafficErrors()
    tools = TOOLS if kind in ("tool-heavy JSON", "mixed chat") else None
    tools_json = json.dumps(tools, ensure_ascii=False, separators=(",", ":")) if tools else ""
    tools_exact = exact.count_text(tools_json)
    for _ in range(conversations):
        anchored, plain = CalibratingCounter(HEURISTIC), CalibratingCounter(HEURISTIC)
        turn = _turn_picker(kind, pools, rng)
        sent = [ChatMessage.system(rng.choice(pools["prose"])[:600])]
        for i in range(calls):
            sent = [*sent, *turn(i + 1)]
            reported = exact.count_messages(sent) + tools_exact
            if i >= CALLS_OBSERVED:
                for counter, errors in ((anchored, out.anchored), (plain, out.factors_only)):
                    guess = counter.count_messages(sent) + (
                        counter.count_text(tools_json) if tools else 0)
                    errors.append((guess - reported) / reported)
                raw = HEURISTIC.count_messages(sent) + HEURISTIC.count_text(tools_json)
                out.uncalibrated.append((raw - reported) / reported)
            usage = Usage(input_tokens=reported, calls=1)
            anchored.observe_call(sent, usage, tools)
            plain.observe_call(sent, usage, tools)
            plain.forget_anchor()
    return out
