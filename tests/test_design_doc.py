"""docs/DESIGN.md stays true: what it names exists, and the sections the code cites exist.

The table "Where each rule of the seed lives in code" (§7) names a module and function for
every rule; each name must resolve in the package (a renamed or deleted function fails
here, naming the row). Comments and docstrings cite the document as
``docs/DESIGN.md §N`` (or ``§N.M``): each cited section must be a heading of the document.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "DESIGN.md"
PACKAGE = ROOT / "src" / "ctxstack"


def _section(text: str, number: str) -> str:
    start = re.search(rf"^## {re.escape(number)}\. .*$", text, re.M)
    assert start is not None, f"docs/DESIGN.md has no section {number}"
    end = re.search(r"^## \d+\. ", text[start.end():], re.M)
    return text[start.end(): start.end() + end.start() if end else len(text)]


def _rule_rows() -> list[tuple[str, str]]:
    rows = []
    for line in _section(DOC.read_text(encoding="utf-8"), "7").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        is_row = len(cells) == 2 and cells[1] and not set(cells[1]) <= {"-", " "}
        if is_row and cells[0] != "rule":
            rows.append((cells[0], cells[1]))
    return rows


def _resolve(dotted: str) -> tuple[Any, Any]:
    """(object, its container) for ``a.b.c`` under ``ctxstack``; raises if it does not exist."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module("ctxstack." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        container: Any = obj
        for name in parts[cut:]:
            container, obj = obj, getattr(obj, name)
        return obj, container
    raise LookupError(f"no module ctxstack.{parts[0]}")


def names_in(cell: str) -> list[str]:
    """The backticked names of a "where" cell, parenthesised remarks left out."""
    without_remarks = re.sub(r"\([^)]*\)", "", cell)
    return re.findall(r"`([^`]+)`", without_remarks)


def _relative(container: Any, dotted: str) -> Any:
    """``dotted`` looked up on ``container`` or, failing that, on the container's module."""
    module = importlib.import_module(getattr(container, "__module__", None)
                                     or container.__name__)
    for base in (container, module):
        obj = base
        try:
            for name in dotted.split("."):
                obj = getattr(obj, name)
        except AttributeError:
            continue
        return obj
    raise AttributeError(dotted)


def check_cell(cell: str) -> list[str]:
    """Names in ``cell`` that do not exist. A name that does not resolve from the package
    root is looked up beside the previous one (``store.files.valid_file_id``,
    ``FileStore.infos``; ``guard.ContextGuard._compact``, ``_report``)."""
    missing = []
    container: Any = None
    for name in names_in(cell):
        if "/" in name:
            if not (PACKAGE / name).exists():
                missing.append(name)
            continue
        try:
            obj, parent = _resolve(name)
        except (LookupError, AttributeError):
            if container is None:
                missing.append(name)
                continue
            try:
                obj, parent = _relative(container, name), container
            except AttributeError:
                missing.append(name)
                continue
        container = obj if isinstance(obj, ModuleType) else parent
        if "." in name and not isinstance(obj, ModuleType) and isinstance(parent, type):
            container = parent
    return missing


RULES = _rule_rows()


def test_the_rule_table_is_there() -> None:
    assert len(RULES) > 50


@pytest.mark.parametrize(("rule", "where"), RULES, ids=[r for r, _ in RULES])
def test_every_rule_points_at_code_that_exists(rule: str, where: str) -> None:
    assert names_in(where), f"{rule!r} names no code"
    assert check_cell(where) == [], f"{rule!r}: docs/DESIGN.md names code that does not exist"


def test_the_checker_finds_a_missing_name() -> None:
    assert check_cell("`compaction._truncate.smart_truncate`, `no_such_function`") == [
        "no_such_function"
    ]
    assert check_cell("`guard.ContextGuard._compact`, `_staged`") == []
    assert check_cell("`guard.NoSuchGuard` (`remark`)") == ["guard.NoSuchGuard"]
    assert check_cell("`server/static/missing.js`") == ["server/static/missing.js"]


def test_cited_sections_exist() -> None:
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC.read_text(encoding="utf-8"),
                              re.M))
    cited: dict[str, str] = {}
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"), ROOT / "pyproject.toml"]:
        for match in re.finditer(r"docs/DESIGN\.md §(\d+(?:\.\d+)?)", path.read_text("utf-8")):
            cited[match.group(1)] = str(path.relative_to(ROOT))
    assert cited, "no code cites docs/DESIGN.md"
    assert {n: p for n, p in cited.items() if n not in headings} == {}
