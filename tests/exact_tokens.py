"""What the token-counting tests share: the exact tokenizers they compare with (loaded
offline, or the test skipped), and the estimator's feature counts by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from benchmarks.vocab import ensure_offline
from ctxstack.tokens import TiktokenCounter


def exact(encoding: str) -> TiktokenCounter:
    """tiktoken's ``encoding`` from the ``bpe-openai`` copy; the test is skipped, with the
    reason, when tiktoken or the copy is missing."""
    pytest.importorskip("tiktoken")
    reason = ensure_offline(encoding)
    if reason is not None:
        pytest.skip(reason)
    return TiktokenCounter(encoding)


def named_counts(text: str, names: Sequence[str],
                 extract: Callable[[bytes], Sequence[int]]) -> dict[str, int]:
    """The features ``extract`` counts in ``text`` (as UTF-8, lone surrogates kept), by
    name, the zero ones left out."""
    raw = text.encode("utf-8", "surrogatepass")
    return {name: n for name, n in zip(names, extract(raw), strict=True) if n}
