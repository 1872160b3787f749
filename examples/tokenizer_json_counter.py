# requires: tokenizers
# expect: exact counts held: the fitted history is within budget by the model's own tokenizer
"""Exact token counts from a model's ``tokenizer.json`` (the ``[tokenizers]`` extra).

For a model whose tokenizer is a Hugging Face ``tokenizer.json`` (an open-weights model's
repository ships one), pass the file and ctxstack counts with it exactly instead of
estimating. Offline, this script first *makes* such a file: it trains a small BPE
tokenizer with the ``tokenizers`` library on a few sentences and saves it, as a stand-in
for the file a real model ships. Then:

1. ``counter_for_model(model, tokenizer_path=...)`` returns a ``TokenizerJsonCounter``
   (exact, no safety margin), and a missing file falls back to the heuristic instead of
   failing (a service must not stop over a tokenizer);
2. a ``ContextGuard`` with that counter fits a long conversation to a budget, and the
   result is checked with the same tokenizer.

Run: ``pip install 'ctxstack[tokenizers]'`` then ``python examples/tokenizer_json_counter.py``.
Exits 1 if a check fails.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from ctxstack import ChatMessage, ContextGuard
from ctxstack.tokens import HeuristicCounter, TokenizerJsonCounter, counter_for_model

CORPUS = [
    "The warehouse in Lyon ships order A-1042 on Tuesday.",
    "Inventory counts are refreshed every night at two o'clock.",
    "Shelf B holds twenty-five boxes of copper fittings.",
    "The planning assistant answers questions about budgets and shipments.",
] * 50
BUDGET = 1_200


def make_tokenizer_json(directory: Path) -> Path:
    """Train a small BPE vocabulary offline and save it as a ``tokenizer.json``."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    path = directory / "tokenizer.json"
    tokenizer.save(str(path))
    return path


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ctxstack-tokenizer-") as tmp:
        path = make_tokenizer_json(Path(tmp))
        counter = counter_for_model("my-local-model", tokenizer_path=path)
        if not isinstance(counter, TokenizerJsonCounter):
            print(f"FAILED: expected a TokenizerJsonCounter, got {counter!r}", file=sys.stderr)
            return 1
        sentence = "Shelf B holds twenty-five boxes; order A-1042 ships on Tuesday."
        print(f"tokenizer.json counter: {counter.count_text(sentence)} tokens "
              f"(heuristic estimate: {HeuristicCounter().count_text(sentence)})")

        fallback = counter_for_model("other-model", tokenizer_path=Path(tmp) / "missing.json")
        print(f"a missing tokenizer.json falls back to: {type(fallback).__name__}")
        if not isinstance(fallback, HeuristicCounter):
            print("FAILED: a missing file should fall back to the heuristic", file=sys.stderr)
            return 1

        history = [ChatMessage.system("You are the planning assistant.")]
        for i in range(40):
            history += [ChatMessage.user(f"Question {i}: {CORPUS[i % 4]} " * 3),
                        ChatMessage.assistant(f"Answer {i}: {CORPUS[(i + 1) % 4]} " * 3)]
        history.append(ChatMessage.user("When does order A-1042 ship?"))
        fitted = await ContextGuard(counter=counter).check_and_compact(history, budget=BUDGET)
        before = counter.count_messages(history)
        after = counter.count_messages(fitted)
        print(f"history: {len(history)} messages, {before} tokens -> "
              f"{len(fitted)} messages, {after} tokens (budget {BUDGET})")
        if after > BUDGET or fitted[-1].text != history[-1].text:
            print("FAILED: the fitted history is over budget or lost the question",
                  file=sys.stderr)
            return 1
    print("exact counts held: the fitted history is within budget by the model's own tokenizer")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
