"""Layer 1 (and 4): conversation memories.

``DbMemory`` lives on the storage side (:mod:`ctxstack.store.memory`: it needs SQLAlchemy
and the ``server`` extra) and is re-exported lazily through :mod:`ctxstack.memory.db`, so
importing the core never imports the store.
"""

from typing import TYPE_CHECKING

from ctxstack._lazy import lazy_exports
from ctxstack.memory._base import BaseMemory
from ctxstack.memory._summary import SummaryMemory
from ctxstack.memory._window import WindowMemory

if TYPE_CHECKING:
    from ctxstack.memory.db import DbMemory

__all__ = ["BaseMemory", "DbMemory", "SummaryMemory", "WindowMemory"]


__getattr__ = lazy_exports(globals(), {"DbMemory": "ctxstack.memory.db"})
