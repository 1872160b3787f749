"""Binary data written as text (base64) for fitting and evaluating the token estimator.

Agents meet binary as base64 more often than it seems: a notebook's plotted PNG, a data
URI in an HTML or CSS file, a lockfile's ``integrity`` hashes, a certificate, a JWT in a
log, a tool that returns a file's bytes in a JSON field. Both vocabularies split base64
into pieces of one to three characters, where the estimator's pair model — fitted on
words and identifiers, in which a case change opens a token of several letters — counted
it 9–14% low, and 40% low where the bytes hold runs of zeros (``AAAA…``).

The payloads are real files of this machine, never written by us: gzipped manual pages
(``/usr/share/man/man1/*.gz``: compressed, random-looking bytes), gettext catalogs
(``/usr/share/locale/*/LC_MESSAGES/*.mo``: binary tables full of zero bytes around
translated strings) and the standard library's sources (text). A file is in the
``"fit"`` or the ``"eval"`` split by the stable hash of its path (the split of
``benchmarks.token_corpus``); ``benchmarks/fit_tokens.py --encoded`` fits on the first,
``benchmarks/bench_tokens_accuracy.py`` evaluates on the second. Each text wraps a chunk of
one payload (200–2,400 bytes) in one of :data:`LAYOUTS`.
"""

from __future__ import annotations

import base64
import json
import random
import sysconfig
from collections.abc import Callable
from pathlib import Path

from benchmarks.token_corpus import Split, _half

_SEEDS = {"fit": 47, "eval": 53}
_MAX_FILES = 400  # per payload kind and split: enough variety, a bounded read


def _files(split: Split) -> dict[str, list[Path]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = {
        "compressed": sorted(Path("/usr/share/man/man1").glob("*.gz")),
        "binary": sorted(Path("/usr/share/locale").glob("*/LC_MESSAGES/*.mo")),
        "text": sorted(p for p in stdlib.glob("*.py")),
    }
    out: dict[str, list[Path]] = {}
    for kind, paths in sources.items():
        mine = [p for p in paths if _half(str(p)) == split and p.stat().st_size >= 400]
        random.Random(f"{split}:{kind}").shuffle(mine)
        out[kind] = mine[:_MAX_FILES]
    return out


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _lines(text: str, width: int) -> str:
    return "\n".join(text[i:i + width] for i in range(0, len(text), width))


LAYOUTS: dict[str, Callable[[bytes, str], str]] = {
    "base64, one line": lambda data, name: base64.b64encode(data).decode(),
    "base64, MIME lines (76 columns)": lambda data, name: base64.encodebytes(data).decode(),
    "base64 in a JSON field": lambda data, name: json.dumps(
        {"name": name, "encoding": "base64", "size": len(data),
         "content": base64.b64encode(data).decode()}, indent=2),
    "data URI in HTML": lambda data, name: (
        f'<figure class="plot">\n  <img alt="{name}" width="640" height="480"\n'
        f'       src="data:image/png;base64,{base64.b64encode(data).decode()}">\n'
        f"  <figcaption>{name}</figcaption>\n</figure>"),
    "PEM block (64 columns)": lambda data, name: (
        "-----BEGIN CERTIFICATE-----\n" + _lines(base64.b64encode(data).decode(), 64)
        + "\n-----END CERTIFICATE-----\n"),
    "JWT (base64url, three parts)": lambda data, name: ".".join((
        _b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": name[:16]}).encode()),
        _b64url(json.dumps({"sub": name, "iat": 1_700_000_000 + len(data),
                            "scope": "read write"}).encode()),
        _b64url(data))),
}
"""How base64 appears in what agents read; each takes the bytes and the file's name."""


CERTIFICATES = "CA certificates (PEM files of the ca-certificates package)"
_CERT_DIR = Path("/usr/share/ca-certificates/mozilla")


def certificate_texts() -> list[str]:
    """The certificate authorities' PEM files Debian's ``ca-certificates`` ships (real
    DER certificates as base64, 64 columns, between BEGIN/END lines): evaluation only —
    no split of this module reads them, so the fit never saw one."""
    return [p.read_text(errors="replace") for p in sorted(_CERT_DIR.glob("*.crt"))]


def encoded_texts(split: Split, n: int) -> dict[str, list[str]]:
    """Up to ``n`` texts per layout of :data:`LAYOUTS`, from ``split``'s payload files
    (each text a chunk of one file, the payload kinds in turn); empty lists when this
    machine has none of the files."""
    files = _files(split)
    kinds = [k for k, paths in files.items() if paths]
    out: dict[str, list[str]] = {}
    for label, layout in LAYOUTS.items():
        rng = random.Random(f"{_SEEDS[split]}:{label}")
        texts: list[str] = []
        for i in range(n if kinds else 0):
            path = rng.choice(files[kinds[i % len(kinds)]])
            data = path.read_bytes()
            size = rng.randint(200, 2400)
            start = rng.randint(0, max(0, len(data) - size))
            texts.append(layout(data[start:start + size], path.name))
        out[label] = texts
    return out
