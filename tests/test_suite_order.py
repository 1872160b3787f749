"""The suite's own scheduling (``tests/conftest.py``): the slowest files run first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tests.conftest import SLOWEST_FILES, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_slow_file_exists() -> None:
    # a renamed file would silently fall back to the end of the run
    missing = [path for path in SLOWEST_FILES if not (ROOT / path).is_file()]
    assert missing == []
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)


def test_slow_files_move_to_the_front_with_their_tests_in_order() -> None:
    slow, slower = SLOWEST_FILES[1], SLOWEST_FILES[0]
    ids = ["tests/test_a.py::one", f"{slow}::x", "tests/test_a.py::two", f"{slower}::y",
           f"{slow}::z[1]", "tests/test_b.py::three"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    pytest_collection_modifyitems(cast(Any, items))
    assert [i.nodeid for i in items] == [
        f"{slower}::y", f"{slow}::x", f"{slow}::z[1]",
        "tests/test_a.py::one", "tests/test_a.py::two", "tests/test_b.py::three"]
