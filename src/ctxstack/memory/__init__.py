"""Layer 1 (and 4): conversation memories."""

from ctxstack.memory.base import BaseMemory

__all__ = ["BaseMemory"]
