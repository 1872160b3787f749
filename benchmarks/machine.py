"""The machine a report was measured on: numbers mean little without it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class MachineInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    cpu: str
    cores: str
    ram: str
    python: str
    os: str
    git_commit: str
    date: str
    ctxstack: str
    tiktoken: str

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("CPU", self.cpu),
            ("cores", self.cores),
            ("RAM", self.ram),
            ("Python", self.python),
            ("OS", self.os),
            ("git commit", self.git_commit),
            ("date (UTC)", self.date),
            ("ctxstack", self.ctxstack),
            ("tiktoken", self.tiktoken),
        ]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def usable_cores() -> str:
    logical = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = logical
    return f"{logical} logical" + (f" ({usable} usable)" if usable != logical else "")


def git_commit(repo: Path) -> str:
    """Short commit id, ``+dirty`` when the work tree has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return head + (" +dirty" if dirty else "")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _where(file: str, repo: Path) -> str:
    """Where ctxstack was imported from: this checkout's ``src/`` or an installed copy."""
    here = Path(file).resolve().parent
    try:
        return str(here.relative_to(repo.resolve()))
    except ValueError:
        return str(here)


def collect(repo: Path) -> MachineInfo:
    ram = ram_bytes()
    import ctxstack

    return MachineInfo(
        cpu=cpu_model(),
        cores=usable_cores(),
        ram=f"{ram / 2**30:.1f} GiB" if ram else "unknown",
        python=f"{platform.python_implementation()} {sys.version.split()[0]}",
        os=platform.platform(),
        git_commit=git_commit(repo),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        ctxstack=f"{getattr(ctxstack, '__version__', '?')} (from {_where(ctxstack.__file__, repo)})",
        tiktoken=_version("tiktoken"),
    )
