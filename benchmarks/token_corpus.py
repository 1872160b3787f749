"""Real text for fitting and evaluating the token estimator, gathered from what is installed.

Nothing here is written by us to suit the estimator and nothing is downloaded: every text
comes from the running Python's standard library, the packages installed in this
environment, or Debian's Japanese and Chinese manual pages (``scripts/install-corpus-deps``
installs ``manpages-ja`` and ``manpages-zh``). The corpora themselves are not committed;
they are read at run time, so the figures follow the installed versions.

Two **disjoint** splits:

``"fit"`` — used only by ``benchmarks/fit_tokens.py`` to fit the estimator's constants:

* prose: docstrings (``ast``) of standard-library ``.py`` files whose path hashes even,
  and the README (``METADATA`` body) and licence files of installed distributions whose
  name hashes even (licences differing only in their copyright line count once);
* code: the source of those same even-hashed standard-library files and the top-level
  modules of even-hashed third-party distributions;
* json: ``importlib.metadata`` records of installed distributions whose name hashes even,
  serialised as a package-inspection tool would (indented and compact), and ``os.stat``
  listings of even-hashed standard-library directories;
* zh / ja: Debian manual pages (``/usr/share/man/zh_CN``, ``zh_TW``, ``ja``) whose file
  name hashes even, roff markup stripped.

``"eval"`` — used only by ``benchmarks/bench_tokens_accuracy.py``:

* prose: the odd-hashed halves of the same sources (other files, other distributions);
* code: likewise;
* json: the odd-hashed halves of the records and listings above, plus every ``.json`` file
  shipped inside installed packages (SBOMs, schemas…) and ``sysconfig``'s build variables;
* zh / ja: odd-hashed manual pages plus CPython's ``Lib/test/cjkencodings/*-utf8.txt``;
* mixed chat: role-prefixed turns stitched from the other eval texts (English, Chinese,
  Japanese, code, JSON), as a conversation mixing them would read.

**Code by project** (:func:`project_code`, :func:`project_code_chunks`; the accuracy
benchmark's "code from projects outside the fitting set" row): every ``.py`` file of a
distribution, split by **project**, never by file — ``"fit"``: the venv's distributions
whose name hashes even (the same split as their READMEs and top-level modules above);
``"eval"``: those whose name hashes odd plus the Debian-packaged distributions in
``/usr/lib/python3/dist-packages`` that the venv does not have. The code row of
:func:`gather` splits the standard library per file, so a held-out module's neighbours
in the same package may be fitted on; this one holds out whole projects.

**Other scripts** (:func:`gather_scripts`, per language group of :data:`SCRIPT_GROUPS`; what
``benchmarks/fit_tokens.py --scripts`` fits the per-script corrections of
:mod:`ctxstack.tokens._model` on, and what the accuracy benchmark's per-language rows
evaluate): human translations shipped by Debian packages, read where they are installed —

* gettext catalogs (``/usr/share/locale/<lang>/LC_MESSAGES/<domain>.mo``, read with
  :mod:`gettext`) of the domains in :data:`CATALOG_DOMAINS` (GTK, GLib, GSettings schemas,
  dpkg, APT, coreutils: ``scripts/install-corpus-deps`` installs their packages): every
  translated message whose English ``msgid`` differs from its translation. A message is in
  the ``"fit"`` or the ``"eval"`` split by a stable hash of its **English msgid**, so a
  sentence the fit saw in one language is never evaluated in any language; each catalog's
  messages of a split are joined by newlines (in catalog order) and cut into chunks;
* manual pages of Debian's ``manpages-l10n`` (``manpages-de``, ``-fr``, ``-es``,
  ``-pt-br``, ``-pl``, ``-ru``, ``-uk``, ``-el``, ``-vi``) and the Korean pages that
  ``man-db``, ``login``, ``passwd``, ``psmisc`` and ``xz-utils`` ship, split by a hash of
  the page's file name like the Chinese and Japanese ones.

A split is chosen by a stable hash (``zlib.crc32``) of the file path or distribution
name, so it is the same on every run and machine. Texts are cut into chunks of
``MIN_CHARS``–``MAX_CHARS`` characters at line boundaries with a seeded RNG.
"""

from __future__ import annotations

import ast
import gzip
import importlib.metadata as md
import json
import os
import random
import re
import sys
import sysconfig
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal

Split = Literal["fit", "eval"]
KINDS = ("prose", "code", "json", "zh", "ja", "mixed")
KIND_LABELS = {"prose": "English prose", "code": "code", "json": "JSON tool output",
               "zh": "Chinese", "ja": "Japanese", "mixed": "mixed chat"}
MIN_CHARS = 500
MAX_CHARS = 4000
MAN_DIRS = {"zh": ("/usr/share/man/zh_CN", "/usr/share/man/zh_TW"),
            "ja": ("/usr/share/man/ja",)}
MAN_PACKAGES = {"zh": "manpages-zh", "ja": "manpages-ja"}
LOCALE_ROOT = Path("/usr/share/locale")
MAN_ROOT = Path("/usr/share/man")
CATALOG_DOMAINS = ("gtk20", "gtk20-properties", "glib20", "gsettings-desktop-schemas", "dpkg",
                   "apt", "libapt-pkg6.0", "coreutils", "gdk-pixbuf", "Linux-PAM", "grep", "sed", "shadow")
"""gettext domains read for other scripts (packages: libgtk2.0-common, libglib2.0-data,
gsettings-desktop-schemas, dpkg, apt, coreutils)."""
SCRIPT_GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # group label: (catalog languages, manual-page languages)
    "Latin script (de/fr/es/pt-BR/pl)": ((), ("de", "fr", "es", "pt_BR", "pl")),
    "Vietnamese": (("vi",), ("vi",)),
    "Cyrillic (ru/uk)": (("ru", "uk"), ("ru", "uk")),
    "Greek": (("el",), ("el",)),
    "Korean": (("ko",), ("ko",)),
    "Arabic/Persian": (("ar", "fa"), ()),
    "Hebrew": (("he",), ()),
    "Devanagari (hi/mr/ne)": (("hi", "mr", "ne"), ()),
    "other Indic (bn/pa/gu/ta/te/kn/ml)": (("bn", "pa", "gu", "ta", "te", "kn", "ml"), ()),
    "Thai": (("th",), ()),
    "Georgian/Khmer/Myanmar": (("ka", "km", "my"), ()),
}
"""Language groups of other scripts, as reported by the accuracy benchmark."""
DECOMPOSED = "decomposed (NFD: Latin, Vietnamese, Cyrillic, Greek, Korean)"
"""A group of its own: the texts of :data:`DECOMPOSABLE` in Unicode normal form D — an
accent as a combining mark after its letter, a Hangul syllable as its jamo — where that
differs from the text. macOS file names, some web pages and some tools write text so; the
vocabularies split it into far more tokens (a combining mark costs 1.4–2 ``o200k_base``
tokens, decomposed Korean 7.5× its composed form), and the estimator, fitted on composed
text only, under-counted it by up to 77%."""
DECOMPOSABLE: tuple[str, ...] = ("Latin script (de/fr/es/pt-BR/pl)", "Vietnamese",
                                 "Cyrillic (ru/uk)", "Greek", "Korean")


def _half(key: str) -> Split:
    return "fit" if zlib.crc32(key.encode()) % 2 == 0 else "eval"


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("site-packages", "test", "idlelib", "lib2to3", "turtledemo", "tkinter")
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if rel and rel[0] in skip:
            continue
        out.append(path)
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _docstrings(source: str) -> str:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    docs = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 80:
                docs.append(doc)
    return "\n\n".join(docs)


# ---------------------------------------------------------------------------- sources


def stdlib_texts(split: Split) -> tuple[list[str], list[str]]:
    """(prose, code) from the standard library files of ``split``."""
    prose, code = [], []
    for path in _stdlib_files():
        if _half(path.name + str(path.parent.name)) != split:
            continue
        source = _read(path)
        if source:
            code.append(source)
            prose.append(_docstrings(source))
    return prose, code


def _distributions() -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name not in seen:
            seen[name] = dist
    return [seen[k] for k in sorted(seen)]


def _dist_record(dist: md.Distribution) -> dict[str, object]:
    meta = dist.metadata
    files = []
    for f in (dist.files or [])[:400]:
        files.append({"path": str(f), "size": f.size,
                      "hash": f"{f.hash.mode}={f.hash.value}" if f.hash else None})
    return {"name": meta["Name"], "version": meta["Version"], "summary": meta["Summary"],
            "license": meta["License"], "requires_python": meta["Requires-Python"],
            "requires_dist": dist.requires or [],
            "entry_points": [{"name": e.name, "group": e.group, "value": e.value}
                             for e in dist.entry_points],
            "files": files}


def _stat_listing(directory: Path) -> list[dict[str, object]]:
    rows = []
    for entry in sorted(directory.iterdir())[:300]:
        try:
            st = entry.stat()
        except OSError:
            continue
        rows.append({"name": entry.name, "type": "dir" if entry.is_dir() else "file",
                     "size": st.st_size, "mode": oct(st.st_mode), "mtime": int(st.st_mtime),
                     "inode": st.st_ino})
    return rows


def json_texts(split: Split) -> list[str]:
    """Serialised real data (see the module docstring)."""
    out: list[str] = []
    for dist in _distributions():
        name = dist.metadata["Name"] or ""
        if _half(name.lower()) != split:
            continue
        record = _dist_record(dist)
        out.append(json.dumps(record, indent=2, ensure_ascii=False))
        out.append(json.dumps(record, ensure_ascii=False))
    root = Path(sysconfig.get_paths()["stdlib"])
    for directory in sorted(p for p in root.iterdir() if p.is_dir()):
        if _half("dir:" + directory.name) != split:
            continue
        listing = _stat_listing(directory)
        if listing:
            out.append(json.dumps(listing, indent=1))
    if split == "eval":
        out.extend(_shipped_json())
        config = {k: v for k, v in sorted(sysconfig.get_config_vars().items())
                  if isinstance(v, str | int)}
        out.append(json.dumps(config, indent=2))
    return out


def _site_packages() -> list[Path]:
    return [Path(p) for p in sorted(set(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
            if Path(p).is_dir()]


def _shipped_json() -> list[str]:
    out = []
    for sp in _site_packages():
        for path in sorted(sp.rglob("*.json")):
            text = _read(path)
            if len(text) >= MIN_CHARS:
                out.append(text)
    return out


def package_texts(split: Split) -> tuple[list[str], list[str]]:
    """(prose, code) of the installed distributions whose name falls in ``split``: their
    READMEs/licences and, for third-party packages, their top-level modules' code."""
    prose, code = [], []
    names = set()
    for dist in _distributions():
        name = (dist.metadata["Name"] or "").lower()
        if _half("pkg:" + name) != split:
            continue
        names.update(p.parts[0] for p in dist.files or [] if len(p.parts) > 1)
        body = dist.metadata.get_payload()  # type: ignore[attr-defined]
        if isinstance(body, str) and len(body) >= MIN_CHARS:
            prose.append(body)
        for f in dist.files or []:
            name = f.name.upper()
            if name.startswith(("LICENSE", "LICENCE", "COPYING")) and not name.endswith(".PY"):
                prose.append(_read(Path(str(f.locate()))))
    prose = _dedupe_licences(p for p in prose if p)
    skip = {"ctxstack", "pip", "setuptools"}
    for sp in _site_packages():
        for path in sorted(sp.glob("*/*.py")):
            if path.parts[-2] in names and path.parts[-2] not in skip:
                code.append(_read(path))
    return prose, [c for c in code if c]


VENDORED = frozenset({"_vendor", "vendor", "_vendored", "vendored", "extern", "_extern"})
"""Directories that hold a copy of another project's code (pip's and setuptools' vendored
packages): never read as the project's own code."""
DEBIAN_SITE = Path("/usr/lib/python3/dist-packages")
"""Debian-packaged Python (``python3-apt``, ``python3-gi``, ``python3-dbus``, ``python3-six``,
``python3-oauthlib``…): real code from projects that are not installed in the venv."""
OWN = frozenset({"ctxstack"})
"""This project itself: never a sample of "other projects' code"."""


def _python_files(dist: md.Distribution) -> dict[Path, str]:
    """A distribution's installed ``.py`` files at any depth (tests included: they are its
    code too), each with its top-level package name; vendored copies of other projects
    left out. From its ``RECORD`` (or ``installed-files.txt``) when it has one, else from
    its ``top_level.txt`` names (Debian's egg-info directories list no files)."""
    root = Path(str(dist.locate_file("")))
    found = {Path(str(f.locate())): f.parts[0] for f in dist.files or [] if f.suffix == ".py"}
    if not found:
        for top in (dist.read_text("top_level.txt") or "").split():
            if (root / top).is_dir():
                found.update((f, top) for f in sorted((root / top).rglob("*.py")))
            elif (root / f"{top}.py").is_file():
                found[root / f"{top}.py"] = top
    return {f: top for f, top in found.items()
            if VENDORED.isdisjoint(f.parts) and "__pycache__" not in f.parts}


def project_code(split: Split) -> dict[str, list[str]]:
    """Python source per **project** (installed distribution) of ``split``, split by
    project, never by file, so that no file of an ``"eval"`` project is fitted on.

    ``"fit"``: the venv's distributions whose name hashes even (``"pkg:" + name``, the
    same split as :func:`package_texts`), all their ``.py`` files. ``"eval"``: the venv's
    distributions whose name hashes odd, plus every distribution of Debian's
    ``/usr/lib/python3/dist-packages`` that the venv does not have (never fitted on); a
    file under a top-level package that some fit distribution also installs (a namespace
    package, a re-packaged copy), or whose text is that of a fit project's file, is left
    out. The standard library, split per file for
    the other corpora, is in neither; nor is ctxstack. Files of fewer than ``MIN_CHARS``
    characters are skipped."""
    venv = {(d.metadata["Name"] or "").lower(): d for d in _distributions()}
    fitted = {n for n in venv if _half("pkg:" + n) == "fit" and n not in OWN}
    fit_tops = {f.parts[0] for n in fitted for f in venv[n].files or [] if len(f.parts) > 1}
    fit_code = _code_of({n: venv[n] for n in fitted}, set())
    if split == "fit":
        return fit_code
    chosen = {n: d for n, d in venv.items() if n not in OWN and n not in fitted}
    if DEBIAN_SITE.is_dir():
        for dist in md.distributions(path=[str(DEBIAN_SITE)]):
            name = (dist.metadata["Name"] or "").lower()
            if name and name not in venv and name not in chosen:
                chosen[name] = dist
    seen = {t for texts in fit_code.values() for t in texts}  # a file copied between
    # projects (a generated helper) is the fit project's
    return {n: [t for t in texts if t not in seen]
            for n, texts in _code_of(chosen, fit_tops).items() if set(texts) - seen}


def _code_of(dists: dict[str, md.Distribution], skip_tops: set[str]) -> dict[str, list[str]]:
    """Project → the texts of its :func:`_python_files` of at least ``MIN_CHARS``
    characters, except those under a top-level package in ``skip_tops``."""
    out: dict[str, list[str]] = {}
    for name in sorted(dists):
        files = _python_files(dists[name])
        keep = sorted(f for f, top in files.items() if top not in skip_tops)
        texts = [t for f in keep if len(t := _read(f)) >= MIN_CHARS]
        if texts:
            out[name] = texts
    return out


def project_code_chunks(split: Split, per_project: int, seed: int = 29) -> dict[str, list[str]]:
    """Up to ``per_project`` consecutive, non-overlapping line-aligned chunks of
    MIN_CHARS–MAX_CHARS characters of each project of :func:`project_code` (a few hundred
    to ~1,200 tokens, like a tool's read of part of a file), drawn from its files in a
    seeded order: each project weighs alike, whatever its size, and a small project gives
    fewer chunks rather than repeated ones."""
    out: dict[str, list[str]] = {}
    for name, texts in project_code(split).items():
        rng = random.Random(f"{seed}:{name}")
        pieces = list(consecutive_chunks(texts, rng))
        out[name] = _sample(pieces, rng, per_project)
    return out


def _dedupe_licences(texts: Iterable[str]) -> list[str]:
    """Each text once, where licences differing only in their copyright lines count as one
    (dozens of packages ship the same BSD/MIT text; it is one sample, not dozens)."""
    seen: dict[str, str] = {}
    for text in texts:
        key = re.sub(r"\s+", " ", re.sub(r"(?i)copyright[^\n]*", "", text))[:2000]
        seen.setdefault(key, text)
    return list(seen.values())


_ROFF_ESCAPES = re.compile(r"\\f[BIRPC]|\\f\(..|\\s[+-]?\d|\\\*.|\\[&|^%ce]")
_ROFF_GLYPH = re.compile(r"\\\((..)|\\\[([^\]\s]{1,12})\]|\\\*\((..)|\\\*\[([^\]\s]{1,12})\]")
_ROFF_ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303",
                 ",": "\u0327", "o": "\u030a", "v": "\u030c"}
_ROFF_NAMED = {
    "ss": "ß", "ae": "æ", "AE": "Æ", "oe": "œ", "OE": "Œ", "/o": "ø", "/O": "Ø", "/l": "ł",
    "/L": "Ł", "-D": "Đ", "Sd": "ð", "TP": "Þ", "Tp": "þ", "aq": "'", "dq": '"', "Aq": "'",
    "bu": "•", "en": "–", "em": "—", "hy": "-", "lq": "“", "rq": "”", "oq": "‘", "cq": "’",
    "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›", "co": "©", "rg": "®", "tm": "™", "de": "°",
    "at": "@", "rs": "\\", "ha": "^", "ti": "~", "sh": "#", "Do": "$", "ba": "|", "or": "|",
    "mu": "×", "di": "÷", "+-": "±", "<=": "≤", ">=": "≥", "->": "→", "<-": "←", "==": "≡",
    "!=": "≠", "is": "∫", "sc": "§", "ps": "¶", "dg": "†", "Eu": "€", "eu": "€", "Po": "£",
    "Ye": "¥", "ct": "¢", "r!": "¡", "r?": "¿", "12": "½", "14": "¼", "34": "¾",
}


def _roff_glyph(match: re.Match[str]) -> str:
    """The character a roff glyph escape names (``\\(:u`` ü, ``\\('e`` é, ``\\[u00E9]``,
    ``\\(ss`` ß, ``\\(aq`` '…), or "" for one this table does not know."""
    name = next(g for g in match.groups() if g is not None)
    if name in _ROFF_NAMED:
        return _ROFF_NAMED[name]
    if len(name) == 2 and name[0] in _ROFF_ACCENTS and name[1].isalpha():
        return unicodedata.normalize("NFC", name[1] + _ROFF_ACCENTS[name[0]])
    if name[0] == "u" and len(name) >= 5:
        try:
            return "".join(chr(int(part, 16)) for part in name[1:].split("_"))
        except ValueError:
            return ""
    return ""


def strip_roff(source: str) -> str:
    """Plain text of a roff manual page: comments and macro names gone, font and size
    escapes removed, glyph escapes turned into their characters — German and French pages
    write most of their accented letters as escapes (``gepr\\(:uft``, ``\\('etat``), and
    deleting those left text no one writes ("geprft", "tat")."""
    lines = []
    for line in source.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.de', '..')):
            continue
        if line.startswith((".", "'")):
            parts = line.split(None, 1)
            if len(parts) < 2 or parts[0] in (".if", ".ie", ".el", ".nr", ".ds", ".so"):
                continue
            line = parts[1].replace('"', "")
        line = _ROFF_GLYPH.sub(_roff_glyph, line)
        line = _ROFF_ESCAPES.sub("", line).replace("\\-", "-").replace("\\e", "\\")
        lines.append(line.replace("\\ ", " ").strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def man_texts(lang: Literal["zh", "ja"], split: Split) -> list[str]:
    """Stripped manual pages in ``lang`` for ``split`` ([] when the package is missing)."""
    out = []
    for directory in MAN_DIRS[lang]:
        for path in sorted(Path(directory).glob("man*/*.gz")):
            if _half(path.name) != split:
                continue
            try:
                raw = gzip.decompress(path.read_bytes()).decode("utf-8")
            except (OSError, UnicodeDecodeError, EOFError):
                continue
            out.append(strip_roff(raw))
    return out


def catalog_texts(lang: str, split: Split) -> list[str]:
    """Per gettext catalog of ``lang`` (see :data:`CATALOG_DOMAINS`): its translated
    messages whose English msgid hashes into ``split``, joined by newlines ([] when none is
    installed). Plural forms count as messages of their msgid."""
    import gettext

    out = []
    for domain in CATALOG_DOMAINS:
        path = LOCALE_ROOT / lang / "LC_MESSAGES" / f"{domain}.mo"
        try:
            with path.open("rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, ValueError, KeyError):
            continue
        lines = []
        for key, value in catalog.items():
            msgid = key[0] if isinstance(key, tuple) else key
            if not msgid or not value or value == msgid or _half("msg:" + msgid) != split:
                continue
            lines.append(value.strip())
        if lines:
            out.append("\n".join(lines))
    return out


def localized_man_texts(lang: str, split: Split) -> list[str]:
    """Stripped ``manpages-l10n`` pages of ``lang`` whose file name hashes into ``split``."""
    out = []
    for path in sorted((MAN_ROOT / lang).glob("man*/*.gz")):
        if _half(path.name) != split:
            continue
        try:
            out.append(strip_roff(gzip.decompress(path.read_bytes()).decode("utf-8")))
        except (OSError, UnicodeDecodeError, EOFError):
            continue
    return out


def _language_sources(lang: str, catalog_langs: tuple[str, ...],
                      man_langs: tuple[str, ...], split: Split) -> list[str]:
    """``lang``'s catalogs and manual pages for ``split``, as its group lists them."""
    return ((catalog_texts(lang, split) if lang in catalog_langs else [])
            + (localized_man_texts(lang, split) if lang in man_langs else []))


def gather_scripts(split: Split, n: int, seed: int = 17) -> dict[str, list[str]]:
    """Up to ``n`` texts of 500–4,000 characters per language group of
    :data:`SCRIPT_GROUPS` for ``split`` ([] for a group whose sources are not installed).
    Each language of a group contributes about equally. Plus :data:`DECOMPOSED`: the
    decomposed forms of those groups' texts of the same split (so fitting and evaluation
    stay apart)."""
    out: dict[str, list[str]] = {}
    for group, (catalog_langs, man_langs) in SCRIPT_GROUPS.items():
        rng = random.Random(f"{seed}:{group}")  # per group: one group's sources never
        # shift another's chunks
        per_lang: list[list[str]] = []
        for lang in dict.fromkeys(catalog_langs + man_langs):
            pieces = list(consecutive_chunks(_language_sources(lang, catalog_langs,
                                                               man_langs, split), rng))
            if pieces:
                per_lang.append(_sample(pieces, rng, n))
        share = (n + len(per_lang) - 1) // max(1, len(per_lang))
        picked = [t for texts in per_lang for t in texts[:share]]
        out[group] = _sample(picked, rng, n)
    rng = random.Random(f"{seed}:{DECOMPOSED}")
    decomposed = (unicodedata.normalize("NFD", t) for g in DECOMPOSABLE for t in out[g])
    out[DECOMPOSED] = _sample([t for t in decomposed if not unicodedata.is_normalized("NFC", t)],
                              rng, n)
    return out


def gather_languages(split: Split, n: int, seed: int = 19) -> dict[str, list[str]]:
    """Up to ``n`` texts of 500–4,000 characters per language of :data:`SCRIPT_GROUPS`
    (the same sources as :func:`gather_scripts`, one language per list; ``{}`` entries
    left out): for measures that must not average one language's bias with another's."""
    out: dict[str, list[str]] = {}
    for catalog_langs, man_langs in SCRIPT_GROUPS.values():
        for lang in dict.fromkeys(catalog_langs + man_langs):
            rng = random.Random(f"{seed}:{lang}")
            pieces = list(consecutive_chunks(_language_sources(lang, catalog_langs,
                                                               man_langs, split), rng))
            if pieces:
                out[lang] = _sample(pieces, rng, n)
    return out


def cjkencodings(lang: Literal["zh", "ja"]) -> list[str]:
    """CPython's CJK codec test texts (UTF-8 versions), eval split only."""
    names = {"zh": ("gb2312", "gbk", "gb18030", "big5", "big5hkscs", "hz"),
             "ja": ("euc_jp", "shift_jis", "euc_jisx0213", "shift_jisx0213", "iso2022_jp")}
    root = Path(sysconfig.get_paths()["stdlib"]) / "test" / "cjkencodings"
    return [t for n in names[lang] if (t := _read(root / f"{n}-utf8.txt"))]


def cjk_share(text: str) -> float:
    """Share of the text's characters that are CJK ideographs or kana."""
    if not text:
        return 0.0
    return len(_CJK.findall(text)) / len(text)


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")


# ---------------------------------------------------------------------------- chunks


def chunks(texts: Iterable[str], rng: random.Random, per_text: int = 3) -> Iterator[str]:
    """Up to ``per_text`` line-aligned slices of MIN_CHARS–MAX_CHARS characters per text."""
    for text in texts:
        if len(text) < MIN_CHARS:
            continue
        for _ in range(per_text):
            size = rng.randint(MIN_CHARS, MAX_CHARS)
            start = rng.randrange(0, max(1, len(text) - size))
            start = text.rfind("\n", 0, start) + 1
            piece = text[start:start + size].strip()
            if len(piece) >= MIN_CHARS:
                yield piece


def consecutive_chunks(texts: Iterable[str], rng: random.Random) -> Iterator[str]:
    """Each text cut into consecutive, non-overlapping line-aligned pieces of
    MIN_CHARS–MAX_CHARS characters (a catalog is one long text: random windows would
    repeat it)."""
    for text in texts:
        start = 0
        while len(text) - start >= MIN_CHARS:
            end = start + rng.randint(MIN_CHARS, MAX_CHARS)
            cut = text.rfind("\n", start + MIN_CHARS, end) if end < len(text) else len(text)
            end = cut if cut > 0 else min(end, len(text))
            piece = text[start:end].strip()
            if len(piece) >= MIN_CHARS:
                yield piece
            start = end + 1


def _sample(pool: list[str], rng: random.Random, n: int) -> list[str]:
    pool = list(dict.fromkeys(pool))
    rng.shuffle(pool)
    return pool[:n]


def gather(split: Split, n: int, seed: int = 13) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Up to ``n`` texts per kind for ``split``, and why a kind is missing (kind → reason)."""
    rng = random.Random(seed)
    prose_src, code_src = stdlib_texts(split)
    pkg_prose, pkg_code = package_texts(split)
    prose_src += pkg_prose
    code_src += pkg_code
    out: dict[str, list[str]] = {
        "prose": _sample(list(chunks(prose_src, rng)), rng, n),
        "code": _sample(list(chunks(code_src, rng)), rng, n),
        "json": _sample(list(chunks(json_texts(split), rng)), rng, n),
    }
    missing: dict[str, str] = {}
    for lang in ("zh", "ja"):
        pages = man_texts(lang, split)  # type: ignore[arg-type]
        if not pages:
            missing[lang] = (f"not measured: {MAN_PACKAGES[lang]} not installed "
                             "(scripts/install-corpus-deps)")
            out[lang] = []
            continue
        extra = cjkencodings(lang) if split == "eval" else []  # type: ignore[arg-type]
        pieces = [c for c in chunks(pages + extra, rng, per_text=2) if cjk_share(c) >= 0.3]
        out[lang] = _sample(pieces, rng, n)
    if split == "eval":
        out["mixed"] = mixed_chats(out, rng, n)
    return out, missing


def _numbered(text: str, first: int, number: Callable[[int], str]) -> str:
    return "\n".join(number(first + i) + line for i, line in enumerate(text.split("\n")))


VIEW_FORMATS: dict[str, Callable[[str, int], str]] = {
    "cat -n / nl listing (number right-aligned, tab)":
        lambda text, first: _numbered(text, first, lambda n: f"{n:6d}\t"),
    "Claude Code Read listing (number, tab)":
        lambda text, first: _numbered(text, first, lambda n: f"{n}\t"),
    "arrow listing (number right-aligned, →)":
        lambda text, first: _numbered(text, first, lambda n: f"{n:6d}\u2192"),
    "grep -n listing (number, colon)":
        lambda text, first: _numbered(text, first, lambda n: f"{n}:"),
    "JSON string (a tool result's or a Write call's content)":
        lambda text, first: json.dumps({"file_path": f"src/module_{first}.py", "content": text},
                                       ensure_ascii=False),
}
"""How coding agents' tools show a file (``ctxstack.tokens._listings``): ``cat -n`` and
``nl`` right-align the line number and follow it with a tab, Claude Code's Read tool writes
the number and a tab, other agents right-align it before an arrow, ``grep -n`` and
SWE-agent's viewer write ``12:line``, and a tool result or a Write/Edit call carries the
file inside a JSON string. Each takes a text and the number of its first line."""


def tool_views(texts: dict[str, list[str]], n: int, seed: int = 23) -> dict[str, list[str]]:
    """Up to ``n`` texts per :data:`VIEW_FORMATS` entry: the code (two thirds), prose and
    JSON texts of one split (``texts``: what :func:`gather` returned for it, gathered once
    by the caller) laid out as that tool shows them, the first line numbered at random
    from 1 to 2,000. Derived from that split's texts only, so the fit split's views fit
    the estimator and the eval split's evaluate it, apart."""
    pool = texts["code"] * 2 + texts["prose"] + texts["json"]
    out: dict[str, list[str]] = {}
    for label, layout in VIEW_FORMATS.items():
        rng = random.Random(f"{seed}:{label}")
        out[label] = [layout(text, rng.randint(1, 2000)) for text in _sample(pool, rng, n)]
    return out


def mixed_chats(pools: dict[str, list[str]], rng: random.Random, n: int) -> list[str]:
    """Conversations stitched from real eval texts of several kinds (≥ 3 turns each)."""
    kinds = [k for k in ("prose", "zh", "ja", "code", "json") if pools.get(k)]
    if len(kinds) < 2:
        return []
    out = []
    for _ in range(n):
        turns = []
        for i in range(rng.randint(3, 6)):
            kind = rng.choice(kinds)
            text = rng.choice(pools[kind])
            cut = rng.randint(120, 900)
            role = ("user", "assistant", "tool")[i % 3] if kind == "json" else \
                ("user", "assistant")[i % 2]
            turns.append(f"{role}: {text[:cut]}")
        out.append("\n\n".join(turns))
    return out


if __name__ == "__main__":  # a quick look: counts and one sample per kind
    data, why = gather(sys.argv[1] if len(sys.argv) > 1 else "eval", 50)  # type: ignore[arg-type]
    for kind, texts in data.items():
        print(kind, len(texts), why.get(kind, ""), repr(texts[0][:160]) if texts else "")
    print(os.linesep.join(f"{k}: {v}" for k, v in why.items()))
