"""The measure the benchmark generators size their conversations by.

A generator grows a conversation until it holds ``target_tokens``. Counted with the
default estimator, every change to the estimator re-drew the very conversations it is
then evaluated on (the digit-run change of 2026-12-06 moved the fidelity set and the bill
benchmark's fitting runs). The size is therefore counted with a fixed measure: the exact
``o200k_base`` tokenizer — what the default estimator estimates, available offline in
the ``bench`` and ``dev`` extras (:mod:`benchmarks.vocab`). Without it the generators fall
back to the default estimator, and say so on stderr once, since their data then differ.
"""

from __future__ import annotations

import functools
import sys

from ctxstack.errors import TokenizerUnavailableError
from ctxstack.tokens import HEURISTIC, TiktokenCounter, TokenCounter


@functools.cache
def exact_o200k() -> TokenCounter | None:
    """The exact o200k tokenizer, if it is available offline; None otherwise."""
    from benchmarks.vocab import ensure_offline

    if ensure_offline("o200k_base") is not None:
        return None
    try:
        return TiktokenCounter("o200k_base")
    except TokenizerUnavailableError:
        return None


@functools.cache
def sizing_counter() -> TokenCounter:
    """What conversation sizes are counted with: exact o200k, else the default estimator."""
    exact = exact_o200k()
    if exact is None:
        print("benchmarks: o200k_base is not available offline; the generators size their "
              "conversations with the default estimator (their data differ)", file=sys.stderr)
        return HEURISTIC
    return exact


def sizing_name() -> str:
    """How the sizes are counted, for a report."""
    return "the exact o200k_base tokenizer" if exact_o200k() is not None else \
        "the default estimator (o200k_base was not available offline)"
