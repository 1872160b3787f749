"""Shared pytest plugins: fixtures live in their own modules, registered here."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
"""CI's profile: every property test draws the same examples at every run, so whether a
submission lands does not depend on a random draw. Runs without it (a developer's
``scripts/test``) explore new examples each time; a counter-example found there becomes a
fixed test."""
if os.environ.get("CTXSTACK_HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["CTXSTACK_HYPOTHESIS_PROFILE"])

pytest_plugins = [
    "tests.db_fixtures", "tests.llm_fixtures", "tests.proxy_fixtures", "tests.service_fixtures",
]


def pytest_configure(config: pytest.Config) -> None:
    """Put tiktoken's vocabularies into its cache from the ``bpe-openai`` wheel before
    collection: the real-data test modules build exact counters at import time, and on a
    fresh machine (an empty temp directory) tiktoken would otherwise find no offline copy.
    Nothing is fetched; where no copy is installed the modules that need one say so."""
    from benchmarks.vocab import ensure_offline

    for encoding in ("o200k_base", "cl100k_base"):
        ensure_offline(encoding)
