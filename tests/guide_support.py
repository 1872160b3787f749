"""Run a client guide's offline command sequence exactly as its Markdown shows it.

A guide under ``docs/guides/`` has a section (``## Try it offline``) whose ``bash`` and
``python`` blocks a reader runs in order: the shell blocks in one terminal (the stub model
and the proxy started in the background), each run of consecutive ``python`` blocks in one
Python session. :func:`run_section` does the same in one ``bash`` process: the shell
blocks verbatim, each run of Python blocks as one ``python - <<'PY'`` here-document, with
only the ports replaced by free ones (``8001`` the stub's, ``8787`` the proxy's) and the
proxy's database put in the test's directory. The background servers are stopped when the
script ends, whatever happens. The caller asserts on the combined output.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.service_support import clean_env, free_port

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ROOT / "docs" / "guides"
OFFLINE = "Try it offline"
STUB_PORT, PROXY_PORT = "8001", "8787"

_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.MULTILINE)


def guide(name: str) -> Path:
    """``docs/guides/<name>.md``."""
    return GUIDES / f"{name}.md"


def section(path: Path, title: str = OFFLINE) -> str:
    """The text of the section headed ``title`` of the guide ``path`` (see
    :func:`section_in`)."""
    return section_in(path.read_text(encoding="utf-8"), title, path.name)


def section_in(text: str, title: str = OFFLINE, name: str = "the text") -> str:
    """The text of the section headed ``title`` (up to the next heading of its level or
    higher); a guide without it fails the test that asked."""
    for match in _HEADING.finditer(text):
        if match.group(2) == title:
            level = len(match.group(1))
            after = text[match.end():]
            ends = [m.start() for m in _HEADING.finditer(after) if len(m.group(1)) <= level]
            return after[:ends[0]] if ends else after
    raise AssertionError(f"{name} has no section {title!r}")


def blocks(text: str, *kinds: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text`` as ``(language, body)``, in order; only ``kinds``
    when given."""
    return [(lang, body) for lang, body in _FENCE.findall(text) if not kinds or lang in kinds]


def script(runnable: list[tuple[str, str]], ports: dict[str, str]) -> str:
    """One ``bash`` script running ``runnable`` (``bash`` / ``python`` blocks) in order."""

    def ported(text: str) -> str:
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", new, text)
        return text

    lines = ["set -e", "trap 'kill $(jobs -p) 2>/dev/null' EXIT"]
    python: list[str] = []

    def flush() -> None:
        if python:
            lines.extend(["echo", "python - <<'PY'", *python, "PY"])
            python.clear()

    for lang, body in runnable:
        if lang == "python":
            python.append(ported(body).rstrip("\n"))
        elif lang in ("bash", "sh"):
            flush()
            lines.append(ported(body).rstrip("\n"))
        else:
            raise AssertionError(f"a {lang!r} block cannot be run")
    flush()
    return "\n".join(lines) + "\n"


def run_section(path: Path, workdir: Path, title: str = OFFLINE, timeout: float = 240) -> str:
    """Run every ``bash`` / ``python`` block of the section ``title`` of ``path``, in
    order, as described in the module doc; assert the script exits 0; its output."""
    runnable = blocks(section(path, title), "bash", "sh", "python")
    assert runnable, f"{path.name}: no runnable block under {title!r}"
    ports = {STUB_PORT: str(free_port()), PROXY_PORT: str(free_port())}
    bindir = str(Path(sys.executable).parent)
    env = clean_env({"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                     "CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'proxy.db'}"})
    proc = subprocess.Popen(["bash", "-c", script(runnable, ports)], env=env, cwd=workdir,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
    assert proc.returncode == 0, out
    return out


def shown(path: Path, out: str, title: str = OFFLINE) -> None:
    """Assert that every line of the ``text`` blocks of the section ``title`` (the output
    the guide shows) was printed by the run, numbers aside: a count may differ with the
    counter or the fitting's details, the rest of each line may not."""
    printed = out.splitlines()
    for _, body in blocks(section(path, title), "text"):
        for line in filter(None, (raw.strip() for raw in body.splitlines())):
            pattern = re.compile(r"\d+".join(re.escape(p) for p in re.split(r"\d+", line)))
            assert any(pattern.fullmatch(p.strip()) for p in printed), (
                f"{path.name} shows {line!r}, the run printed:\n{out}")
