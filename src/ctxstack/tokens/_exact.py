"""The right token counter for a model: exact when its tokenizer is available offline.

:func:`counter_for_model` is what the service, the CLI and the agent's callers use:

1. a ``tokenizer.json`` path (a Hugging Face tokenizer, e.g. from the model's repository,
   given in the model configuration) → exact counts with the ``tokenizers`` library
   (``pip install 'ctxstack[tokenizers]'``);
2. else a model name OpenAI documents the vocabulary of — ``gpt-4o``, ``gpt-4.1``,
   ``gpt-4.5``, ``gpt-5``, ``o1``/``o3``/``o4`` → ``o200k_base``; ``gpt-4``,
   ``gpt-3.5``, ``text-embedding-3`` / ``-ada-002`` → ``cl100k_base`` — → exact counts
   with tiktoken, **when the vocabulary is on disk** (nothing is downloaded);
3. else the default heuristic with the matching weights (``cl100k`` for the GPT-4 / 3.5
   family, ``o200k`` for everything else, including unknown models), which carries a
   safety margin (see :mod:`ctxstack.tokens._counter`).

Counters are built once per tokenizer file, or per family when there is none, and shared
(so arbitrary model names cannot grow the map): loading a vocabulary takes a fraction of a
second and ~100 MB for ``o200k_base``.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any

from ctxstack.errors import TokenizerUnavailableError
from ctxstack.tokens._counter import BaseCounter, HeuristicCounter, TiktokenCounter, TokenCounter
from ctxstack.tokens._model import Family

log = logging.getLogger(__name__)

_O200K = re.compile(r"^(?:gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o)(?:\b|[-_.:])")
_CL100K = re.compile(r"^(?:gpt-4|gpt-3\.5|text-embedding-3|text-embedding-ada-002)(?:\b|[-_.:])")
ENCODING_OF: dict[Family, str] = {"o200k": "o200k_base", "cl100k": "cl100k_base"}

_lock = threading.Lock()
_built: dict[tuple[str, Family | None], TokenCounter] = {}


def family_for_model(model: str | None) -> Family | None:
    """The tokenizer family of an OpenAI model name (provider prefix ignored), else None."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    if _O200K.match(name):
        return "o200k"
    if _CL100K.match(name):
        return "cl100k"
    return None


class TokenizerJsonCounter(BaseCounter):
    """Exact counts with a Hugging Face ``tokenizer.json`` (special tokens not added).

    Raises:
        TokenizerUnavailableError: the ``tokenizers`` package is missing, or the file does
            not exist or cannot be read as a tokenizer.
    """

    margin: float = 0.0

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise TokenizerUnavailableError(
                "the tokenizers package is not installed: pip install 'ctxstack[tokenizers]'"
            ) from exc
        file = Path(path)
        if not file.is_file():
            raise TokenizerUnavailableError(f"tokenizer file not found: {file}")
        try:
            self._tok: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises a bare Exception on bad files
            raise TokenizerUnavailableError(f"cannot read tokenizer {file}: {exc}") from exc
        self.path = str(file)

    @property
    def cache_key(self) -> str:
        return f"tokenizer.json:{self.path}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def counter_for_model(model: str | None, tokenizer_path: str | Path | None = None) -> TokenCounter:
    """The most exact counter available offline for ``model`` (see the module docstring).

    Never raises for an unavailable tokenizer: it logs why and falls back, because a
    missing vocabulary must not stop a service — the heuristic's margin covers it.
    """
    # Keyed by what decides the counter — the file, else the family — not by the model
    # name: arbitrary names (a proxy forwards whatever clients send) cannot grow the map.
    key = (str(tokenizer_path), None) if tokenizer_path else ("", family_for_model(model))
    with _lock:
        hit = _built.get(key)
        if hit is None:
            hit = _build(model, tokenizer_path)
            _built[key] = hit
    return hit


def _build(model: str | None, tokenizer_path: str | Path | None) -> TokenCounter:
    family = family_for_model(model)
    if tokenizer_path:
        try:
            return TokenizerJsonCounter(tokenizer_path)
        except TokenizerUnavailableError as exc:
            log.warning("tokenizer for %s unavailable (%s); using the heuristic", model, exc)
    elif family is not None:
        try:
            return TiktokenCounter(ENCODING_OF[family])
        except TokenizerUnavailableError as exc:
            log.info("exact tokenizer for %s unavailable (%s); using the heuristic", model, exc)
    return HeuristicCounter(family or "o200k")
