"""The package's shape, as promised in docs/DESIGN.md §2 ("Structure").

The import-linter contracts in ``pyproject.toml`` (run by ``scripts/test``) hold the
dependency direction; these tests hold what import-linter does not check: no import
cycles at all (``TYPE_CHECKING`` imports included), a core that imports without the
server extra's packages, one class per name, and that the two contracts agree on what the
core is. (Module size is a review matter, not a test: issue 27 dropped the line caps.)
"""

from __future__ import annotations

import inspect
import pkgutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

import ctxstack

SRC = Path(ctxstack.__file__).resolve().parent


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_including_type_checking_imports() -> None:
    graph = grimp.build_graph("ctxstack", exclude_type_checking_imports=False)
    edges: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        edges[module] |= {m for m in graph.find_modules_directly_imported_by(module)}
    assert _strongly_connected(dict(edges)) == []


def test_cycle_finder_finds_a_cycle() -> None:
    # The check above must be able to fail.
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]


def test_core_imports_without_the_server_extra() -> None:
    code = (
        "import sys\n"
        "import ctxstack\n"
        "from ctxstack import ChatMessage, ContextGuard, CompactUtils\n"
        "import ctxstack.agent, ctxstack.dag, ctxstack.memory\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'fastapi', 'starlette', 'sqlalchemy', 'alembic', 'asyncpg', 'redis', 'uvicorn', "
        "'openai'})\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _modules() -> list[str]:
    return [
        m.name for m in pkgutil.walk_packages([str(SRC)], "ctxstack.")
        if ".migrations" not in m.name and not m.name.startswith("ctxstack.integrations.")
    ]


def test_one_class_per_name() -> None:
    owners: dict[str, set[str]] = defaultdict(set)
    for name in _modules():
        module = __import__(name, fromlist=["_"])
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == name and not attr.startswith("_"):
                owners[attr].add(name)
    assert {n: sorted(m) for n, m in owners.items() if len(m) > 1} == {}


def _contracts() -> list[dict[str, object]]:
    data = tomllib.loads((SRC.parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def test_layers_contract_covers_every_top_level_module_and_the_core_is_named_once() -> None:
    """The layers contract is exhaustive (a new top-level module fails lint-imports until it
    is placed); the third-party contract must cover exactly the layers below the side
    layers, so no core package escapes it."""
    by_id = {c["id"]: c for c in _contracts()}
    layers = by_id["layers"]
    assert layers["exhaustive"] is True
    names = [n.strip() for layer in layers["layers"] for n in str(layer).split("|")]
    top = {m.name for m in pkgutil.iter_modules([str(SRC)])}
    assert top == set(names), "every top-level module is in exactly one layer"
    side = {"cli", "server", "proxy", "_http_guard", "_net", "integrations", "store", "llm"}
    core = {f"ctxstack.{n}" for n in names if n not in side}
    assert set(by_id["core"]["source_modules"]) == core  # type: ignore[arg-type]


@pytest.mark.parametrize("command", [["serve"], ["db", "current"], ["user", "create", "x"],
                                     ["stub-llm"]])
def test_commands_needing_the_server_extra_name_it(command: list[str]) -> None:
    code = (
        "import sys\n"
        "for name in ('fastapi', 'uvicorn', 'sqlalchemy', 'alembic', 'starlette'):\n"
        "    sys.modules[name] = None  # as if the server extra were not installed\n"
        "from ctxstack.cli import main\n"
        f"main({command!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "pip install 'ctxstack[server]'" in done.stderr, done.stderr
