"""Text in capital letters for evaluating the token estimator: SQL, licence disclaimers,
prose in capitals, and C macro definitions.

Both vocabularies learnt English words in lower case: ``parameter`` is one token,
``PARAMETER`` three; a capital word that opens a line (``RETURNS``: ``RET``, ``URNS``) costs
more than the same word after a space. The pair model charges a (capital, capital) pair
about a seventh of a token — the rate of the acronyms and constant names of the code it
was fitted on — so text in capitals is counted low: prose in capitals ~19% at the
median, most of it by more than the default margin, the ``.sql`` files ~11%, the licence
disclaimers of this corpus ~8%. But capital words the vocabularies learnt as such are the
counter-example, which no vocabulary-free count tells apart: the package prose that holds
the BSD and MIT disclaimers (``THE SOFTWARE IS PROVIDED "AS IS"``) is counted 2% *over* at
the median already. That is why the estimator has no correction for capitals yet: one was
fitted on this corpus's
fit split (a weight per four capitals in a row and per line opening with four) and
brought SQL to −3% and prose in capitals to −9% at the median, but it also raised the
standard-library and package prose that holds licence text (one text in ten passes a
gate on the share of capitals) from +2% to +9% over, and that kind's p95 |error| from 6.6%
to 10.1%, past its 10% target. The accuracy benchmark reports each group here (median,
share past the margin, a fits run) so that a future correction has its measure. C macro
definitions (``#define MAX_PATH_LEN``) are the group such a correction must not
over-count: their capital runs are short common words joined by underscores.

Every text here is real data of this machine, never written by us, in one of
:data:`GROUPS`, except the third, which is real prose transformed:

* SQL files: every ``.sql`` file under ``/usr/share`` (PostgreSQL's catalog and extension
  scripts, MySQL's system tables…), split by the stable hash of the path
  (:func:`benchmarks.token_corpus._half`); a text is a chunk of one file;
* licence disclaimers: the paragraphs of ``/usr/share/doc/*/copyright`` and
  ``/usr/share/common-licenses`` written mostly in capitals (warranty disclaimers),
  split by the hash of their first 60 letters and digits, so that a disclaimer's copies
  under other packages' names stay in one split (they are few templates — the GPL's and
  LGPL's, BSD's, MIT's — so variants of one template under other section numbers can fall
  in both splits: a real but narrow group);
* prose in capitals: the split's English prose (standard-library docstrings, installed
  distributions' READMEs) upper-cased, chunked as :func:`benchmarks.token_corpus.gather`
  chunks it (a transform of real text: shouted messages, headings and banners have no
  corpus of their own on this machine);
* C macro definitions: the ``#define`` lines of the headers under ``/usr/include``, split
  by path; a text is a run of one header's definitions.

``benchmarks/bench_tokens_accuracy.py`` evaluates on the ``"eval"`` split; the ``"fit"``
split is kept apart for fitting a correction.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

from benchmarks.tabbed_corpus import _chunk
from benchmarks.token_corpus import Split, _half, _sample, chunks, package_texts, stdlib_texts

MIN_CHARS = 500
"""Shorter chunks (a file's end) and shorter joined disclaimers are dropped; chunks are
500–4,000 characters from a line start (:func:`benchmarks.tabbed_corpus._chunk`)."""
_SEEDS = {"fit": 83, "eval": 89}
_SQL_ROOT = Path("/usr/share")
_LICENCES = (Path("/usr/share/doc"), Path("/usr/share/common-licenses"))
_HEADERS = Path("/usr/include")
_MAX_FILES = 4000  # files kept per walk, at most
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_NOT_KEY = re.compile(r"[^A-Z0-9]")
MIN_DEFINES = 30
"""A header contributes its ``#define`` lines when it has at least this many."""

GROUPS = ("SQL files", "licence disclaimers", "prose in capitals", "C macro definitions")


def _walk(root: Path, suffix: str, split: Split) -> list[Path]:
    out: list[Path] = []
    for dirpath, _dirs, names in os.walk(root):
        for name in sorted(names):
            if len(out) >= _MAX_FILES:
                return sorted(out)
            path = Path(dirpath, name)
            if name.endswith(suffix) and _half(str(path)) == split and not path.is_symlink():
                out.append(path)
    return sorted(out)


def _read(path: Path) -> str:
    try:
        return path.read_bytes()[:400_000].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _chunks(sources: list[str], n: int, rng: random.Random) -> list[str]:
    """Up to ``n`` distinct chunks, taking the sources in turn (a big file gives more)."""
    out: dict[str, None] = {}
    sources = [s for s in sources if len(s) >= MIN_CHARS]
    for i in range(4 * n if sources else 0):
        if len(out) >= n:
            break
        out.setdefault(_chunk(sources[i % len(sources)], rng))
    return [t for t in out if len(t) >= MIN_CHARS]


def disclaimers(split: Split) -> list[str]:
    """The distinct paragraphs of at least 200 characters, four fifths of whose letters
    are capitals, in Debian's copyright files and common licences (see the module doc)."""
    found: dict[str, str] = {}
    paths = [p for root in _LICENCES if root.is_dir()
             for p in sorted(root.glob("*/copyright") if root.name == "doc" else root.iterdir())]
    for path in paths:
        for paragraph in _PARAGRAPH.split(_read(path)):
            letters = sum(1 for ch in paragraph if ch.isalpha())
            capitals = sum(1 for ch in paragraph if "A" <= ch <= "Z")
            if len(paragraph) < 200 or letters < 100 or capitals * 5 < letters * 4:
                continue
            key = _NOT_KEY.sub("", paragraph.upper())[:60]
            if _half(key) == split:
                found.setdefault(key, paragraph.strip("\n"))
    return [found[k] for k in sorted(found)]


def _defines(path: Path) -> str:
    lines = [line for line in _read(path).splitlines() if line.startswith("#define")]
    return "\n".join(lines) if len(lines) >= MIN_DEFINES else ""


def capitals_texts(split: Split, n: int) -> dict[str, list[str]]:
    """Up to ``n`` texts per group of :data:`GROUPS` from ``split`` (disclaimers: every
    one, joined in pairs when one is short); an empty list for a group this machine has no
    data for."""
    rng = random.Random(_SEEDS[split])
    sql = [_read(p) for p in _walk(_SQL_ROOT, ".sql", split)]
    texts = {GROUPS[0]: _chunks(sql, n, rng)}
    paragraphs = disclaimers(split)
    joined: list[str] = []
    for paragraph in paragraphs:
        if joined and len(joined[-1]) < MIN_CHARS:
            joined[-1] += "\n\n" + paragraph
        else:
            joined.append(paragraph)
    texts[GROUPS[1]] = [t for t in joined if len(t) >= MIN_CHARS][:n]
    prose = stdlib_texts(split)[0] + package_texts(split)[0]
    texts[GROUPS[2]] = [t.upper() for t in _sample(list(chunks(prose, rng)), rng, n)]
    headers = [d for d in map(_defines, _walk(_HEADERS, ".h", split)) if d]
    texts[GROUPS[3]] = _chunks(headers, n, rng)
    return texts


if __name__ == "__main__":  # a quick look: counts and one sample per group
    import sys

    for group, items in capitals_texts(sys.argv[1] if len(sys.argv) > 1 else "eval",  # type: ignore[arg-type]
                                       100).items():
        print(group, len(items), repr(items[0][:200]) if items else "")
