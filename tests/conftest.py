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


SLOW_FILES_FIRST = (
    "test_service_inject_load.py", "test_browser.py", "test_service_inject_faults.py",
    "test_regex_linear_time.py",
)
"""Files whose tests take a minute or more together: run first, so that with the suite's
``--dist loadfile`` the last file a worker takes is a short one and the two workers finish
together (the kill-and-cut load file alone takes ~3 minutes on one worker)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move :data:`SLOW_FILES_FIRST` to the front, in that order; every other test keeps
    its place. Deterministic, so every xdist worker collects the same order."""
    rank = {name: n for n, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config: pytest.Config) -> None:
    """Put tiktoken's vocabularies into its cache from the ``bpe-openai`` wheel before
    collection: the real-data test modules build exact counters at import time, and on a
    fresh machine (an empty temp directory) tiktoken would otherwise find no offline copy.
    Nothing is fetched; where no copy is installed the modules that need one say so."""
    from benchmarks.vocab import ensure_offline

    for encoding in ("o200k_base", "cl100k_base"):
        ensure_offline(encoding)
