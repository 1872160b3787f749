"""Lazy exports (PEP 562): a package's names imported from their modules on first use.

The root package, :mod:`ctxstack.memory`, :mod:`ctxstack.server` and
:mod:`ctxstack.llm.stub` re-export names whose modules are heavy or need an optional extra;
importing the package must not import them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the package whose globals are ``namespace``: a name in
    ``exports`` is imported from the module it maps to on first use and kept in the
    namespace (later lookups skip this hook); any other name is an AttributeError."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
