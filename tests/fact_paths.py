"""The fact extractor's two paths as a fixture: ``fact_path`` runs a test once on the C
scanner ``ctxstack._factscan`` and once on the pure-Python path.

Register with ``pytest_plugins = ["tests.fact_paths"]`` (the root conftest does). The
native run is skipped when the scanner is not built — a failure instead under
``CTXSTACK_REQUIRE_SPEEDUPS=1`` (CI), like the token estimator's accelerator.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ctxstack.compaction import _facts as facts

REQUIRED = os.environ.get("CTXSTACK_REQUIRE_SPEEDUPS") == "1"
NATIVE = facts._NATIVE


def require_native() -> None:
    """Skip (or, when required, fail) a test that needs the C scanner."""
    if NATIVE is None:
        if REQUIRED:
            pytest.fail("CTXSTACK_REQUIRE_SPEEDUPS=1 but ctxstack._factscan is not built "
                        "(or was built for another grammar)")
        pytest.skip("ctxstack._factscan is not built")


@pytest.fixture(params=["native", "pure"])
def fact_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Which path ``extract_candidates`` (and all that uses it) takes in this test."""
    if request.param == "native":
        require_native()
    else:
        monkeypatch.setattr(facts, "_NATIVE", None)
    facts.clear_caches()  # a verdict cached by the other path must not hide a difference
    yield request.param
    facts.clear_caches()
