"""How far the token estimator is from exact tokenizers, per kind of text.

The estimator (``ctxstack.tokens.HEURISTIC``: ASCII ≈ 4 chars/token, other ≈ 1.5) is
compared with tiktoken's ``o200k_base`` (GPT-4o family) and ``cl100k_base`` (GPT-4 /
3.5) on five kinds of text:

* English prose — docstrings of Python standard-library modules (human-written English);
* CJK — Chinese and Japanese sentences from the fidelity generator's phrase book;
* code — slices of Python standard-library source;
* JSON tool output — tool results of generated conversations (large JSON documents);
* mixed — messages of generated mixed-language conversations (English, Chinese, Japanese).

It also times both (UTF-8 MB/s per text type, the ``estimator_throughput`` plot): the
heuristic's reason to exist is that it is much faster than exact tokenizing.

For each: the median and 95th-percentile relative error ``(estimate − exact) / exact``
(absolute values), and the share of samples under-estimated (the dangerous direction: an
under-estimate lets a request overflow). The baseline is the rule of thumb a user would
reach for, ``len(text) / 4``. Then the same after a calibrating counter has observed a few
calls of that kind of traffic (``ctxstack.calibration.CalibratingCounter``), when it exists.

The exact vocabularies must be available offline (see :mod:`benchmarks.vocab`); when they
are not, this module says so and returns no figures rather than inventing any.
"""

from __future__ import annotations

import importlib
import inspect
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from benchmarks.common import BenchRow, median_time, print_table
from benchmarks.fidelity import phrases
from benchmarks.fidelity.generator import generate
from benchmarks.vocab import ENCODINGS, ensure_offline
from ctxstack.tokens import HEURISTIC, TokenCounter

TITLE = "Token estimator accuracy and speed against exact tokenizers"
TEXT_TYPES = ("English prose", "CJK", "code", "JSON tool output", "mixed")
TARGET_P95 = 30.0
TARGET_SPEEDUP = 10.0
"""The heuristic exists because exact tokenizing is slow: it must stay well ahead."""
CALIBRATION_CALLS = 5
HEADLINE_ENCODING = "o200k_base"
PROSE_MODULES = ("json", "argparse", "collections", "asyncio", "logging", "textwrap",
                 "difflib", "unittest", "email", "http.client", "csv", "pathlib", "shutil",
                 "subprocess", "typing", "dataclasses", "functools", "itertools", "re", "zipfile")
CODE_MODULES = ("json.decoder", "textwrap", "difflib", "csv", "shutil", "dataclasses",
                "functools", "argparse", "pathlib", "string", "calendar", "heapq")


# ---------------------------------------------------------------------------- corpus


def _chunks(text: str, rng: random.Random, n: int, lo: int, hi: int) -> list[str]:
    """``n`` random slices of ``text`` between ``lo`` and ``hi`` characters (line-aligned)."""
    out = []
    for _ in range(n):
        size = rng.randint(lo, hi)
        start = rng.randrange(0, max(1, len(text) - size))
        start = text.rfind("\n", 0, start) + 1
        piece = text[start : start + size].strip()
        if piece:
            out.append(piece)
    return out


def corpus(n: int, seed: int = 7) -> dict[str, list[str]]:
    """``n`` samples per text type, deterministic for a seed and a Python version."""
    rng = random.Random(seed)
    docs = "\n\n".join(inspect.getdoc(importlib.import_module(m)) or "" for m in PROSE_MODULES)
    source = "\n\n".join(inspect.getsource(importlib.import_module(m)) for m in CODE_MODULES)
    cjk: list[str] = []
    for _ in range(n):
        lang: phrases.Lang = rng.choice(("zh", "ja"))
        sentences = [rng.choice(phrases.FILLER[lang]).format(
            cn=rng.choice(phrases.CODENAMES), svc=rng.choice(phrases.SERVICES),
            n=rng.randint(2, 60)) for _ in range(rng.randint(2, 12))]
        cjk.append("".join(sentences))
    convs = [generate(s, lang, target_tokens=8_000, n_facts=5)
             for s in (1, 2, 3) for lang in ("en", "zh", "mixed", "mixed")]
    tool_texts = [m.text for c in convs for m in c.messages if m.role == "tool"]
    mixed = [m.text for c in convs if c.language == "mixed"
             for m in c.messages if m.role in ("user", "assistant") and m.text]
    return {
        "English prose": _chunks(docs, rng, n, 200, 3000),
        "CJK": cjk,
        "code": _chunks(source, rng, n, 300, 4000),
        "JSON tool output": rng.sample(tool_texts, min(n, len(tool_texts))),
        "mixed": rng.sample(mixed, min(n, len(mixed))),
    }


# ---------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class ErrorStats:
    samples: int
    median_signed: float
    median_abs: float
    p95_abs: float
    under_share: float


def rel_errors(texts: Sequence[str], estimate: Callable[[str], float],
               exact: Callable[[str], int]) -> list[float]:
    out = []
    for t in texts:
        truth = exact(t)
        if truth:
            out.append((estimate(t) - truth) / truth)
    return out


def stats(errors: Sequence[float]) -> ErrorStats:
    abs_sorted = sorted(abs(e) for e in errors)
    p95 = abs_sorted[min(len(abs_sorted) - 1, int(0.95 * len(abs_sorted)))]
    return ErrorStats(
        samples=len(errors),
        median_signed=100 * statistics.median(errors),
        median_abs=100 * statistics.median(abs_sorted),
        p95_abs=100 * p95,
        under_share=100 * sum(1 for e in errors if e < 0) / len(errors),
    )


# ---------------------------------------------------------------------------- run


@dataclass
class AccuracyResult:
    available: dict[str, TokenCounter] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    heuristic: dict[tuple[str, str], ErrorStats] = field(default_factory=dict)
    chars4: dict[tuple[str, str], ErrorStats] = field(default_factory=dict)
    calibrated: dict[tuple[str, str], ErrorStats] = field(default_factory=dict)
    uncalibrated_heldout: dict[tuple[str, str], ErrorStats] = field(default_factory=dict)
    throughput: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Text type → (heuristic MB/s, exact tokenizer MB/s), UTF-8 megabytes per second."""
    samples: int = 0


_LAST: dict[bool, AccuracyResult] = {}


def exact_counters() -> tuple[dict[str, TokenCounter], dict[str, str]]:
    from ctxstack.errors import TokenizerUnavailableError
    from ctxstack.tokens import TiktokenCounter

    found: dict[str, TokenCounter] = {}
    missing: dict[str, str] = {}
    for enc in ENCODINGS:
        reason = ensure_offline(enc)
        if reason is not None:
            missing[enc] = reason
            continue
        try:
            found[enc] = TiktokenCounter(enc)
        except TokenizerUnavailableError as exc:
            missing[enc] = str(exc)
    return found, missing


def calibrated_errors(texts: Sequence[str], exact: TokenCounter) -> list[float]:
    """Errors on ``texts[CALIBRATION_CALLS:]`` after a fresh ``CalibratingCounter`` observed
    the first few as calls (heuristic estimate vs exact count)."""
    from ctxstack.calibration import CalibratingCounter

    counter = CalibratingCounter()
    for t in texts[:CALIBRATION_CALLS]:
        counter.observe(HEURISTIC.count_text(t), exact.count_text(t))
    return rel_errors(texts[CALIBRATION_CALLS:], counter.count_text, exact.count_text)


def measure(quick: bool) -> AccuracyResult:
    res = AccuracyResult()
    res.available, res.missing = exact_counters()
    if not res.available:
        return res
    smoke = os.environ.get("CTXSTACK_BENCH_SMOKE", "") not in ("", "0")  # benchmarks/run --smoke
    samples = corpus(12 if smoke else 60 if quick else 300)
    res.samples = min(len(v) for v in samples.values())
    speed_enc = HEADLINE_ENCODING if HEADLINE_ENCODING in res.available else next(
        iter(res.available))
    for kind in TEXT_TYPES:
        res.throughput[kind] = throughput(samples[kind], res.available[speed_enc],
                                          5 if quick else 15)
    for enc, counter in res.available.items():
        for kind in TEXT_TYPES:
            texts = samples[kind]
            res.heuristic[(enc, kind)] = stats(
                rel_errors(texts, HEURISTIC.count_text, counter.count_text))
            res.chars4[(enc, kind)] = stats(
                rel_errors(texts, lambda t: len(t) / 4, counter.count_text))
            res.calibrated[(enc, kind)] = stats(calibrated_errors(texts, counter))
            res.uncalibrated_heldout[(enc, kind)] = stats(rel_errors(
                texts[CALIBRATION_CALLS:], HEURISTIC.count_text, counter.count_text))
    return res


def throughput(texts: Sequence[str], exact: TokenCounter, repeats: int) -> tuple[float, float]:
    """MB/s of UTF-8 text counted by the heuristic and by ``exact`` (medians of repeats)."""
    megabytes = sum(len(t.encode()) for t in texts) / 1e6

    def heuristic() -> None:
        for t in texts:
            HEURISTIC.count_text(t)

    def exact_all() -> None:
        for t in texts:
            exact.count_text(t)

    return (megabytes / median_time(heuristic, repeats),
            megabytes / median_time(exact_all, repeats))


def result_for(quick: bool) -> AccuracyResult:
    if quick not in _LAST:
        _LAST[quick] = measure(quick)
    return _LAST[quick]


def run(quick: bool) -> list[BenchRow]:
    res = result_for(quick)
    enc = HEADLINE_ENCODING if HEADLINE_ENCODING in res.available else next(
        iter(res.available), None)
    if enc is None:
        return []
    rows = []
    for kind in TEXT_TYPES:
        h, base = res.heuristic[(enc, kind)], res.chars4[(enc, kind)]
        rows.append(BenchRow(
            name=f"p95 |error| vs {enc}, {kind}", value=h.p95_abs, unit="%",
            baseline=base.p95_abs, ratio=base.p95_abs / h.p95_abs if h.p95_abs else None,
            target=f"≤ {TARGET_P95:.0f}%", met=h.p95_abs <= TARGET_P95,
        ))
    if res.throughput:
        # The text type where the heuristic's lead over exact tokenizing is smallest.
        kind, (fast, exact) = min(res.throughput.items(), key=lambda kv: kv[1][0] / kv[1][1])
        rows.append(BenchRow(
            name=f"estimator speed vs exact tokenizer, {kind} (smallest lead)",
            value=fast, unit="MB/s", baseline=exact, ratio=fast / exact,
            target=f"≥ {TARGET_SPEEDUP:g}x faster", met=fast / exact >= TARGET_SPEEDUP,
        ))
    for kind in TEXT_TYPES:
        cal = res.calibrated.get((enc, kind))
        if cal is None:
            continue
        # Same held-out samples on both sides; the baseline is the uncalibrated estimator.
        h = res.uncalibrated_heldout[(enc, kind)]
        rows.append(BenchRow(
            name=f"median |error| after calibration ({CALIBRATION_CALLS} calls), {kind}",
            value=cal.median_abs, unit="%", baseline=h.median_abs,
            ratio=h.median_abs / cal.median_abs if cal.median_abs else None,
            target="≤ uncalibrated", met=cal.median_abs <= h.median_abs,
        ))
    return rows


def plot_data(quick: bool) -> dict[str, dict[str, object]]:
    res = result_for(quick)
    if not res.throughput:
        return {}
    enc = HEADLINE_ENCODING if HEADLINE_ENCODING in res.available else next(iter(res.available))
    return {"estimator_throughput": {
        "kind": "bar", "x": list(TEXT_TYPES), "logy": True,
        "series": {"ctxstack heuristic": [res.throughput[k][0] for k in TEXT_TYPES],
                   f"tiktoken {enc} (exact)": [res.throughput[k][1] for k in TEXT_TYPES]},
        "ylabel": "MB/s (UTF-8, log scale)",
    }}


def _table(title: str, data: dict[tuple[str, str], ErrorStats], enc: str) -> str:
    lines = [f"**{title}** ({enc})", "",
             "| text type | samples | median error | median abs error | p95 abs error "
             "| under-estimated |",
             "|---|---:|---:|---:|---:|---:|"]
    for kind in TEXT_TYPES:
        s = data.get((enc, kind))
        if s is None:
            continue
        lines.append(f"| {kind} | {s.samples} | {s.median_signed:+.1f}% | {s.median_abs:.1f}% "
                     f"| {s.p95_abs:.1f}% | {s.under_share:.0f}% |")
    return "\n".join(lines)


def report_markdown(quick: bool) -> str:
    res = result_for(quick)
    if not res.available:
        reasons = "; ".join(f"{k}: {v}" for k, v in res.missing.items())
        return ("**No exact tokenizer vocabulary is available offline, so the estimator's "
                f"accuracy was not measured** ({reasons}). Install the bench extra: "
                "`pip install -e '.[bench]'`.")
    parts = [
        "Relative error = (estimate − exact) / exact per sample; positive = over-estimate. "
        "\"under-estimated\" is the share of samples whose estimate is below the exact count "
        "(the direction that can overflow a context window). Baseline in the table above: "
        "`len(text) / 4`. Calibration: a fresh `CalibratingCounter` per text type observes "
        f"the first {CALIBRATION_CALLS} samples as calls (heuristic estimate vs exact count) "
        "and is evaluated on the remaining samples; its baseline in the table above is the "
        "uncalibrated heuristic on those same samples."
    ]
    for enc in res.available:
        parts.append(_table("ctxstack heuristic", res.heuristic, enc))
        parts.append(_table("baseline len(text)/4", res.chars4, enc))
        if any(k[0] == enc for k in res.calibrated):
            parts.append(_table(f"calibrated after {CALIBRATION_CALLS} observed calls "
                                "(evaluated on the other samples)", res.calibrated, enc))
    if res.throughput:
        lines = ["**Counting speed** (UTF-8 MB/s, median of repeated passes over the samples)",
                 "", "| text type | heuristic | exact tokenizer | heuristic is |",
                 "|---|---:|---:|---:|"]
        for kind, (h, e) in res.throughput.items():
            lines.append(f"| {kind} | {h:,.0f} | {e:,.1f} | {h / e:,.0f}x faster |")
        parts.append("\n".join(lines))
    for enc, why in res.missing.items():
        parts.append(f"**{enc} not measured:** {why}")
    return "\n\n".join(parts)


def main(argv: Sequence[str]) -> int:
    quick = "--quick" in argv
    print_table(run(quick), TITLE)
    print()
    print(report_markdown(quick))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
