"""Token counting: the counter protocol, the default heuristic (within 10% of
o200k_base), the seed's formula by name, exact counters for known tokenizers, calibration
from provider-reported usage, and usage metering.

All of it is pure Python. The default heuristic (:class:`HeuristicCounter`, the model of
``ctxstack.tokens._model``) needs no vocabulary and no compiled code, and counts ≥ 8×
faster than tiktoken's encode on every kind of text the accuracy benchmark measures.

Exact counts, where the model's tokenizer is known, go through a maintained compiled
tokenizer package, never code of ctxstack's own: **tiktoken** (:class:`TiktokenCounter`,
``pip install 'ctxstack[tiktoken]'``) for OpenAI's ``o200k_base`` and ``cl100k_base``,
picked by model name in :func:`counter_for_model`. Why tiktoken: it is OpenAI's own
tokenizer for those vocabularies, maintained alongside the models (a Rust core with
wheels for the common platforms, so no compiler at install either), and on the accuracy
benchmark it is identical by construction — it *is* the reference the benchmark counts
against (``benchmarks/bench_tokens_accuracy.py``). Another package would be adopted only
if it were as well maintained and identical on that benchmark; none is needed. For a
model with a Hugging Face ``tokenizer.json``, :class:`TokenizerJsonCounter` uses the
``tokenizers`` library (``ctxstack[tokenizers]``), that model's own tokenizer.

Importing this package never imports the LLM client or the guard.
"""

from ctxstack.tokens._calibration import CalibratingCounter
from ctxstack.tokens._counter import (
    DEFAULT_COUNTER,
    HEURISTIC,
    SEED_HEURISTIC,
    BaseCounter,
    HeuristicCounter,
    SeedHeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    estimate_messages_tokens,
    estimate_tokens,
)
from ctxstack.tokens._exact import TokenizerJsonCounter, counter_for_model
from ctxstack.tokens._metering import MeteredLLM, UsageMeter

__all__ = [
    "DEFAULT_COUNTER",
    "HEURISTIC",
    "SEED_HEURISTIC",
    "BaseCounter",
    "CalibratingCounter",
    "HeuristicCounter",
    "MeteredLLM",
    "SeedHeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerJsonCounter",
    "UsageMeter",
    "counter_for_model",
    "estimate_messages_tokens",
    "estimate_tokens",
]
