"""The context strategies the fidelity benchmark compares, and its lossy summariser.

Every strategy takes the whole conversation (system prompt first, pinned query last), a
token budget and a summariser LLM, and returns the messages it would send:

* ``naive drop-oldest`` — the baseline a user writes in five minutes: keep the leading
  system messages, drop the oldest other messages until the estimate fits. It knows
  nothing of tool groups or pinned messages, and fills the nominal budget by the
  estimate, which can overflow the real tokenizer (the benchmark reports how often);
* ``naive drop-oldest, real-token budget`` — the same, held to the budget by the exact
  o200k tokenizer (when it is available offline): the fair bound, the one
  ``smart_truncate`` is held to through its counter's safety margin;
* ``smart_truncate`` and ``llm_compact (<hint>)`` for each of the four hints — ctxstack's
  :class:`~ctxstack.compaction.CompactUtils`;
* ``WindowMemory`` — sized in messages, as a user would size it: the budget divided by the
  conversation's mean message size (it has no token budget, so it may overshoot);
* ``SummaryMemory`` — its message threshold sized like ``WindowMemory``'s window, and the
  budget as its token budget.

The summariser is :func:`lossy_summarizer`: a ``ScriptedLLM`` whose "summary" is only the
first sentence of each message in the transcript it is shown. The generator never puts a fact
in a first sentence, so any fact that survives an LLM strategy was kept by ctxstack
itself (recent messages kept verbatim, pinned messages, re-attached exact values), not by
a clever model.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.fidelity.sizing import exact_o200k
from ctxstack.compaction import CompactUtils
from ctxstack.compaction._prompts import HINTS
from ctxstack.errors import TokenizerUnavailableError
from ctxstack.llm import LLM, ScriptedLLM
from ctxstack.memory import SummaryMemory, WindowMemory
from ctxstack.messages import ChatMessage
from ctxstack.testing import first_sentence_summarizer
from ctxstack.tokens import HEURISTIC, TokenCounter

StrategyFn = Callable[[list[ChatMessage], int, LLM], Awaitable[list[ChatMessage]]]
KEEP_RECENT = 4


@dataclass(frozen=True)
class Strategy:
    name: str
    run: StrategyFn
    budgeted: bool
    """Takes a token budget (so "within budget" is a fair question)."""
    uses_llm: bool
    baseline: bool = False


# ---------------------------------------------------------------------------- summariser


def lossy_summarizer() -> ScriptedLLM:
    """The benchmark's summariser: ctxstack's shared deliberately lossy fake.

    ``ScriptedLLM(handler=first_sentence_summarizer)`` keeps the first sentence of each
    transcript entry of the compaction request and nothing else. The generator never puts
    a fact in a first sentence, so this summariser never carries one (a test checks this
    on the real compaction requests).
    """
    return ScriptedLLM(handler=first_sentence_summarizer, name="lossy-first-sentence")


# ---------------------------------------------------------------------------- strategies


def naive_drop_oldest(messages: Sequence[ChatMessage], max_tokens: int,
                      counter: TokenCounter = HEURISTIC) -> list[ChatMessage]:
    """Keep leading system messages; drop the oldest others until ``counter`` says the
    rest fits ``max_tokens`` (the default heuristic's estimate, with no margin)."""
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    head, rest = list(messages[:lead]), list(messages[lead:])
    total = counter.count_messages(head) + counter.count_messages(rest)
    drop = 0
    while total > max_tokens and drop < len(rest):
        total -= counter.count_message(rest[drop])
        drop += 1
    return head + rest[drop:]


async def _naive(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
    return naive_drop_oldest(messages, budget)


@functools.cache
def real_counter() -> TokenCounter | None:
    """The exact o200k tokenizer (what the default heuristic estimates), if it is
    available offline; None otherwise."""
    return exact_o200k()


async def _naive_real(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
    counter = real_counter()
    if counter is None:
        raise TokenizerUnavailableError("o200k_base is not available offline")
    return naive_drop_oldest(messages, budget, counter)


def window_size(messages: Sequence[ChatMessage], budget: int) -> int:
    """Messages that fit ``budget`` at the conversation's mean message size (at least 1)."""
    others = [m for m in messages if m.role != "system"]
    mean = HEURISTIC.count_messages(others) / max(1, len(others))
    return max(1, int(budget // mean))


def library_strategies() -> list[Strategy]:
    """ctxstack's strategies: ``smart_truncate``, ``llm_compact`` per hint, the memories."""

    async def smart(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
        return list(CompactUtils.smart_truncate(messages, budget))

    async def window(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
        memory = WindowMemory(window_size(messages, budget))
        for m in messages:
            await memory.add_message(m)
        return list(await memory.get_messages())

    async def summary(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
        threshold = max(KEEP_RECENT + 1, window_size(messages, budget))
        memory = SummaryMemory(llm, threshold, keep_recent=KEEP_RECENT, budget=budget)
        for m in messages:
            await memory.add_message(m)
        return list(await memory.get_messages())

    return [
        Strategy("smart_truncate", smart, budgeted=True, uses_llm=False),
        *(Strategy(f"llm_compact ({hint})", _compact_with(CompactUtils, hint),
                   budgeted=True, uses_llm=True) for hint in HINTS),
        Strategy("WindowMemory", window, budgeted=False, uses_llm=False),
        Strategy("SummaryMemory", summary, budgeted=True, uses_llm=True),
    ]


def _compact_with(utils: Any, hint: str) -> StrategyFn:
    async def compact(messages: list[ChatMessage], budget: int, llm: LLM) -> list[ChatMessage]:
        return list(await utils.llm_compact(messages, llm, budget, keep_recent=KEEP_RECENT,
                                            hint=hint))

    return compact


NAIVE = Strategy("naive drop-oldest", _naive, budgeted=True, uses_llm=False, baseline=True)
NAIVE_REAL = Strategy("naive drop-oldest, real-token budget", _naive_real, budgeted=True,
                      uses_llm=False, baseline=True)
"""The same baseline held to the budget by the exact tokenizer instead of the estimate:
what it keeps is what actually fits, the same bound ``smart_truncate`` is held to (through
its counter's margin)."""


def all_strategies() -> list[Strategy]:
    """The baselines first (the real-token one when the tokenizer is available offline),
    then every ctxstack strategy."""
    real = [NAIVE_REAL] if real_counter() is not None else []
    return [NAIVE, *real, *library_strategies()]
