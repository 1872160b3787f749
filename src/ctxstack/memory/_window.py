"""``WindowMemory``: the last N non-system messages plus every system message, no LLM.

The window is rounded so it is always something a model can read:

* it never starts inside a tool group (an assistant tool call and its results are kept
  or dropped together) — so it may hold fewer than N messages;
* it opens with a user turn: assistant/tool units at its old edge are dropped;
* if the last N messages hold no user turn at all (one long tool loop), the user message
  that opened the loop is kept in front of the newest whole units that fit in N - 1.

Messages added from a broken log (a tool result whose call is missing, a call that never
got its result) are repaired before windowing (:func:`ctxstack.messages.repair_tool_turns`),
so the window is always a valid request.

System messages are all kept, in their original positions. ``pinned`` has no meaning
here (it is a compaction concept): a window is purely positional.

Prompt caching: a window that slides by one message per turn changes its first message at
every turn past N, so every call rewrites the provider's cached prefix (written at 1.25×
the input price where a cached read costs 0.1×). With ``step=k`` the window's old edge
moves k messages at a time, on a grid counted from the first message ever added: between
moves each call extends the previous one byte for byte, and the window holds between
N − k + 1 and N messages (fewer, like any window, where the rounding above drops some).
``benchmarks/bench_dbmemory.py`` prices both.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxstack.compaction._groups import split_layout
from ctxstack.errors import ConfigError
from ctxstack.memory._base import HeldMemory
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.tokens import DEFAULT_COUNTER

_PRUNE_SLACK = 16


def _on_grid(edge: int, step: int, origin: int) -> int:
    """``edge`` moved forward to the next multiple of ``step`` counted from ``-origin``
    (``origin``: how many non-system messages came before ``messages[0]``)."""
    return -(-(edge + origin) // step) * step - origin


def window_indices(messages: Sequence[ChatMessage], max_messages: int, step: int = 1,
                   origin: int = 0) -> list[int]:
    """Indices (ascending) of the non-system messages in the window. Pure function.

    ``step``/``origin``: the window's old edge only stops at multiples of ``step``
    non-system messages counted from the first one ever added, ``origin`` of which are no
    longer in ``messages`` (see the module doc)."""
    positions = [i for i, m in enumerate(messages) if m.role != "system"]
    if len(positions) <= max_messages:
        return positions
    others = [messages[i] for i in positions]
    units = split_layout(others, DEFAULT_COUNTER).units
    edge = _on_grid(len(others) - max_messages, step, origin)
    first = next((n for n, u in enumerate(units) if u.start >= edge and u.user_led), None)
    if first is not None:
        return positions[units[first].start :]
    anchor = next(
        (n for n in range(len(units) - 1, -1, -1) if units[n].start < edge and units[n].user_led),
        None,
    )
    if anchor is None:
        # No user turn anywhere before the edge: whole units inside the window.
        start = next((u.start for u in units if u.start >= edge), len(others))
        return positions[start:]
    # the newest whole units that fit beside the anchor, from a point on the same grid
    floor = _on_grid(len(others) - (max_messages - units[anchor].size), step, origin)
    start = len(others)
    for unit in reversed(units[anchor + 1 :]):
        if unit.start < floor:
            break
        start = unit.start
    kept = list(range(units[anchor].start, units[anchor].stop)) + list(range(start, len(others)))
    return [positions[i] for i in kept]


class WindowMemory(HeldMemory):
    """Keeps the last ``max_messages`` non-system messages and all system messages.

    Args:
        max_messages: the most non-system messages the window holds.
        step: how many messages the window's old edge moves at a time (default 1: it
            slides with every message). A larger step keeps consecutive calls' prefixes
            identical between moves, so a provider's prompt cache serves them, at the
            cost of a window that holds as few as ``max_messages - step + 1``.

    Raises:
        ConfigError: ``max_messages`` not a positive integer, or ``step`` not an integer
            from 1 to ``max_messages``.

    Safe under concurrent ``add_message`` calls; old messages that can never re-enter
    the window are discarded so memory use stays bounded by the window size.
    """

    def __init__(self, max_messages: int, *, step: int = 1) -> None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise ConfigError(f"max_messages: must be a positive integer, got {max_messages!r}")
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= max_messages:
            raise ConfigError(f"step: must be an integer from 1 to max_messages "
                              f"({max_messages}), got {step!r}")
        super().__init__()
        self.max_messages = max_messages
        self.step = step
        self._origin = 0  # non-system messages pruned so far: where the step grid starts

    async def clear(self) -> None:
        async with self._lock:
            self._messages = []
            self._origin = 0

    async def _added(self) -> None:
        if len(self._messages) > 2 * self.max_messages + _PRUNE_SLACK:
            self._prune()

    async def get_messages(self) -> list[ChatMessage]:
        async with self._lock:
            msgs = repair_tool_turns(self._messages)
            keep = set(window_indices(msgs, self.max_messages, self.step, self._origin))
            return [m for i, m in enumerate(msgs) if m.role == "system" or i in keep]

    def _prune(self) -> None:
        # Windows only move forward as messages arrive, so everything before the current
        # window's first message (anchor included) is unreachable — except system messages.
        msgs = self._messages
        keep = window_indices(msgs, self.max_messages, self.step, self._origin)
        cut = keep[0] if keep else len(msgs)
        self._origin += sum(1 for m in msgs[:cut] if m.role != "system")
        self._messages = [m for i, m in enumerate(msgs) if i >= cut or m.role == "system"]
