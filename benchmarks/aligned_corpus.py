"""Command output laid out in space-aligned columns, for fitting and evaluating the token
estimator: what ``ls -l``, ``dpkg -l``, ``pip list``, ``od -c`` and ``column -t`` print.

A run of spaces in the middle of a line is a token of its own in both vocabularies — only
the last space joins the word after it, and none joins a number — where the pair model,
fitted on prose and code (whose runs of spaces are indentation, after a newline), gives a
run next to nothing. So an agent's everyday tool output was counted low past the default
margin: ``ls -la`` 18%, ``ps aux`` 22%, ``pip list`` 13%, ``od -c`` 17% (``o200k_base``).

Every text is the real output of a real command on this machine, never written by us, in
one of :data:`GROUPS`:

* directory listings: ``ls -la`` of directories (eight entries or more) one and two
  levels under ``/usr/share/doc``, ``/usr/lib``, ``/usr/include``,
  ``/usr/share/locale`` and ``/etc``, split by the directory's path;
* package lists: ``dpkg -l`` and this environment's ``pip list``, their lines split by
  the package's name (a text is a run of one split's lines under the header);
* byte dumps: ``od -c`` and ``od -A x -t x1z`` of files under ``/usr/bin``, split by path;
* aligned tables: the ``iso-codes`` tables through ``column -t``-style padding (each
  column as wide as its widest cell), rows split by key.

The split is :func:`benchmarks.token_corpus._half`: ``benchmarks/fit_tokens.py
--listings`` fits on ``"fit"``, ``benchmarks/bench_tokens_accuracy.py`` evaluates on
``"eval"``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.token_corpus import Split, _half

GROUPS = ("directory listings", "package lists", "byte dumps", "aligned tables")
MIN_CHARS = 500
_SEEDS = {"fit": 71, "eval": 73}
_DIRS = (Path("/usr/share/doc"), Path("/usr/lib"), Path("/usr/include"),
         Path("/usr/share/locale"), Path("/etc"))
_ISO = Path("/usr/share/iso-codes/json")


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                          env={**os.environ, "LC_ALL": "C", "COLUMNS": "200"}, check=False)
    return done.stdout


def _chunk(lines: list[str], rng: random.Random, header: str = "") -> str:
    """A run of 500–4,000 characters of ``lines`` under ``header``."""
    size = rng.randint(500, 4000)
    start = rng.randrange(len(lines))
    out, length = [], len(header)
    for line in lines[start:]:
        if length + len(line) > size and out:
            break
        out.append(line)
        length += len(line) + 1
    return header + "\n".join(out)


def _entries(path: Path) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _listings(split: Split, n: int, rng: random.Random) -> list[str]:
    dirs = []
    for root in _DIRS:
        for parent in [root, *(sorted(root.iterdir()) if root.is_dir() else [])]:
            if parent.is_dir() and not parent.is_symlink():
                try:
                    children = sorted(parent.iterdir())
                except OSError:
                    continue
                dirs += [p for p in children if p.is_dir() and not p.is_symlink()
                         and _half(str(p)) == split]
    dirs = [d for d in dict.fromkeys(dirs) if _entries(d) >= 8]
    rng.shuffle(dirs)
    texts = []
    for path in dirs:
        if len(texts) >= n:
            break
        lines = _run(["ls", "-la", "--time-style=+%b %e %H:%M", str(path)]).splitlines()
        if len(lines) > 4:
            texts.append(_chunk(lines[1:], rng, lines[0] + "\n"))
    return texts


def _split_lines(lines: list[str], split: Split) -> list[str]:
    """The lines whose second field (``dpkg -l``: the package's name; else the whole
    line) is in ``split``."""
    def key(line: str) -> str:
        fields = line.split()
        return fields[1] if len(fields) > 1 else line

    return [line for line in lines if _half(key(line)) == split]


def _packages(split: Split, n: int, rng: random.Random) -> list[str]:
    texts = []
    dpkg = _run(["dpkg", "-l"]).splitlines()
    if len(dpkg) > 5:
        body = _split_lines(dpkg[5:], split)
        texts += [_chunk(body, rng, "\n".join(dpkg[:5]) + "\n") for _ in range(n // 2)]
    pip = _run([sys.executable, "-m", "pip", "list", "--disable-pip-version-check"])
    lines = pip.splitlines()
    if len(lines) > 2:
        body = [line for line in lines[2:] if _half(line.split()[0]) == split]
        texts += [_chunk(body, rng, "\n".join(lines[:2]) + "\n") for _ in range(n - len(texts))]
    return texts


def _dumps(split: Split, n: int, rng: random.Random) -> list[str]:
    files = [p for p in sorted(Path("/usr/bin").iterdir())
             if p.is_file() and not p.is_symlink() and _half(str(p)) == split]
    rng.shuffle(files)
    texts = []
    for i, path in enumerate(files[:n]):
        offset = rng.randrange(max(1, min(path.stat().st_size - 1024, 1 << 20)))
        fmt = ["-c"] if i % 2 == 0 else ["-A", "x", "-t", "x1z"]
        lines = _run(["od", *fmt, "-j", str(offset), "-N", "1024", str(path)]).splitlines()
        if lines:
            texts.append(_chunk(lines, rng))
    return texts


def _tables(split: Split, n: int, rng: random.Random) -> list[str]:
    tables = []
    for path in sorted(_ISO.glob("iso_*.json")):
        records = next(iter(json.loads(path.read_text()).values()))
        fields = sorted({k for r in records for k in r})
        rows = [[str(r.get(f, "")) for f in fields] for r in records
                if _half(f"{path.stem}:{r.get(fields[0], '')}") == split]
        if rows:
            widths = [max(len(row[i]) for row in [fields, *rows]) for i in range(len(fields))]
            lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in [fields, *rows]]
            tables.append(lines)
    return [_chunk(t[1:], rng, t[0] + "\n") for t in (tables[i % len(tables)]
                                                     for i in range(n if tables else 0))]


def aligned_texts(split: Split, n: int) -> dict[str, list[str]]:
    """Up to ``n`` texts of at least 500 characters per group of :data:`GROUPS` from
    ``split``; an empty list for a group this machine cannot produce."""
    rng = random.Random(_SEEDS[split])
    made = {GROUPS[0]: _listings(split, n, rng), GROUPS[1]: _packages(split, n, rng),
            GROUPS[2]: _dumps(split, n, rng), GROUPS[3]: _tables(split, n, rng)}
    return {group: [t for t in texts if len(t) >= MIN_CHARS] for group, texts in made.items()}


if __name__ == "__main__":  # a quick look: counts and one sample per group
    for group, items in aligned_texts(sys.argv[1] if len(sys.argv) > 1 else "eval",  # type: ignore[arg-type]
                                      60).items():
        print(group, len(items), repr(items[0][:300]) if items else "")
