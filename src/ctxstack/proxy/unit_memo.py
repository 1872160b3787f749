"""The units of a client's recent requests, so a resent history is converted once.

Clients of the Anthropic Messages and Responses wires resend the whole conversation on
every request. The proxy fits each wire through chat-shaped *units*
(:mod:`ctxstack.proxy.anthropic.units`, :mod:`ctxstack.proxy.responses_view`), and the
session's view is checked by a hash over them (:func:`~ctxstack.proxy.sessions.
prefix_hash`). Converting and hashing 2,000 messages again on each request is most of
what an over-budget request costs once the session's view is reused — though only the
messages after the view are new.

So each wire remembers, per **owner** (the caller and the client's key, salted with the
wire: :func:`~ctxstack.proxy.sessions.owner_salt`; never shared across keys), the last
few conversations it converted: the client's messages as parsed, the units made of them,
and the prefix hashes computed over those units. A request whose leading messages are
*equal* to a remembered conversation's (Python equality of the parsed JSON: the same
keys, values and order of list items) reuses the units of that common prefix and converts
only the rest; a prefix hash over units that are all reused is the remembered one. An
edited, inserted or removed message ends the common prefix where it is: everything from
there on is converted afresh, and a view covering it is hashed afresh, so it no longer
matches and is recomputed (the same decision as without the memo, only cheaper).
Likewise, messages equal to ones the proxy validated before are not validated again (a
new message still is, against everything before it: a ``tool_result`` needs an earlier
``tool_use``), and token counts of units unchanged are kept (the Responses wire recounts
the view it forwards on every request). A wire reuses only units that cannot differ:
the unit the shared messages end in may grow, and a Responses unit whose view depends on
later items (a hosted call an output may answer, an output whose call comes later) is
read afresh.

Equality is Python's: JSON ``1``, ``1.0`` and ``true`` compare equal, so a client that
re-sent a number in another spelling could have a reused unit built from the earlier
spelling — counted the same, and only forwarded from the earlier request's bytes where a
message is re-rendered (whole client messages always go out as this request's own dicts).

Process-local and bounded (entries, request bytes): a miss — another worker, an evicted
entry — only costs the full conversion, never a different result.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")

HashKey = tuple[str, int]
"""``(hash salt — the session —, units covered)``."""


@dataclass
class Remembered(Generic[T]):
    """One conversation as a wire converted it."""

    head: object
    """What must be equal besides the messages (the system prompt, the instructions)."""
    messages: list[Any]
    units: T
    hashes: dict[HashKey, str] = field(default_factory=dict)
    """Prefix hashes known over ``units`` (filled as the fitter computes them)."""
    size: int = 0


Hit = tuple["Remembered[Any] | None", int]
"""What :meth:`UnitMemo.find` answers: the remembered conversation and how many leading
messages it shares (``(None, 0)``: none)."""


def common_prefix(old: list[Any], new: list[Any]) -> int:
    """How many leading items of ``old`` and ``new`` are equal.

    The common cases — the same history resent with new messages after it, or with its
    last message changed (a client moving its cache marker) — are whole-list comparisons
    (in C); else one pass to the first difference."""
    try:
        return _common_prefix(old, new)
    except RecursionError:  # nested deeper than a comparison can go: nothing shared
        return 0


def _common_prefix(old: list[Any], new: list[Any]) -> int:
    n = min(len(old), len(new))
    if n == 0:
        return 0
    if old[:n] == new[:n]:
        return n
    if n > 1 and old[:n - 1] == new[:n - 1]:
        return n - 1
    for i in range(n):
        if old[i] != new[i]:
            return i
    return n  # pragma: no cover - the first comparison would have been equal


class UnitMemo(Generic[T]):
    """Recent conversations per owner (see the module doc), least recently used evicted
    first beyond ``max_entries`` or ``max_size`` (the sum of the sizes given to
    :meth:`remember`: the request bodies' bytes — parsed, they take several times that).
    Holding the conversation it superseded is never needed: a request's entry replaces
    the one it was built from."""

    def __init__(self, *, max_entries: int = 64, per_owner: int = 4,
                 max_size: int = 64_000_000) -> None:
        self.max_entries = max_entries
        self.per_owner = per_owner
        self.max_size = max_size
        self._entries: OrderedDict[tuple[str, int], Remembered[T]] = OrderedDict()
        self._size = 0
        self._serial = 0

    def find(self, owner: str, head: object, messages: list[Any],
             ) -> tuple[Remembered[T] | None, int]:
        """The remembered conversation of ``owner`` sharing the most leading messages
        with ``messages`` (and the same ``head``), and how many; ``(None, 0)`` if none."""
        best: Remembered[T] | None = None
        shared = 0
        first = messages[0] if messages else None
        for (who, _), entry in reversed(self._entries.items()):
            if who != owner or entry.head != head or not entry.messages:
                continue
            if first is None or entry.messages[0] != first:
                continue
            found = common_prefix(entry.messages, messages)
            if found > shared:
                best, shared = entry, found
        return best, shared

    def remember(self, owner: str, entry: Remembered[T], *,
                 replaces: Remembered[T] | None = None) -> None:
        """Keep ``entry`` as ``owner``'s newest conversation (``replaces``: the entry it
        was built from, now superseded)."""
        if replaces is not None:
            for key, found in list(self._entries.items()):
                if found is replaces:
                    self._drop(key)
        if entry.size > self.max_size:
            return
        self._serial += 1
        self._entries[(owner, self._serial)] = entry
        self._size += entry.size
        mine = [k for k in self._entries if k[0] == owner]
        for key in mine[:-self.per_owner]:
            self._drop(key)
        while self._entries and (len(self._entries) > self.max_entries
                                 or self._size > self.max_size):
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[str, int]) -> None:
        entry = self._entries.pop(key)
        self._size -= entry.size


def equal_run(old: list[Any], new: list[Any], start: int) -> int:
    """``start`` plus how many units from ``start`` on are equal in ``old`` and ``new``
    (units rebuilt after the reused ones are often the same again: the last message
    resent with its cache marker moved, the same request sent again). A prefix hash
    depends only on the units' values, so it holds over all of them."""
    k, n = start, min(len(old), len(new))
    while k < n and old[k] == new[k]:
        k += 1
    return k


def carried_hashes(entry: Remembered[Any] | None, shared_units: int) -> dict[HashKey, str]:
    """The prefix hashes of ``entry`` still valid for a conversation sharing its first
    ``shared_units`` units (hashes over at most that many)."""
    if entry is None:
        return {}
    return {k: h for k, h in entry.hashes.items() if k[1] <= shared_units}
