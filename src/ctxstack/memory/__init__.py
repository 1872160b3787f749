"""Layer 1 (and 4): conversation memories."""

from ctxstack.memory.base import BaseMemory
from ctxstack.memory.db import DbMemory

__all__ = ["BaseMemory", "DbMemory"]
