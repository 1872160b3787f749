"""``ctxstack.memory.db`` — the import path docs/DESIGN.md §2.1 names for :class:`DbMemory`.

DbMemory reads the database, so it lives on the storage side
(:mod:`ctxstack.store.memory`); the core's ``ctxstack.memory`` package does not import it.
This module only keeps the documented path working; the import contracts allow exactly
this one edge from ``ctxstack.memory`` to the store.
"""

from ctxstack.store.memory import DbMemory

__all__ = ["DbMemory"]
