"""Shared pytest plugins: fixtures live in their own modules, registered here."""

from __future__ import annotations

import pytest

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
