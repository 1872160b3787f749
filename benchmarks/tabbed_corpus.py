"""Text with tabs for fitting and evaluating the token estimator: tables, configuration,
markup and code as real files and tools lay them out.

The pair model sees a tab as a space. A space merges with the word after it (`` beta`` is
one token), a tab does not, or far less often: ``alpha<TAB>beta`` is ``alpha``, ``\\tb``,
``eta`` in both vocabularies, and a run of tabs before ``<`` or a digit is a token per
tab or two. So tab-separated tables were counted 20–50% low, XML indented with tabs
~24% low — past the default margin: a tool result holding a TSV file could make a
"fitted" context overflow. Code indented with tabs is the exception (``\\tif``,
``\\treturn`` are tokens of their own).

Every text here is real data of this machine, never written by us, in one of
:data:`GROUPS`:

* tables: the ``iso-codes`` package's ISO 639-3, 3166-1/2/3, 4217 and 15924 tables and
  the standard library's Unicode database (code point, character, name, category), written
  as tab-separated values with a header row — as ``sqlite3 -separator``, ``psql -A -F``,
  ``cut`` or a data file read by an agent show them; the rows are in the ``"fit"`` or the
  ``"eval"`` split by the stable hash of their key (:func:`benchmarks.token_corpus._half`);
* files: configuration, documentation, tz tables and C headers with at least
  :data:`MIN_TABS` tabs (``/etc``, ``/usr/share/doc``, ``/usr/share/zoneinfo``,
  ``/usr/include``), split by the hash of the path; a text is a chunk of one file;
* code indented with tabs: the standard library's modules with each four-space indent
  written as a tab (Go, C and Makefiles indent so), split by path — the layout a
  correction must not over-count.

``benchmarks/fit_tokens.py --listings`` fits on the ``"fit"`` split,
``benchmarks/bench_tokens_accuracy.py`` evaluates on the ``"eval"`` split.
"""

from __future__ import annotations

import json
import os
import random
import re
import sysconfig
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from benchmarks.token_corpus import Split, _half

MIN_TABS = 20
MIN_CHARS = 500
"""Shorter chunks (a small table's or file's end) are dropped, and chunks without a tab."""
_SEEDS = {"fit": 61, "eval": 67}
_ISO = Path("/usr/share/iso-codes/json")
_ISO_TABLES = ("639-3", "3166-1", "3166-2", "3166-3", "4217", "15924")
_FILE_ROOTS = (Path("/etc"), Path("/usr/share/doc"), Path("/usr/share/zoneinfo"),
               Path("/usr/include"))
_MAX_FILES = 3000  # per root: a bounded walk
_INDENT = re.compile(r"^(?:    )+", re.MULTILINE)

GROUPS = ("tab-separated tables", "files with tabs", "code indented with tabs")


def _table_rows(split: Split) -> Iterator[list[list[str]]]:
    """Each table as a header row and its rows of ``split``."""
    for name in _ISO_TABLES:
        path = _ISO / f"iso_{name}.json"
        if not path.is_file():
            continue
        records = next(iter(json.loads(path.read_text()).values()))
        fields = sorted({k for r in records for k in r})
        rows = [[str(r.get(f, "")) for f in fields] for r in records
                if _half(f"{name}:{r.get(fields[0], '')}") == split]
        yield [fields, *rows]
    unicode_rows = [["code point", "character", "name", "category"]]
    for cp in range(0x20, 0x30000):
        ch = chr(cp)
        label = unicodedata.name(ch, "")
        if label and _half(f"unicode:{cp}") == split:
            unicode_rows.append([f"U+{cp:04X}", ch, label, unicodedata.category(ch)])
    yield unicode_rows


def _files(split: Split) -> list[Path]:
    out: list[Path] = []
    for root in _FILE_ROOTS:
        seen = 0
        for dirpath, _dirs, names in os.walk(root):
            for name in sorted(names):
                path = Path(dirpath, name)
                if seen >= _MAX_FILES or _half(str(path)) != split or path.is_symlink():
                    continue
                seen += 1
                try:
                    if path.stat().st_size < 500:
                        continue
                    with path.open("rb") as f:
                        head = f.read(200_000)
                    text = head.decode("utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if text.count("\t") >= MIN_TABS and "\x00" not in text:
                    out.append(path)
    return sorted(out)


def _chunk(text: str, rng: random.Random) -> str:
    """500–4,000 characters of ``text`` from a line start."""
    size = rng.randint(500, 4000)
    start = rng.randint(0, max(0, len(text) - size))
    start = text.rfind("\n", 0, start) + 1
    return text[start:start + size]


def tabbed_texts(split: Split, n: int) -> dict[str, list[str]]:
    """Up to ``n`` texts of 500–4,000 characters with tabs per group of :data:`GROUPS`
    from ``split``; an empty list for a group this machine has no data for."""
    rng = random.Random(_SEEDS[split])
    tables = ["\n".join("\t".join(row) for row in table)
              for table in _table_rows(split) if len(table) > 1]
    texts: dict[str, list[str]] = {group: [] for group in GROUPS}
    for i in range(n if tables else 0):
        table = tables[i % len(tables)]
        header = table[:table.index("\n") + 1]
        texts[GROUPS[0]].append(header + _chunk(table[len(header):], rng))
    files = _files(split)
    rng.shuffle(files)
    for path in files[:n]:
        texts[GROUPS[1]].append(_chunk(path.read_text(errors="replace")[:200_000], rng))
    stdlib = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py")
                    if _half(str(p)) == split)
    rng.shuffle(stdlib)
    for path in stdlib[:n]:
        source = _INDENT.sub(lambda m: "\t" * (len(m.group()) // 4), path.read_text())
        texts[GROUPS[2]].append(_chunk(source, rng))
    return {group: [t for t in items if len(t) >= MIN_CHARS and "\t" in t]
            for group, items in texts.items()}


if __name__ == "__main__":  # a quick look: counts and one sample per group
    import sys

    for group, items in tabbed_texts(sys.argv[1] if len(sys.argv) > 1 else "eval",  # type: ignore[arg-type]
                                     100).items():
        print(group, len(items), repr(items[0][:200]) if items else "")
