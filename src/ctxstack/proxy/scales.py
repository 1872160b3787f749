"""How many tokens the upstream bills for what the proxy estimated: learnt per model.

A model whose tokenizer is not available offline (Claude, Gemini, most open models behind
an OpenAI-compatible server) is counted with the default heuristic, whose weights and
margin are sized on OpenAI's ``o200k_base``. Another vocabulary can need more tokens for
the same text (Claude's, by published comparisons, often does: nothing here measured it,
its tokenizer is not public), and the margin covers the estimator's scatter, not a
second vocabulary's bias. Fitted
to its budget by the estimate alone, such a request can then exceed the model's window:
the upstream refuses it and the proxy compacts again and retries (``overflow_retries``),
once per growth past the budget.

Every answer tells the proxy what the upstream counted (``usage``), so :class:`TokenScales`
learns, per model name, the ratio of the reported prompt to the proxy's own estimate of
what it forwarded, and budgets are divided by it: ``budget(model, b) = b / scale``. Rules:

* **only estimates are corrected**: a model counted by its own tokenizer (margin 0) is
  never observed;
* **one call, one sample**: an answer whose usage sums several upstream calls (the proxy
  answered ``ctxstack_recall``) is not a sample; neither is a request estimated below
  :data:`MIN_TOKENS` (per-message overhead that differs between providers dominates it) or
  a ratio outside ``[1 / MAX_SCALE, MAX_SCALE]`` (a provider reporting zero, a cached
  figure, a mis-parsed body);
* **the prompt, all of it**: Anthropic's ``input_tokens`` leaves out the cache reads and
  writes, so those are added back; the Chat and Responses figures include them;
* **upward only**: a scale below 1 would spend the margin the estimate keeps for its own
  scatter, so the scale is ``max(1, learnt)``; within :data:`DEAD_BAND` of 1 it is 1
  (the margin absorbs that, and budgets do not move with every answer);
* **fast, then smooth**: the first sample sets the ratio, later ones move it by
  :data:`SMOOTHING` (an exponential moving average), so a model's second request
  already fits its real window and one odd answer does not swing it.

State is per worker and in memory: it is learnt again from the first answers after a
restart. At most :data:`MAX_MODELS` names are kept (model names come from clients). The
log says when a model's scale first leaves 1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ctxstack.proxy.counting import ModelCounters
from ctxstack.proxy.fitting import Fit
from ctxstack.proxy.recall import UpstreamUsage
from ctxstack.tokens._counter import budget_margin

log = logging.getLogger("ctxstack.proxy")

MIN_TOKENS = 1_000
"""Smaller requests are not samples."""
MAX_SCALE = 3.0
"""Ratios beyond ``[1 / MAX_SCALE, MAX_SCALE]`` are not samples."""
SMOOTHING = 0.2
"""The weight of a new sample once the first has set the ratio."""
DEAD_BAND = 0.02
"""A learnt ratio below ``1 + DEAD_BAND`` leaves budgets as they are."""
MAX_MODELS = 1024
"""Model names remembered (then the map is cleared and learnt again)."""


@dataclass
class _Learnt:
    ratio: float
    samples: int


class TokenScales:
    """Per model name, the learnt ratio of the upstream's prompt count to the proxy's
    estimate (see the module doc).

    Args:
        counters: the proxy's counters per model: only models they count by estimate
            (a margin above 0) are observed.
        enabled: ``False`` learns nothing and leaves every budget as it is
            (``CTXSTACK_PROXY_LEARN_SCALE=0``).
    """

    def __init__(self, counters: ModelCounters, *, enabled: bool = True) -> None:
        self.counters = counters
        self.enabled = enabled
        self._learnt: dict[str, _Learnt] = {}

    def scale(self, model: str) -> float:
        """What budgets of ``model`` are divided by: 1 until a sample says more."""
        learnt = self._learnt.get(model)
        if learnt is None or learnt.ratio < 1 + DEAD_BAND:
            return 1.0
        return learnt.ratio

    def samples(self, model: str) -> int:
        learnt = self._learnt.get(model)
        return learnt.samples if learnt is not None else 0

    def budget(self, model: str, budget: int) -> int:
        """``budget`` for ``model`` after its scale (at least 1)."""
        scale = self.scale(model)
        return budget if scale == 1.0 else max(1, int(budget / scale))

    def observe(self, wire: str, model: str, fit: Fit | None, usage: UpstreamUsage,
                rounds: int = 0) -> bool:
        """Learn from one answer of ``wire`` to the request fitted as ``fit``; whether it
        was taken as a sample (see the module doc for what is not)."""
        if not self.enabled or fit is None or rounds or usage.calls > 1:
            return False
        estimated = fit.tokens
        reported = prompt_tokens(wire, usage)
        if estimated < MIN_TOKENS or reported <= 0:
            return False
        ratio = reported / estimated
        if not 1 / MAX_SCALE <= ratio <= MAX_SCALE:
            return False
        if budget_margin(self.counters.get(model)) <= 0:
            return False  # counted by its own tokenizer: nothing to learn
        before = self.scale(model)
        learnt = self._learnt.get(model)
        if learnt is None:
            if len(self._learnt) >= MAX_MODELS:
                self._learnt.clear()
            self._learnt[model] = _Learnt(ratio, 1)
        else:
            learnt.ratio += SMOOTHING * (ratio - learnt.ratio)
            learnt.samples += 1
        if before == 1.0 and self.scale(model) > 1.0:
            log.info("proxy: %s reports %.0f%% more tokens than estimated for %r; its "
                     "budgets are divided by that", wire, 100 * (self.scale(model) - 1), model)
        return True


def prompt_tokens(wire: str, usage: UpstreamUsage) -> int:
    """The whole prompt the upstream counted: Anthropic reports cache reads and writes
    apart from ``input_tokens``; Chat's ``prompt_tokens`` and Responses' ``input_tokens``
    include them."""
    if wire == "anthropic":
        return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return usage.input_tokens
