"""Layer 1 (and 4): conversation memories."""

from ctxstack.memory.base import BaseMemory
from ctxstack.memory.db import DbMemory
from ctxstack.memory.summary import SummaryMemory
from ctxstack.memory.window import WindowMemory

__all__ = ["BaseMemory", "DbMemory", "SummaryMemory", "WindowMemory"]
