"""The exact tokenizers the counting tests compare with, loaded offline or skipped."""

from __future__ import annotations

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
