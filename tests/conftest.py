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


SLOWEST_FILES: tuple[str, ...] = (
    "tests/test_service_inject_load.py",
    "tests/test_service_inject_faults.py",
    "tests/test_browser.py",
    "tests/test_server_streams.py",
    "tests/test_regex_linear_time.py",
    "tests/test_server_injects.py",
    "tests/test_service_concurrency.py",
    "tests/test_service_faults.py",
    "tests/store/test_users_cli.py",
    "tests/test_bench_runner.py",
    "tests/test_server_compactions.py",
)
"""The test files that take longest, longest first (``--durations``, full suite on two
workers: the first two ~3 minutes each, the rest 0.5–2). They run first: ``scripts/test``
hands whole files to its two workers in collection order (``--dist loadfile
--no-loadscope-reorder``), and in xdist's default order — by number of tests — these few-
test files came last, so one worker ran them alone for the suite's last ~4 minutes while
the other idled."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move :data:`SLOWEST_FILES` to the front, keeping every file's tests together and in
    order (a stable sort by the file's rank)."""
    rank = {path: i for i, path in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
