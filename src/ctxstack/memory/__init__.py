"""Layer 1 (and 4): conversation memories.

``DbMemory`` is imported lazily: it pulls in SQLAlchemy, which users of the in-process
memories (and the CLI's offline commands) should not pay for at import time.
"""

from typing import TYPE_CHECKING, Any

from ctxstack.memory.base import BaseMemory
from ctxstack.memory.summary import SummaryMemory
from ctxstack.memory.window import WindowMemory

if TYPE_CHECKING:
    from ctxstack.memory.db import DbMemory

__all__ = ["BaseMemory", "DbMemory", "SummaryMemory", "WindowMemory"]


def __getattr__(name: str) -> Any:
    if name == "DbMemory":
        from ctxstack.memory.db import DbMemory

        return DbMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
