"""A session's forwarded view as a recipe over the client's messages, and extending it.

What keeps the provider's prompt cache warm once a conversation is over budget: the
proxy forwards, request after request, **the same view** — the summary and the cleared
tool outputs it chose at the last compaction — with the client's new messages appended,
until that overflows. Only then is the view recomputed, in one step with headroom (the
guard's own low watermarks), so the next requests extend the new view again.

A view is stored as a *recipe* (:class:`ViewRecipe`): for each forwarded message either
the index of a client message forwarded as the client sent it, or the message the proxy
made or changed (the summary, a cleared tool output, a cut message). It stands for the
client's first ``covered`` messages; a request whose first ``covered`` messages hash the
same (:class:`~ctxstack.proxy.checkpoints.PrefixHasher`, salted with the session) is the
same conversation grown, and is forwarded as the recipe applied to its messages plus
everything after ``covered``: every message of the previous forwarded request again, in
the same bytes, then the new ones.

Pure: no I/O, no HTTP. Wire-neutral: a message is whatever dict the wire uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RecipeEntry = int | dict[str, Any]
"""A client message index, or ``{"m": message}`` for a message the proxy made."""


@dataclass(frozen=True)
class ViewRecipe:
    """How to rebuild a forwarded view from the client's messages (see the module doc)."""

    entries: tuple[RecipeEntry, ...]
    covered: int
    """Client messages the view stands for (its int entries are all below this)."""

    @classmethod
    def of(cls, client: Sequence[Mapping[str, Any]], forwarded: Sequence[Mapping[str, Any]],
           ) -> ViewRecipe:
        """The recipe of ``forwarded``, a view of all of ``client`` (a message forwarded as
        the client's own object becomes its index; anything else is kept whole)."""
        index = {id(m): i for i, m in enumerate(client)}
        entries: list[RecipeEntry] = []
        for m in forwarded:
            i = index.get(id(m))
            entries.append(i if i is not None else {"m": dict(m)})
        return cls(tuple(entries), len(client))

    def apply(self, client: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The view over ``client`` (at least ``covered`` messages) followed by the client's
        messages after ``covered``."""
        view = [client[e] if isinstance(e, int) else e["m"] for e in self.entries]
        view.extend(client[self.covered:])
        return view

    def to_json(self) -> str:
        return json.dumps(list(self.entries), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, covered: int) -> ViewRecipe:
        """Parse a stored recipe.

        Raises:
            ValueError: the text is not a recipe covering ``covered`` messages.
        """
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError("a view recipe is a JSON list")
        entries: list[RecipeEntry] = []
        for e in data:
            index = isinstance(e, int) and not isinstance(e, bool) and 0 <= e < covered
            if not index and not (isinstance(e, dict) and isinstance(e.get("m"), dict)):
                raise ValueError(f"bad view recipe entry {e!r}")
            entries.append(e)
        return cls(tuple(entries), covered)


def stable_prefix_tokens(previous: Sequence[Any], current: Sequence[Any],
                         counts: Sequence[int]) -> int:
    """Tokens of the leading messages of ``current`` that are byte-identical (as JSON)
    to ``previous``'s; ``counts`` are ``current``'s per-message tokens. What a provider's
    prompt cache can serve of ``current`` after ``previous`` (the benchmark's measure)."""
    total = 0
    for a, b, n in zip(previous, current, counts, strict=False):
        if json.dumps(a, ensure_ascii=False, separators=(",", ":")) != json.dumps(
                b, ensure_ascii=False, separators=(",", ":")):
            break
        total += n
    return total
