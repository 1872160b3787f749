"""The ImportError every adapter raises when its framework's extra is not installed."""

from __future__ import annotations

from typing import NoReturn


def missing_extra(adapter: str, extra: str, exc: ImportError) -> NoReturn:
    """Raise an ImportError naming the extra to install (``exc`` is the original failure)."""
    raise ImportError(
        f"ctxstack.integrations.{adapter} needs the {extra!r} extra: "
        f"pip install 'ctxstack[{extra}]' (import failed: {exc})"
    ) from exc
