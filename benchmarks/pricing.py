"""What a sequence of upstream calls bills for input under prompt caching (any wire).

The model every provider's prompt cache follows closely enough for comparisons: a call's
leading part that is byte-identical to the previous call's is read from the cache at
``read`` times the base input price (0.1×), the rest is written at ``write`` times it
(1.25×). A call is given as its prompt *units* in the order the provider renders them
(Chat Completions: the tools, then each message; Anthropic Messages: tools, system,
messages; Responses: instructions, tools, items) with each unit's token count; two units
are the same when their JSON is (key order included).

Figures are in base-price input tokens: the bill of 1,000 tokens written once is 1,250.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

CACHE_READ = 0.1
CACHE_WRITE = 1.25


@dataclass(frozen=True)
class PricedCall:
    """One upstream call: its units' identities and token counts, in prompt order."""

    keys: tuple[str, ...]
    counts: tuple[int, ...]

    @classmethod
    def of(cls, units: Sequence[object], counts: Sequence[int]) -> PricedCall:
        if len(units) != len(counts):
            raise ValueError("one count per unit")
        keys = tuple(hashlib.blake2b(json.dumps(u, ensure_ascii=False,
                                                separators=(",", ":")).encode(),
                                     digest_size=16).hexdigest() for u in units)
        return cls(keys, tuple(counts))

    @property
    def tokens(self) -> int:
        return sum(self.counts)


def shared_prefix_tokens(previous: PricedCall | None, call: PricedCall) -> int:
    """Tokens of ``call``'s leading units identical to ``previous``'s."""
    if previous is None:
        return 0
    total = 0
    for a, b, n in zip(previous.keys, call.keys, call.counts, strict=False):
        if a != b:
            break
        total += n
    return total


def billed_input(calls: Sequence[PricedCall], *, read: float = CACHE_READ,
                 write: float = CACHE_WRITE) -> float:
    """The input bill of ``calls`` made in this order (see the module doc)."""
    total = 0.0
    previous: PricedCall | None = None
    for call in calls:
        cached = shared_prefix_tokens(previous, call)
        total += read * cached + write * (call.tokens - cached)
        previous = call
    return total
