"""Foundation benchmark: token estimation, cached re-estimation, smart_truncate scaling.

Run: ``python benchmarks/bench_foundation.py [--quick]``. Every figure is compared with a
baseline measured in the same run:

* estimator throughput on >= 1 MB of mixed English / CJK / code text versus a
  straightforward per-character Python loop computing the same formula — the counts are
  asserted identical, the speed-up is reported (target >= 20x);
* re-estimating an unchanged 500-message, ~64K-token list (cache hits) versus estimating
  fresh copies of the same messages (target: median < 0.2 ms);
* ``smart_truncate`` of 1,000 and 10,000 messages to a 32K budget, cold (estimates not
  yet cached): the 10x larger input should take about 10x longer (linear).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

if __package__ in (None, ""):
    _root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(_root / "src"), str(_root)]

from benchmarks.common import BenchRow, median_each, median_time, print_table
from ctxstack.compaction import CompactUtils
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC
from ctxstack.tokens._counter import heuristic_text_tokens

ENGLISH = (
    "The quarterly report shows revenue of $4.2M, up 12% from last year. The team "
    "shipped version 2.3.1 on 2024-03-15 and closed 48 tickets. "
)
CJK = "東京の売上は前年比で十二パーセント増加しました。新しい版は三月十五日に公開されました。北京和上海的团队完成了四十八个任务。"
CODE = (
    "def estimate(messages: list[dict]) -> int:\n"
    "    total = 0\n"
    "    for m in messages:\n"
    "        total += len(m['content']) // 4 + 4\n"
    "    return total\n"
)


def corpus(min_chars: int, seed: int = 0) -> list[str]:
    """Texts of 200-4,000 characters mixing English, CJK and code, >= ``min_chars`` total."""
    rng = random.Random(seed)
    texts: list[str] = []
    total = 0
    while total < min_chars:
        parts = []
        size = rng.randint(200, 4000)
        length = 0
        while length < size:
            piece = rng.choice([ENGLISH, ENGLISH, CJK, CODE, "🚀✨ "])
            start = rng.randrange(len(piece))
            chunk = piece[start:] + piece[:start]
            parts.append(chunk)
            length += len(chunk)
        text = "".join(parts)[:size]
        texts.append(text)
        total += len(text)
    return texts


def naive_tokens(text: str) -> int:
    """The same formula, one character at a time (the baseline)."""
    if not text:
        return 0
    ascii_chars = 0
    other = 0
    for ch in text:
        if ord(ch) < 128:
            ascii_chars += 1
        else:
            other += 1
    tokens = int(ascii_chars / 4.0 + other / 1.5)
    return tokens if tokens > 0 else 1


def bench_estimator(quick: bool) -> list[BenchRow]:
    texts = corpus(1_100_000)
    nbytes = sum(len(t.encode()) for t in texts)
    fast_counts = [heuristic_text_tokens(t) for t in texts]
    slow_counts = [naive_tokens(t) for t in texts]
    assert fast_counts == slow_counts, "the fast estimator must give identical counts"
    repeats = 3 if quick else 7
    fast = median_time(lambda: [heuristic_text_tokens(t) for t in texts], repeats)
    slow = median_time(lambda: [naive_tokens(t) for t in texts], max(1, repeats // 2))
    mb = nbytes / 1e6
    ratio = slow / fast
    return [
        BenchRow(
            name=f"estimator throughput, {mb:.1f} MB mixed text (counts identical)",
            value=mb / fast,
            unit="MB/s",
            baseline=mb / slow,
            ratio=ratio,
            target=">= 20x per-char loop",
            met=ratio >= 20,
        )
    ]


def messages_of(n: int, tokens_each: int, seed: int = 1) -> list[ChatMessage]:
    """``n`` messages of about ``tokens_each`` tokens: user/assistant turns and tool groups."""
    rng = random.Random(seed)
    base = corpus(n * tokens_each * 3, seed)
    out: list[ChatMessage] = [ChatMessage.system("You are a helpful assistant.")]
    i = 0
    while len(out) < n:
        text = base[i % len(base)]
        i += 1
        text = text[: max(1, len(text) * (tokens_each - 4) // max(1, heuristic_text_tokens(text)))]
        kind = rng.random()
        if kind < 0.2 and len(out) + 2 <= n:
            call = ToolCall(id=f"call_{i}", name="search", arguments={"q": text[:40]})
            out.append(ChatMessage.assistant(None, tool_calls=[call]))
            out.append(ChatMessage.tool(call.id, text))
        elif len(out) % 2:
            out.append(ChatMessage.user(text))
        else:
            out.append(ChatMessage.assistant(text))
    return out


def messages_totalling(n: int, tokens: int) -> list[ChatMessage]:
    """``n`` messages whose estimate is close to ``tokens`` (one rescaling pass)."""
    msgs = messages_of(n, tokens // n)
    actual = CompactUtils.estimate_messages_tokens(msgs)
    return messages_of(n, round(tokens // n * tokens / actual))


def bench_reestimate(quick: bool) -> list[BenchRow]:
    msgs = messages_totalling(500, 64_000)
    total = CompactUtils.estimate_messages_tokens(msgs)  # fills the per-message cache
    repeats = 200 if quick else 2000
    warm = median_time(lambda: CompactUtils.estimate_messages_tokens(msgs), repeats)
    fresh = [[m.model_copy() for m in msgs] for _ in range(5 if quick else 20)]
    assert all(HEURISTIC.count_messages(f) == total for f in fresh[:1])
    cold = median_each(lambda f: HEURISTIC.count_messages(f), fresh[1:])  # type: ignore[arg-type]
    return [
        BenchRow(
            name=f"re-estimate unchanged {len(msgs)}-msg list ({total:,} tok), median",
            value=warm * 1e3,
            unit="ms",
            baseline=cold * 1e3,
            ratio=cold / warm,
            target="< 0.2 ms",
            met=warm * 1e3 < 0.2,
        )
    ]


def bench_truncate(quick: bool) -> list[BenchRow]:
    """Cold: fresh message objects each run, so estimation is part of the cost."""
    budget = 32_000
    repeats = 3 if quick else 7
    results = {}
    for n in (1_000, 10_000):
        msgs = messages_of(n, 60, seed=n)
        assert CompactUtils.estimate_messages_tokens(msgs) > budget, "must actually truncate"
        out = CompactUtils.smart_truncate(msgs, budget)
        assert CompactUtils.estimate_messages_tokens(out) <= budget
        copies = [[m.model_copy() for m in msgs] for _ in range(repeats)]
        results[n] = median_each(
            lambda c: CompactUtils.smart_truncate(c, budget), copies  # type: ignore[arg-type]
        )
    small, large = results[1_000], results[10_000]
    scaling = large / small
    return [
        BenchRow(name="smart_truncate 1,000 msgs -> 32K (cold)", value=small * 1e3, unit="ms",
                 target="reported"),
        BenchRow(name="smart_truncate 10,000 msgs -> 32K (cold)", value=large * 1e3, unit="ms",
                 baseline=small * 1e3 * 10, target="reported (baseline: 10 x the 1k time)"),
        BenchRow(name="smart_truncate time ratio 10k / 1k (linear = 10)", value=scaling,
                 unit="x", target="<= 15x (linear)", met=scaling <= 15),
    ]


def run(quick: bool) -> list[BenchRow]:
    """All foundation figures (see the module docstring)."""
    return [*bench_estimator(quick), *bench_reestimate(quick), *bench_truncate(quick)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print_table(rows, "ctxstack foundation benchmark" + (" (quick)" if args.quick else ""))
    return 0 if all(r.met is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
