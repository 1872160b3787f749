"""The best stable-prefix share any compaction of ctxstack's kind can reach on a run.

Used by :mod:`benchmarks.bench_recall` (section v) to say how far the measured share is
from what is achievable at a budget, from the run's own sizes. A *bound*, not a target.

The model. Call 0 sends ``fixed`` tokens (system prompt and query); call ``i`` adds group
``i`` — the assistant's tool call and its output, ``raw[i]`` tokens. After each call the
context is, in order: the fixed part, a summary (``summary`` tokens, once anything was
folded), the groups ``s+1..j`` masked (``masked[i]`` tokens each: the call and the
placeholder), and the groups ``j+1..i`` whole. A compaction may, before call ``i``:

* mask more groups, oldest first (``j`` grows), never one of the newest ``keep`` groups;
  the call then shares the prefix up to the first newly masked output (the fixed part, the
  summary, the earlier masked groups and the assistant message of group ``j+1``);
* fold groups into the summary (``s`` grows, also never the newest ``keep``); the
  summary is rewritten, so the call shares at most the fixed part.

Every call must fit ``capacity`` tokens. Without compaction a call shares all of the
previous call. The share of a call is the shared prefix over its own tokens; the bound is
the best mean share over calls ``1..n``, found exactly by dynamic programming over the
states ``(s, j)`` (for ``n`` = 100, about a second with numpy).

Outside the model (so not covered by the bound): masking an output that is not the oldest
whole one, several summaries at different positions (the design keeps one rolling
summary), or dropping a message without folding it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_NEG = -1e18


def best_prefix_share(
    raw: Sequence[float],
    masked: Sequence[float],
    assistant: Sequence[float],
    *,
    fixed: float,
    summary: float,
    capacity: float,
    keep: int,
) -> float:
    """The best mean stable-prefix share over calls ``1..n`` (see the module doc).

    ``raw``, ``masked`` and ``assistant`` hold one size per group, group 1 first
    (``assistant`` is the tool-call message alone, part of both other sizes). Returns
    ``nan`` when no policy keeps every call within ``capacity``.
    """
    n = len(raw)
    if not n:
        return 1.0
    big_r = np.concatenate([[0.0], np.cumsum(np.asarray(raw, dtype=float))])
    big_m = np.concatenate([[0.0], np.cumsum(np.asarray(masked, dtype=float))])
    head = np.concatenate([np.asarray(assistant, dtype=float), [0.0]])  # head[j]: group j+1
    idx = np.arange(n + 1)
    s_, j_ = np.meshgrid(idx, idx, indexing="ij")
    base = fixed + np.where(s_ > 0, summary, 0.0) + (big_m[j_] - big_m[s_])
    # Shared prefix of a mask step from state (s, j): up to group j+1's output.
    mask_prefix = base + head[j_]
    later = idx[None, :, None] < idx[None, None, :]  # j0 < j

    def totals(i: int) -> tuple[np.ndarray, np.ndarray]:
        t = base + (big_r[i] - big_r[np.minimum(j_, i)])
        ok = (s_ <= j_) & (j_ <= max(i - keep, 0)) & (t <= capacity)
        return np.where(ok, t, 1.0), ok

    prev_t, ok = totals(0)
    value = np.where(ok & (s_ == 0) & (j_ == 0), 0.0, _NEG)
    for i in range(1, n + 1):
        t, ok = totals(i)
        alive = value > _NEG / 2
        stay = np.where(alive, value + prev_t / t, _NEG)
        # Mask step: best over j0 < j of value[s, j0] + prefix(s, j0) / t[s, j].
        gain = value[:, :, None] + mask_prefix[:, :, None] / t[:, None, :]
        mask = np.where(alive[:, :, None] & later, gain, _NEG).max(axis=1)
        # Summary step: best over s0 < s, j0 <= j of value[s0, j0], sharing the fixed part.
        reach = np.maximum.accumulate(np.maximum.accumulate(value, axis=1), axis=0)
        reach = np.vstack([np.full((1, n + 1), _NEG), reach[:-1]])
        fold = np.where(reach > _NEG / 2, reach + fixed / t, _NEG)
        value = np.where(ok, np.maximum(np.maximum(stay, mask), fold), _NEG)
        prev_t = t
    best = float(value.max())
    return best / n if best > _NEG / 2 else float("nan")


def any_policy_ceiling(raw: Sequence[float], capacity: float) -> float:
    """A ceiling for *any* compaction: call ``i`` carries group ``i``, which no earlier
    call held, in at most ``capacity`` tokens, so it shares at most ``1 - raw[i]/capacity``."""
    if not raw:
        return 1.0
    return float(np.mean([max(0.0, 1.0 - g / capacity) for g in raw]))
