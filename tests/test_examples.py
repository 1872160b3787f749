"""Every script in ``examples/`` runs, offline, and prints what it promises.

Scripts are discovered by glob, so an example added later is run too. Each one is run as a
subprocess with this interpreter, a timeout, and a clean environment: no ``LLM_*`` /
``FAST_LLM_*`` variables (the examples must work without an endpoint) and no database or
Redis URL of the caller's.

An example declares, in comment lines at its top (before its docstring):

* ``# expect: <text>`` — a line of its output that shows it did its job (the test fails
  if it is missing from stdout); without one, the test only requires exit 0 and some
  output;
* ``# requires: mod1, mod2`` — importable modules it needs (an extra's packages). The
  test is skipped, naming the missing module, only when one is not importable; CI
  installs every extra, so CI runs them all.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 180
_CLEARED_PREFIXES = ("LLM_", "FAST_LLM_", "CTXSTACK_")


@dataclass(frozen=True)
class Header:
    requires: tuple[str, ...] = ()
    expect: str | None = None


def parse_header(text: str) -> Header:
    """The ``# requires:`` / ``# expect:`` declarations of the leading comment block."""
    requires: list[str] = []
    expect: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            if stripped:
                break  # the comment block ends at the first code or docstring line
            continue
        body = stripped.lstrip("#").strip()
        key, _, value = body.partition(":")
        if key.strip() == "requires":
            requires += [m.strip() for m in value.split(",") if m.strip()]
        elif key.strip() == "expect":
            expect = value.strip()
    return Header(tuple(requires), expect)


def missing_modules(requires: tuple[str, ...]) -> list[str]:
    return [m for m in requires if importlib.util.find_spec(m) is None]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED_PREFIXES)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def test_the_examples_folder_has_the_documented_scripts() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"quickstart.py", "guard_only.py", "dbmemory_sqlite.py", "dag_mode.py",
            "service_api.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs_offline(script: Path, tmp_path: Path) -> None:
    header = parse_header(script.read_text(encoding="utf-8"))
    missing = missing_modules(header.requires)
    if missing:
        pytest.skip(f"{script.name} needs {', '.join(missing)} (not importable here)")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=clean_env(),
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert proc.stdout.strip(), report
    if header.expect is not None:
        assert header.expect in proc.stdout, f"missing {header.expect!r}\n{report}"


def test_header_parsing_reads_only_the_leading_comments() -> None:
    text = (
        "# requires: fastapi, httpx\n"
        "# expect: it worked\n"
        '"""Docstring."""\n'
        "# requires: not_this_one\n"
    )
    assert parse_header(text) == Header(("fastapi", "httpx"), "it worked")
    assert parse_header('"""No header."""\n') == Header()


def test_a_missing_requirement_is_detected() -> None:
    assert missing_modules(("json", "ctxstack_no_such_module")) == ["ctxstack_no_such_module"]


def test_the_environment_is_clean_of_endpoint_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FAST_LLM_MODEL", "x")
    monkeypatch.setenv("CTXSTACK_DATABASE_URL", "sqlite+aiosqlite:////nonexistent/x.db")
    env = clean_env()
    assert not [k for k in env if k.startswith(_CLEARED_PREFIXES)]


def test_the_readme_library_snippet_is_a_valid_script() -> None:
    # It used to `await` at top level, which fails as a script: compile it as one.
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Using the library", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    compile(snippet, "README.md (library snippet)", "exec")
    assert "asyncio.run(main())" in snippet
