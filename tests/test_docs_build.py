"""The documentation site builds, strictly and offline, and its commands are real.

* ``mkdocs build --strict`` (mkdocs.yml) succeeds with no warning: a broken link, a
  cross-reference to an object that does not exist, a docstring whose parameters do not
  match the signature, or a page missing from the navigation fails the build.
* The build never opens a network connection (it runs with sockets refused), and the
  pages it writes load nothing from elsewhere (no web fonts, scripts or styles from a
  CDN), so the site builds in CI and reads on a machine without internet access.
* Every ``ctxstack …`` command in a shell block of the README and of the site's own pages
  names a real sub-command (as ``ctxstack --help`` lists them) and its options and
  arguments parse, so a renamed command or flag fails here before a reader meets it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

import ctxstack
from ctxstack.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Pages whose shell blocks are checked: the README and the site's pages (the per-client
# guides included: their tests run the offline commands, this checks the others too),
# except the design document and the generated configuration reference.
NOT_CHECKED = {"DESIGN.md", "configuration.md"}

# Run mkdocs with every socket connection refused: a plugin or theme that downloads
# something at build time (fonts, icons, a social card) fails the build loudly.
OFFLINE_MKDOCS = """
import socket, sys

def refuse(*args, **kwargs):
    raise OSError(f"the docs build tried to use the network: {args!r}")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse

from mkdocs.__main__ import cli
sys.argv = ["mkdocs", *sys.argv[1:]]
cli()
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, "-c", OFFLINE_MKDOCS, "build", "--strict", "--clean",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    problems = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not problems, "\n".join(problems)
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "deployment/index.html",
                 "proxy/index.html", "http-api/index.html", "configuration/index.html",
                 "troubleshooting/index.html", "benchmarks/index.html",
                 "guides/claude-code/index.html", "guides/codex/index.html",
                 "guides/openai-sdk/index.html", "guides/anthropic-sdk/index.html",
                 "guides/langchain/index.html",
                 "reference/guard/index.html", "DESIGN/index.html"):
        assert (site / page).is_file(), page
    # The API reference is generated from the docstrings, not written by hand.
    guard = (site / "reference" / "guard" / "index.html").read_text(encoding="utf-8")
    assert 'id="ctxstack.guard.ContextGuard"' in guard
    assert 'id="ctxstack.guard.ContextGuard.check_and_compact"' in guard


def test_the_pages_load_nothing_from_elsewhere(site: Path) -> None:
    external = re.compile(
        r"""<(?:link|script|img|iframe|source)\b[^>]*\b(?:href|src)=["']?(?:https?:)?//""",
        re.IGNORECASE)
    css_import = re.compile(r"""@import\s+(?:url\()?["']?(?:https?:)?//""", re.IGNORECASE)
    found = []
    for path in site.rglob("*"):
        if path.suffix in (".html", ".css") and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            for match in (*external.finditer(text), *css_import.finditer(text)):
                found.append(f"{path.relative_to(site)}: {text[match.start():match.end() + 60]}")
    assert not found, "\n".join(found[:20])


def test_the_api_reference_lists_every_top_level_name() -> None:
    page = (DOCS / "reference" / "ctxstack.md").read_text(encoding="utf-8")
    missing = [name for name in ctxstack.__all__ if f"`{name}`" not in page]
    assert not missing, f"docs/reference/ctxstack.md does not list {missing}"


# ------------------------------------------------------------------ commands in the pages


def _help_commands(*group: str) -> set[str]:
    """The sub-commands ``ctxstack [GROUP] --help`` lists, read from its output."""
    proc = subprocess.run(
        [sys.executable, "-c", "from ctxstack.cli import main; main()", *group, "--help"],
        capture_output=True, text=True, timeout=120, check=True)
    section = proc.stdout.split("Commands:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.startswith("  ")}


def shell_blocks(text: str) -> Iterator[str]:
    """The contents of the fenced ``sh`` / ``bash`` / ``console`` / ``shell`` blocks."""
    for match in re.finditer(r"^([ \t]*)```(?:sh|bash|console|shell)[ \t]*\n(.*?)^\1```",
                             text, re.MULTILINE | re.DOTALL):
        yield match.group(2)


def invocations(block: str) -> Iterator[list[str]]:
    """Each ``ctxstack …`` command in a shell block, as its arguments after ``ctxstack``.

    Continuation lines are joined; a command is cut at ``|``, ``&&``, ``;``, ``&`` and
    ``#``; leading ``VAR=value`` assignments and a ``$ `` prompt are skipped; the
    executable may be spelled with a path (``.venv/bin/ctxstack``).
    """
    joined = re.sub(r"\\\n", " ", block)
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        if "ctxstack" not in line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("|&;"):
                words = command
                while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                    words = words[1:]
                if words and (words[0] == "ctxstack" or words[0].endswith("/ctxstack")):
                    yield words[1:]
                command = []
            else:
                command.append(token)


def parse(args: list[str]) -> list[str]:
    """Parse ``ctxstack ARGS`` as the CLI would, without running it; return the command
    path (``["db", "upgrade"]``). Raises click's usage errors."""
    ctx = cli.make_context("ctxstack", list(args))
    command: click.Command = cli
    path: list[str] = []
    while isinstance(command, click.Group):
        with warnings.catch_warnings():  # click 9 keeps them all in ``args``
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*getattr(ctx, "protected_args", ()), *ctx.args]
        if not rest:
            break
        name, sub, remaining = command.resolve_command(ctx, rest)
        assert sub is not None
        assert name is not None
        path.append(name)
        command = sub
        ctx = sub.make_context(name, remaining, parent=ctx)
    return path


def checked_pages() -> list[Path]:
    pages = [README, *sorted(p for p in DOCS.rglob("*.md") if p.name not in NOT_CHECKED)]
    return [p for p in pages if not p.is_relative_to(DOCS / "_mkdocs")]


def test_the_command_parser_finds_commands_in_shell_lines() -> None:
    block = ("LLM_API_KEY=x ctxstack proxy --upstream http://h/v1 &   # comment\n"
             "curl -s http://h | jq .\n"
             ".venv/bin/pip install -e '.[server]' && .venv/bin/ctxstack serve \\\n"
             "  --port 9000\n"
             "$ ctxstack user create alice\n")
    assert list(invocations(block)) == [["proxy", "--upstream", "http://h/v1"],
                                        ["serve", "--port", "9000"],
                                        ["user", "create", "alice"]]
    assert parse(["db", "upgrade", "--revision", "head"]) == ["db", "upgrade"]
    with pytest.raises(click.UsageError):
        parse(["serve", "--no-such-flag"])
    with pytest.raises(click.UsageError):
        parse(["no-such-command"])
    with pytest.raises(click.UsageError):
        parse(["user", "create"])  # NAME is required


def test_every_command_in_the_getting_started_page_is_a_real_subcommand() -> None:
    text = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    found = [args for block in shell_blocks(text) for args in invocations(block)]
    assert len(found) >= 5, "the getting-started page should show the commands it explains"
    real = _help_commands()
    groups = {name: _help_commands(name) for name, command in cli.commands.items()
              if isinstance(command, click.Group)}
    for args in found:
        assert args, "a bare `ctxstack` in a command block"
        assert args[0] in real, f"`ctxstack {shlex.join(args)}`: not in ctxstack --help"
        if args[0] in groups and len(args) > 1 and not args[1].startswith("-"):
            assert args[1] in groups[args[0]], f"`ctxstack {shlex.join(args)}`"


@pytest.mark.parametrize("page", checked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_ctxstack_command_in_a_page_parses(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for block in shell_blocks(text):
        for args in invocations(block):
            try:
                parse(args)
            except click.UsageError as exc:
                pytest.fail(f"{page.relative_to(ROOT)}: `ctxstack {shlex.join(args)}`: "
                            f"{exc.format_message()}")


def test_the_readme_links_to_pages_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)", text)
    assert any(link.startswith("docs/getting-started") for link in links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_the_http_api_page_lists_every_route_the_service_serves() -> None:
    from ctxstack.server.app import create_app
    from ctxstack.server.settings import Settings

    spec = create_app(Settings(auth="none")).openapi()
    page = (DOCS / "http-api.md").read_text(encoding="utf-8")
    # the routes table: | `GET /api/info` | … and | `GET`, `PATCH`, `DELETE /api/…` | …
    documented = set(re.findall(r"^\| `[A-Z][A-Z`, ]* (/api/[^` ]+)` \|", page, re.MULTILINE))
    served = {path.replace("{conversation_id}", "{id}") for path in spec["paths"]}
    missing = sorted(served - documented)
    assert not missing, f"docs/http-api.md does not list {missing}"
    gone = sorted(documented - served)
    assert not gone, f"docs/http-api.md lists routes the service does not serve: {gone}"


def test_the_command_line_page_lists_every_command() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    commands: list[list[str]] = []
    for name, command in cli.commands.items():
        if isinstance(command, click.Group):
            commands += [[name, sub] for sub in command.commands]
        else:
            commands.append([name])
    assert len(commands) > 8
    missing = [" ".join(c) for c in commands if f"`ctxstack {' '.join(c)}" not in page]
    assert not missing, f"docs/cli.md does not list: {missing}"
