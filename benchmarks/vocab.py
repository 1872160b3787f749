"""Make tiktoken's ``cl100k_base`` and ``o200k_base`` available offline, from a PyPI package.

tiktoken downloads its vocabularies on first use; ctxstack never downloads at run time.
The ``bpe-openai`` wheel (in the ``bench`` and ``dev`` extras) ships the two official
vocabulary files, gzipped, as package data (``bpe_openai/data/<name>.tiktoken.gz``). We
do not use its tokenizer: we copy those files into tiktoken's own cache, under the name
tiktoken looks for, after checking each against the SHA-256 that tiktoken itself expects.
From then on ``tiktoken.get_encoding(name)`` — and so
``ctxstack.tokens._counter.TiktokenCounter(name)`` — loads from the cache with no network.

How tiktoken's cache works (tiktoken 0.7 – 0.14): ``read_file_cached(url, expected_hash)``
looks in ``$TIKTOKEN_CACHE_DIR`` (else ``$DATA_GYM_CACHE_DIR``, else
``<tmp>/data-gym-cache``) for a file named ``sha1(url)``, and uses it when its SHA-256
matches. The URL and hash are read from tiktoken's own encoding constructor (it is called
with the loader intercepted, so nothing is fetched), not hard-coded here.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

ENCODINGS = ("cl100k_base", "o200k_base")
PACKAGE = "bpe_openai"


class _Captured(Exception):
    def __init__(self, blobpath: str, expected_hash: str | None) -> None:
        super().__init__(blobpath)
        self.blobpath = blobpath
        self.expected_hash = expected_hash


def tiktoken_source(encoding: str) -> tuple[str, str | None]:
    """(URL, expected SHA-256) tiktoken would download ``encoding`` from. Fetches nothing."""
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    constructor = getattr(public, encoding)
    original = public.load_tiktoken_bpe

    def capture(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
        raise _Captured(blobpath, expected_hash)

    public.load_tiktoken_bpe = capture
    try:
        constructor()
    except _Captured as got:
        return got.blobpath, got.expected_hash
    finally:
        public.load_tiktoken_bpe = original
    raise RuntimeError(f"tiktoken's {encoding} constructor loaded no vocabulary file")


def cache_dir() -> Path | None:
    """tiktoken's cache directory (None when caching is disabled by an empty setting)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var]) if os.environ[var] else None
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def bundled_file(encoding: str) -> Path | None:
    """The gzipped vocabulary shipped by ``bpe-openai``, without importing that package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / f"{encoding}.tiktoken.gz"
        if path.is_file():
            return path
    return None


def ensure_offline(encoding: str) -> str | None:
    """Put ``encoding`` into tiktoken's cache if a shipped copy exists.

    Returns ``None`` when tiktoken can now load it offline, else the reason it cannot.
    Never touches the network; a copy whose hash does not match is refused.
    """
    try:
        url, expected = tiktoken_source(encoding)
    except ImportError:
        return "tiktoken is not installed (pip install 'ctxstack[bench]')"
    except (AttributeError, RuntimeError) as exc:
        return f"tiktoken does not define {encoding}: {exc}"
    directory = cache_dir()
    if directory is None:
        return "tiktoken's cache is disabled (TIKTOKEN_CACHE_DIR is empty)"
    target = directory / hashlib.sha1(url.encode()).hexdigest()
    if target.is_file() and (expected is None or _sha256(target.read_bytes()) == expected):
        return None
    source = bundled_file(encoding)
    if source is None:
        return (f"no offline copy of {encoding}: install the '{PACKAGE.replace('_', '-')}' "
                "package (pip install 'ctxstack[bench]')")
    data = gzip.decompress(source.read_bytes())
    if expected is not None and _sha256(data) != expected:
        return f"the copy of {encoding} in {source} does not match tiktoken's expected hash"
    directory.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
