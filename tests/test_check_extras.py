"""scripts/check-extras' tables stay in step with pyproject.toml, src/ and examples/.

The script itself (a fresh venv per extra) runs in CI (.ci/run); these checks are the
cheap part a developer meets first: an extra added to pyproject.toml and not checked, an
example that belongs to no extra, a module whose extra is wrong.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# the benchmark, test and documentation tool sets, not user-facing extras
NOT_CHECKED = {"bench", "dev", "docs"}


def load_script() -> ModuleType:
    path = ROOT / "scripts" / "check-extras"
    loader = importlib.machinery.SourceFileLoader("check_extras", str(path))
    spec = importlib.util.spec_from_loader("check_extras", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


CHECK = load_script()
OPTIONAL = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"]["optional-dependencies"]


def test_every_user_facing_extra_is_checked() -> None:
    assert set(CHECK.EXTRAS) == {"core"} | (set(OPTIONAL) - NOT_CHECKED)


def test_the_extras_an_extra_includes_are_the_ones_pyproject_pulls_in() -> None:
    for name, extra in CHECK.EXTRAS.items():
        if name == "core":
            continue
        pulled = {e for req in OPTIONAL[name]
                  for m in [re.fullmatch(r"ctxstack\[([\w,-]+)\]", req)] if m
                  for e in m.group(1).split(",")}
        assert set(extra.includes) == pulled, name


def test_every_example_belongs_to_exactly_one_extra() -> None:
    report = CHECK.Report()
    CHECK.check_tables(report)
    assert not report.failed


def test_modules_are_found_without_importing_and_mapped_to_their_extra() -> None:
    modules = CHECK.source_modules()
    assert "ctxstack.tokens._exact" in modules
    assert "ctxstack.server.app" in modules
    assert not [m for m in modules if "migrations" in m]  # alembic's scripts, not modules
    assert CHECK.extra_of("ctxstack.integrations.langchain") == "langchain"
    assert CHECK.extra_of("ctxstack.integrations._session_store") == "store"
    assert CHECK.extra_of("ctxstack.proxy.forwarding") == "server"
    assert CHECK.extra_of("ctxstack.llm.stub.app") == "server"
    assert CHECK.extra_of("ctxstack.llm.openai") == "core"
    assert CHECK.extra_of("ctxstack.cli") == "core"
    assert CHECK.promised("server") == {"core", "store", "server"}
    assert CHECK.guarded_adapters(modules) == {
        "ctxstack.integrations.langchain": "langchain",
        "ctxstack.integrations.llamaindex": "llamaindex",
        "ctxstack.integrations.openai_agents": "openai-agents",
        "ctxstack.integrations.pydantic_ai": "pydantic-ai",
    }


def test_the_core_contract_packages_are_core_here_too() -> None:
    # pyproject's import-linter contract "core" forbids web/storage/provider packages in
    # these; the script must then expect them to import with no extra at all.
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["importlinter"]["contracts"]
    core = next(c for c in contracts if c["id"] == "core")
    wrong = {m: CHECK.extra_of(m) for m in CHECK.source_modules()
             if any(m == s or m.startswith(s + ".") for s in core["source_modules"])
             and CHECK.extra_of(m) != "core"}
    assert wrong == {"ctxstack.memory.db": "store"}  # the contract's one allowed edge


def test_the_expect_line_is_read_from_the_leading_comments(tmp_path: Path) -> None:
    script = tmp_path / "x.py"
    script.write_text('# requires: tokenizers\n# expect: it worked\n"""Doc."""\n# expect: no\n')
    assert CHECK.parse_expect(script) == "it worked"
    script.write_text('"""Doc."""\n# expect: no\n')
    assert CHECK.parse_expect(script) is None
