"""Fidelity: which planted facts survive compaction verbatim, per strategy and budget.

For every generated conversation (English, Chinese, Japanese, mixed; ~40K tokens each,
20 planted facts), every strategy (:mod:`benchmarks.fidelity.strategies`) and every budget
(2K, 4K, 8K, 16K tokens) we measure: the share of planted facts still present verbatim,
the tokens the result uses, whether the system prompt and the pinned query survived, and
whether the result is a valid OpenAI message sequence. The facts-kept figures are
measurements; the rest (valid sequence, system prompt and pinned query kept, within
budget, no exception) are guarantees of the library, reported as invariants.

The summariser is deliberately lossy (first sentence of each message), so the figures show
what ctxstack itself preserves. ``--llm`` (or ``CTXSTACK_BENCH_LLM=1``) summarises with the
configured real endpoint instead (``OpenAICompatibleLLM.from_env("fast")``); without a
configured endpoint that mode is skipped with a note, and no figures are reported.

**Fair baseline.** The ``facts kept … ≥ 0.9× naive`` rows compare with a baseline that
fills the *nominal* budget by the heuristic estimate, while ``smart_truncate`` keeps the
default counter's safety margin (10%) so that its result fits the budget by the real
tokenizer too. Part of the gap is that margin, and the naive result can overflow the real
budget. So, beside those rows (kept as they were), the benchmark runs the same baseline
held to the budget by the exact o200k tokenizer (``naive drop-oldest, real-token
budget``), compares ``smart_truncate`` with it under the same 0.9× target, and reports how
often each overflows the budget by the exact count. Those rows need the tokenizer offline
(``benchmarks.vocab``); without it they are left out.

**Fill on tool-heavy conversations** (issue 29). ``smart_truncate`` alone on
conversations of ~129K tokens cut to 2K / 8K / 32K: the median share of the budget the
result fills by the exact o200k count (target ≥ 80% at 8K), how often it is over the
budget by that count (target 0), and that every result is a valid sequence keeping the
system prompt and the final question. Two sets, kept apart: the *development* set is the
fidelity generator above at 129K tokens (the conversations the new walk was built and
checked against), the *held-out* set is :mod:`benchmarks.fidelity.tool_heavy` (agent
sessions with 1K–25K-token outputs, written separately and run only after the rules were
fixed). No parameter of the truncation is fitted: the split only says which data the
rules were developed on. The baseline column is the naive drop-oldest held to the same
real budget (it cuts inside tool groups, so its fill is an upper bound, not a rival).
Per set, the values planted in the conversations (the generator's facts; the held-out
sessions' task values) kept verbatim by ``smart_truncate`` and by that baseline, all three
budgets pooled, under the same ``≥ 0.9× naive`` target.

**The margin apart** (issue 29). "The real-token budget" is o200k's count, the tokenizer
of a GPT-4o-class model. A user of that model with ``tiktoken`` installed counts with
the exact tokenizer — :func:`ctxstack.tokens.counter_for_model` picks it, as the service,
the proxy and the CLI do — so the rows that carry the ``≥ 0.9× naive (real budget)``
target run ``smart_truncate`` with that counter (``… with the model's counter (exact
o200k) …``): both sides then count alike and the ratio measures the truncation's own
choices, on the fidelity conversations and on both tool-heavy sets. Without a tokenizer
the default estimator keeps its safety margin (10% for o200k: the largest margin that
one-kind conversations of its accuracy benchmark needed, plus a point, see
``benchmarks/margin_sweep.py``): it may fill only ``1 − margin`` of the budget by the
estimate — a deliberate trade, never over the budget by the real count — while the naive
baseline is handed the exact tokenizer. Those rows (``… with the default estimator (10%
margin, no tokenizer) …``) are kept, with the 0.9× target scaled by the room the margin
leaves: ``≥ 0.9 × (1 − 0.10) = 0.81× naive``. A miss there is a miss against what the
margin allows, not against a tokenizer-holding baseline.

Run alone: ``python -m benchmarks.bench_fidelity [--quick] [--llm]``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchmarks.common import BenchRow, print_table
from benchmarks.fidelity.generator import FACT_KINDS, LANGUAGES, Conversation, Language, generate
from benchmarks.fidelity.scorer import (
    FactsScore,
    Validity,
    check_sequence,
    context_text,
    find_value,
    score_facts,
    survived,
)
from benchmarks.fidelity.sizing import sizing_name
from benchmarks.fidelity.strategies import (
    NAIVE_REAL,
    Strategy,
    all_strategies,
    lossy_summarizer,
    naive_drop_oldest,
    real_counter,
)
from ctxstack.compaction import smart_truncate
from ctxstack.llm import LLM
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC, TokenCounter, UsageMeter, counter_for_model
from ctxstack.tokens._counter import HEURISTIC_MARGIN, budget_margin

TITLE = "Fidelity: planted facts kept verbatim after compaction"
BUDGETS = (2_000, 4_000, 8_000, 16_000)
CONVERSATION_TOKENS = 40_000
FACTS_PER_CONVERSATION = 20
HEADLINE = ("smart_truncate", "llm_compact (general)")
TARGET_SHARE_OF_NAIVE = {"smart_truncate": 0.9, "llm_compact (general)": 1.0}
REAL_MODEL = "gpt-4o"
"""The model whose tokenizer (o200k_base) defines "the real-token budget"."""
ESTIMATE_MARGIN = HEURISTIC_MARGIN["o200k"]
"""The default estimator's safety margin: the share of the budget it leaves free."""
"""Facts kept, as a share of what the naive baseline keeps at the same budget.

Truncation gets 10% of slack: the baseline's extra facts come from cutting inside tool
groups and starting on an assistant turn — sequences a provider rejects — which
``smart_truncate`` refuses to do. Compaction must keep at least as much as the baseline."""
LLM_ENV = "CTXSTACK_BENCH_LLM"  # set by benchmarks/run --llm
SMOKE_ENV = "CTXSTACK_BENCH_SMOKE"  # set by benchmarks/run --smoke


@dataclass
class Run:
    """One strategy on one conversation at one budget."""

    strategy: str
    budget: int
    language: str
    seed: int
    facts: FactsScore | None = None
    tokens: int = 0
    system_kept: bool = False
    query_kept: bool = False
    validity: Validity | None = None
    llm_calls: int = 0
    seconds: float = 0.0
    error: str | None = None
    exact_tokens: int | None = None
    """The result's size by the exact o200k tokenizer (None when it is unavailable)."""

    @property
    def fits(self) -> bool:
        return self.error is None and self.tokens <= self.budget


@dataclass
class FidelityResult:
    quick: bool
    mode: str
    runs: list[Run] = field(default_factory=list)
    strategies: list[Strategy] = field(default_factory=list)
    conversations: list[Conversation] = field(default_factory=list)
    skipped: str | None = None


_LAST: dict[bool, FidelityResult] = {}


def conversations(quick: bool) -> list[Conversation]:
    if os.environ.get(SMOKE_ENV, "") not in ("", "0"):  # the test suite's smoke run
        return [generate(1, lang, target_tokens=6_000, n_facts=5) for lang in ("en", "mixed")]
    seeds = (1,) if quick else (1, 2, 3, 4, 5, 6)
    return [generate(seed, lang, target_tokens=CONVERSATION_TOKENS,
                     n_facts=FACTS_PER_CONVERSATION)
            for seed in seeds for lang in LANGUAGES]


def real_llm() -> LLM | str:
    """The configured fast endpoint, or the reason there is none."""
    try:
        llm: LLM = OpenAICompatibleLLM.from_env("fast")
    except Exception as exc:  # ConfigError and friends: report, never crash the suite
        return f"no endpoint configured ({type(exc).__name__}: {exc})"
    return llm


async def measure(conv: Conversation, strategy: Strategy, budget: int,
                  shared_llm: LLM | None) -> Run:
    run = Run(strategy.name, budget, conv.language, conv.seed)
    meter = UsageMeter()  # every LLMResult reports calls=1, so usage.calls counts calls
    llm = meter.wrap(shared_llm if shared_llm is not None else lossy_summarizer())
    start = time.perf_counter()
    try:
        result = await strategy.run(list(conv.messages), budget, llm)
    except Exception as exc:  # a strategy bug is a finding, not a reason to stop
        run.error = f"{type(exc).__name__}: {exc}"
        run.seconds = time.perf_counter() - start
        return run
    run.seconds = time.perf_counter() - start
    run.facts = score_facts(conv.facts, result)
    run.tokens = HEURISTIC.count_messages(result)
    exact = real_counter()
    run.exact_tokens = exact.count_messages(result) if exact is not None else None
    run.system_kept = survived(conv.system_prompt, result)
    run.query_kept = survived(conv.query, result)
    run.validity = check_sequence(result)
    run.llm_calls = meter.usage.calls
    return run


async def evaluate(quick: bool, use_real_llm: bool) -> FidelityResult:
    res = FidelityResult(quick=quick, mode="real endpoint" if use_real_llm else "scripted",
                         strategies=all_strategies())
    shared: LLM | None = None
    if use_real_llm:
        got = real_llm()
        if isinstance(got, str):
            res.skipped = f"--llm was given but {got}; nothing was measured."
            return res
        shared = got
    try:
        res.conversations = conversations(quick)
        for conv in res.conversations:
            for budget in BUDGETS:
                for strategy in res.strategies:
                    res.runs.append(await measure(conv, strategy, budget, shared))
    finally:
        close = getattr(shared, "aclose", None)
        if close is not None:
            await close()
    return res


def result_for(quick: bool) -> FidelityResult:
    if quick not in _LAST:
        use_llm = os.environ.get(LLM_ENV, "") not in ("", "0")
        _LAST[quick] = asyncio.run(evaluate(quick, use_llm))
    return _LAST[quick]


# ---------------------------------------------------------------------------- figures


def _ok(runs: Sequence[Run]) -> list[Run]:
    return [r for r in runs if r.error is None]


def kept_share(runs: Sequence[Run]) -> float | None:
    """Mean share of facts kept, in percent (None if no successful run)."""
    good = [r.facts.share for r in _ok(runs) if r.facts is not None]
    return 100 * statistics.fmean(good) if good else None


def _pct(runs: Sequence[Run], attr: str) -> float | None:
    good = _ok(runs)
    if not good:
        return None
    return 100 * sum(1 for r in good if bool(getattr(r, attr))) / len(good)


def _valid_pct(runs: Sequence[Run]) -> float | None:
    checks = [r.validity for r in _ok(runs) if r.validity is not None]
    return 100 * sum(v.valid for v in checks) / len(checks) if checks else None


def select(res: FidelityResult, strategy: str | None = None, budget: int | None = None,
           language: str | None = None) -> list[Run]:
    return [r for r in res.runs
            if (strategy is None or r.strategy == strategy)
            and (budget is None or r.budget == budget)
            and (language is None or r.language == language)]


def rows_from(res: FidelityResult) -> list[BenchRow]:
    if res.skipped or not res.runs:
        return []
    names = [s.name for s in res.strategies]
    baseline = next(s.name for s in res.strategies if s.baseline)
    library = [s for s in res.strategies if not s.baseline]
    rows: list[BenchRow] = []
    for budget in BUDGETS:
        base = kept_share(select(res, baseline, budget))
        for name in HEADLINE if any(n in names for n in HEADLINE) else (baseline,):
            if name not in names:
                continue
            value = kept_share(select(res, name, budget))
            if value is None:
                continue
            is_base = name == baseline
            share = TARGET_SHARE_OF_NAIVE.get(name, 1.0)
            target = "≥ naive" if share == 1.0 else f"≥ {share:g}× naive"
            rows.append(BenchRow(
                name=f"facts kept @{budget // 1000}K, {name}", value=value, unit="%",
                baseline=None if is_base else base,
                ratio=(value / base) if (base and not is_base) else None,
                target="" if is_base else target,
                met=None if is_base or base is None else value >= share * base,
            ))
    rows += _real_budget_rows(res)
    if not library:
        return rows
    lib_runs = [r for r in res.runs if r.strategy in {s.name for s in library}]
    base_runs = select(res, baseline)
    budgeted = [r for r in res.runs
                if r.strategy in {s.name for s in library if s.budgeted}]

    def pct_row(name: str, lib: float | None, base: float | None) -> BenchRow:
        # The library guarantees these (valid sequence, system prompt and pinned query
        # kept, within budget): invariants checked on every run, not wins over the naive
        # baseline, whose figure is shown for reference only (no ratio).
        v = lib if lib is not None else 0.0
        return BenchRow(name=name, value=v, unit="%", baseline=base, ratio=None,
                        target="100%", met=v >= 100.0, invariant=True)

    rows.append(pct_row("valid OpenAI sequence, ctxstack strategies",
                        _valid_pct(lib_runs), _valid_pct(base_runs)))
    rows.append(pct_row("pinned query kept, ctxstack strategies",
                        _pct(lib_runs, attr="query_kept"), _pct(base_runs, attr="query_kept")))
    rows.append(pct_row("system prompt kept, ctxstack strategies",
                        _pct(lib_runs, attr="system_kept"), _pct(base_runs, attr="system_kept")))
    rows.append(pct_row("within budget, budgeted ctxstack strategies",
                        _pct(budgeted, attr="fits"), _pct(base_runs, attr="fits")))
    errors = sum(1 for r in lib_runs if r.error)
    rows.append(BenchRow(name="strategy errors (exceptions)", value=float(errors), unit="runs",
                         target="0", met=errors == 0, invariant=True))
    return rows


def _over_real(runs: Sequence[Run]) -> float | None:
    """Percent of runs whose result exceeds its budget by the exact tokenizer."""
    sized = [r for r in _ok(runs) if r.exact_tokens is not None]
    if not sized:
        return None
    return 100 * sum(r.exact_tokens > r.budget for r in sized if r.exact_tokens) / len(sized)


def margin_share() -> float:
    """The 0.9× target scaled by the room the default estimator may use, ``1 − margin``:
    without a tokenizer ``smart_truncate`` fills at most that share of the budget (by the
    estimate), by design — the margin is what keeps it within the budget by the real
    count — while the naive baseline is handed the exact tokenizer and fills all of it."""
    return TARGET_SHARE_OF_NAIVE["smart_truncate"] * (1.0 - ESTIMATE_MARGIN)


def margin_target() -> str:
    return (f"≥ {margin_share():.2f}× naive (0.9 × (1 − {ESTIMATE_MARGIN:g} margin): the "
            "estimator's room)")


def model_counter() -> TokenCounter:
    """The counter ctxstack picks for :data:`REAL_MODEL` (:func:`counter_for_model`, as
    the service, proxy and CLI do): exact o200k when ``tiktoken`` is installed."""
    return counter_for_model(REAL_MODEL)


def _real_budget_rows(res: FidelityResult) -> list[BenchRow]:
    """``smart_truncate`` against the naive baseline held to the real-token budget, and
    how often each overflows the budget by the exact tokenizer (see the module doc)."""
    names = {s.name for s in res.strategies}
    if NAIVE_REAL.name not in names or "smart_truncate" not in names:
        return []
    rows = []
    for budget in BUDGETS:
        base = kept_share(select(res, NAIVE_REAL.name, budget))
        value = kept_share(select(res, "smart_truncate", budget))
        if value is None or base is None:
            continue
        share = margin_share()
        rows.append(BenchRow(
            name=f"facts kept @{budget // 1000}K, smart_truncate with the default estimator "
                 f"({ESTIMATE_MARGIN:.0%} margin, no tokenizer) vs naive at the real-token budget",
            value=value, unit="%", baseline=base,
            ratio=value / base if base else None, target=margin_target(),
            met=value >= share * base))
    naive_over = _over_real(select(res, next(s.name for s in res.strategies if s.baseline)))
    smart_over = _over_real(select(res, "smart_truncate"))
    if naive_over is not None and smart_over is not None:
        rows.append(BenchRow(
            name="over budget by the exact o200k tokenizer: smart_truncate (baseline: naive "
                 "drop-oldest filling the nominal budget by the estimate)",
            value=smart_over, unit="% of runs", baseline=naive_over, target="0",
            met=smart_over == 0))
    return rows


FILL_BUDGETS = (2_000, 8_000, 32_000)
FILL_HEADLINE = 8_000
FILL_TARGET = 0.80
FILL_TOKENS = 129_000


@dataclass
class FillRun:
    """``smart_truncate`` on one tool-heavy conversation at one budget (exact counts)."""

    budget: int
    fill: float
    naive_fill: float
    over: bool
    valid: bool
    kept: bool
    """System prompt and the final question survived."""
    facts: int = 0
    naive_facts: int = 0
    """Planted values found verbatim in the result / in naive drop-oldest's (real budget)."""
    model_facts: int = 0
    """Planted values kept by ``smart_truncate`` counting with the model's counter."""


FillSet = list[tuple[list[ChatMessage], list[str]]]
"""Conversations with the values planted in them."""


def fill_sets(quick: bool) -> dict[str, FillSet]:
    """Development (the fidelity generator: its planted facts) and held-out (tool_heavy:
    the values its task requests plant) conversations."""
    from benchmarks.fidelity.tool_heavy import session

    def dev(seed: int, lang: Language, tokens: int, facts: int
            ) -> tuple[list[ChatMessage], list[str]]:
        conv = generate(seed, lang, target_tokens=tokens, n_facts=facts)
        return list(conv.messages), [f.value for f in conv.facts]

    def held(seed: int, tokens: int) -> tuple[list[ChatMessage], list[str]]:
        s = session(seed, tokens)
        return s.messages, s.planted

    if os.environ.get(SMOKE_ENV, "") not in ("", "0"):
        return {"development": [dev(1, "en", 8_000, 4)], "held-out": [held(0, 12_000)]}
    dev_seeds = (11, 12) if quick else (11, 12, 13, 14, 15, 16)
    held_seeds = range(6) if quick else range(30)
    return {
        "development": [dev(seed, lang, FILL_TOKENS, FACTS_PER_CONVERSATION)
                        for seed in dev_seeds for lang in LANGUAGES],
        "held-out": [held(seed, FILL_TOKENS) for seed in held_seeds],
    }


def _values_kept(values: Sequence[str], messages: Sequence[ChatMessage]) -> int:
    text = context_text(messages)
    return sum(find_value(v, text) for v in values)


def measure_fill(quick: bool) -> dict[str, list[FillRun]] | None:
    """Fill runs per set, or None without the exact tokenizer."""
    exact = real_counter()
    if exact is None:
        return None
    model = model_counter()
    out: dict[str, list[FillRun]] = {}
    for name, convs in fill_sets(quick).items():
        runs = []
        for conv, values in convs:
            for budget in FILL_BUDGETS:
                result = smart_truncate(conv, budget)
                naive = naive_drop_oldest(conv, budget, exact)
                tokens = exact.count_messages(result)
                runs.append(FillRun(
                    budget=budget, fill=tokens / budget,
                    naive_fill=exact.count_messages(naive) / budget, over=tokens > budget,
                    valid=check_sequence(result).valid,
                    kept=survived(conv[0], result) and survived(conv[-1], result),
                    facts=_values_kept(values, result),
                    naive_facts=_values_kept(values, naive),
                    model_facts=_values_kept(values, smart_truncate(conv, budget,
                                                                    counter=model))))
        out[name] = runs
    return out


def fill_rows(quick: bool) -> list[BenchRow]:
    sets = measure_fill(quick)
    if sets is None:
        return []
    rows = []
    share = TARGET_SHARE_OF_NAIVE["smart_truncate"]
    for name, runs in sets.items():
        for budget in FILL_BUDGETS:
            at = [r for r in runs if r.budget == budget]
            median = 100 * statistics.median(r.fill for r in at)
            head = budget == FILL_HEADLINE
            rows.append(BenchRow(
                name=f"fill @{budget // 1000}K, smart_truncate on tool-heavy ~129K "
                     f"conversations, {name} set (median, exact o200k)",
                value=median, unit="% of budget",
                baseline=100 * statistics.median(r.naive_fill for r in at),
                target=f"≥ {FILL_TARGET:.0%}" if head else "reported",
                met=median >= 100 * FILL_TARGET if head else None))
        kept, naive = sum(r.facts for r in runs), sum(r.naive_facts for r in runs)
        exact_kept = sum(r.model_facts for r in runs)
        rows += [
            BenchRow(
                name=f"planted values kept, smart_truncate with the model's counter (exact "
                     f"o200k) vs naive drop-oldest at the real-token budget, tool-heavy {name} "
                     "set (2K+8K+32K pooled)",
                value=float(exact_kept), unit="values", baseline=float(naive),
                ratio=exact_kept / naive if naive else None,
                target=f"≥ {share:g}× naive (real budget)", met=exact_kept >= share * naive),
            BenchRow(
                name=f"planted values kept, smart_truncate with the default estimator "
                     f"({ESTIMATE_MARGIN:.0%} margin, no tokenizer) vs naive drop-oldest at the "
                     f"real-token budget, tool-heavy {name} set (2K+8K+32K pooled)",
                value=float(kept), unit="values", baseline=float(naive),
                ratio=kept / naive if naive else None, target=margin_target(),
                met=kept >= margin_share() * naive),
        ]
        over = sum(r.over for r in runs)
        rows.append(BenchRow(
            name=f"over budget by the exact o200k count, smart_truncate, tool-heavy {name} set",
            value=float(over), unit=f"of {len(runs)} runs", target="0", met=over == 0,
            invariant=True))
        good = 100 * sum(r.valid and r.kept for r in runs) / len(runs)
        rows.append(BenchRow(
            name=f"valid sequence with system prompt and question kept, smart_truncate, "
                 f"tool-heavy {name} set", value=good, unit="%", target="100%",
            met=good >= 100.0, invariant=True))
    return rows + exact_counter_rows(quick)


def exact_counter_rows(quick: bool) -> list[BenchRow]:
    """``smart_truncate`` counting with the model's counter (:func:`model_counter`: the
    exact o200k tokenizer, no margin) against the naive baseline held to the same real
    budget, on the fidelity conversations: both sides count as a user of that model with
    the tokenizer installed would, so the row measures the truncation's own choices (the
    default-estimator rows pay the margin too, and carry a target scaled by it)."""
    exact = real_counter()
    model = model_counter()
    if exact is None or budget_margin(model) > 0:
        return []
    convs = conversations(quick)
    rows = []
    share = TARGET_SHARE_OF_NAIVE["smart_truncate"]
    for budget in BUDGETS:
        kept = sum(len(score_facts(c.facts, smart_truncate(list(c.messages), budget,
                                                           counter=model)).kept)
                   for c in convs)
        naive = sum(len(score_facts(c.facts, naive_drop_oldest(c.messages, budget,
                                                                exact)).kept) for c in convs)
        total = sum(len(c.facts) for c in convs)
        value, base = 100 * kept / total, 100 * naive / total
        rows.append(BenchRow(
            name=f"facts kept @{budget // 1000}K, smart_truncate with the model's counter "
                 "(exact o200k) vs naive at the real-token budget", value=value, unit="%", baseline=base,
            ratio=value / base if base else None, target=f"≥ {share:g}× naive (real budget)",
            met=value >= share * base))
    return rows


def run(quick: bool) -> list[BenchRow]:
    return rows_from(result_for(quick)) + fill_rows(quick)


def plot_data(quick: bool) -> dict[str, dict[str, object]]:
    res = result_for(quick)
    if res.skipped or not res.runs:
        return {}
    series = {s.name: [kept_share(select(res, s.name, b)) for b in BUDGETS]
              for s in res.strategies}
    return {"fidelity_facts_kept": {
        "kind": "line", "x": [float(b) for b in BUDGETS], "series": series, "logx": True,
        "title": f"Planted facts kept verbatim ({res.mode} summariser)",
        "xlabel": "budget (tokens)", "ylabel": "facts kept (%)", "ymin": 0,
    }}


# ---------------------------------------------------------------------------- markdown


def _f(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v:.{digits}f}%"


def _problems(runs: Sequence[Run]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        if r.error:
            counts["exception"] = counts.get("exception", 0) + 1
        if r.validity:
            for code in sorted(r.validity.codes):
                counts[code] = counts.get(code, 0) + 1
    return ", ".join(f"{k} ×{v}" for k, v in sorted(counts.items())) or "–"


def budget_table(res: FidelityResult, budget: int) -> str:
    kinds = list(FACT_KINDS)
    head = ("| strategy | facts kept | " + " | ".join(kinds)
            + " | tokens mean / max | within budget | system kept | query kept | valid "
              "| summariser calls | ms | problems |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in res.strategies:
        runs = select(res, s.name, budget)
        scores = [r.facts for r in _ok(runs) if r.facts is not None]
        by_kind = []
        for k in kinds:
            kept = sum(f.kept_by_kind.get(k, 0) for f in scores)
            total = sum(f.total_by_kind.get(k, 0) for f in scores)
            by_kind.append(f"{kept}/{total}" if total else "–")
        toks = [r.tokens for r in _ok(runs)]
        tok = f"{statistics.fmean(toks):,.0f} / {max(toks):,}" if toks else "–"
        within = _f(_pct(runs, attr="fits")) if s.budgeted else "n/a (no token budget)"
        calls = sum(r.llm_calls for r in runs)
        ms = statistics.median(r.seconds * 1000 for r in runs) if runs else 0.0
        name = f"**{s.name}** (baseline)" if s.baseline else s.name
        lines.append(
            f"| {name} | {_f(kept_share(runs), 1)} | " + " | ".join(by_kind)
            + f" | {tok} | {within} | {_f(_pct(runs, attr='system_kept'))} | "
              f"{_f(_pct(runs, attr='query_kept'))} | {_f(_valid_pct(runs))} | {calls} | "
              f"{ms:.1f} | {_problems(runs)} |"
        )
    return "\n".join(lines)


def language_table(res: FidelityResult) -> str:
    head = "| strategy | " + " | ".join(f"{b // 1000}K" for b in BUDGETS) + " |"
    out = []
    for lang in LANGUAGES:
        lines = [f"**{lang}**", "", head, "|" + "---|" * (len(BUDGETS) + 1)]
        for s in res.strategies:
            cells = [_f(kept_share(select(res, s.name, b, lang))) for b in BUDGETS]
            lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def report_markdown(quick: bool) -> str:
    res = result_for(quick)
    parts: list[str] = []
    if res.skipped:
        return f"**Skipped:** {res.skipped}"
    convs = res.conversations
    sizes = [c.tokens for c in convs]
    parts.append(
        f"{len(convs)} conversations ({', '.join(LANGUAGES)}; seeds "
        f"{sorted({c.seed for c in convs})}), {min(sizes):,}–{max(sizes):,} tokens (sized "
        f"and counted with {sizing_name()}, a measure fixed apart from the estimator under "
        "test: `benchmarks/fidelity/sizing.py`) and "
        f"{sum(len(c.messages) for c in convs) // len(convs)} messages on average, "
        f"{FACTS_PER_CONVERSATION} planted facts each ({', '.join(FACT_KINDS)}; constraints "
        "stated once by the user in the first tenth). Summariser: "
        + ("the configured real endpoint." if res.mode == "real endpoint" else
           "scripted and deliberately lossy (first sentence of each message; facts never "
           "sit in a first sentence), so a kept fact was kept by the strategy itself.")
        + " A fact counts only if its exact value is present as a whole token (a changed "
        "digit or path segment does not count). Percentages are means over conversations."
    )
    if res.mode == "scripted" and sum(s.name.startswith("llm_compact") for s in res.strategies) > 1:
        parts.append(
            "The four `llm_compact` hints differ only in the prompt the summariser receives; "
            "the scripted summariser ignores the prompt, so equal figures across hints are "
            "expected here. `--llm` measures how a real model follows each hint."
        )
    for budget in BUDGETS:
        parts.append(f"#### Budget {budget:,} tokens\n\n{budget_table(res, budget)}")
    parts.append("#### Facts kept by language\n\n" + language_table(res))
    return "\n\n".join(parts)


def main(argv: Sequence[str]) -> int:
    quick = "--quick" in argv
    if "--llm" in argv:
        os.environ[LLM_ENV] = "1"
    rows = run(quick)
    print_table(rows, TITLE)
    print()
    print(report_markdown(quick))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
