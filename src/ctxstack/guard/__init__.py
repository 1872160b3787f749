"""Layer 3: :class:`ContextGuard` enforces the budget before every model call, and reports
what it did as :class:`CompactionEvent` and :class:`GuardCheckEvent`.
"""

from ctxstack.guard._events import CompactionEvent, GuardCheck, GuardCheckEvent, GuardTotals
from ctxstack.guard._guard import ContextGuard

__all__ = [
    "CompactionEvent",
    "ContextGuard",
    "GuardCheck",
    "GuardCheckEvent",
    "GuardTotals",
]
