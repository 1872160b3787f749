"""Number-heavy tool output: synthetic, by design, to fit and test how digits are counted.

The real corpus (:mod:`benchmarks.token_corpus`) has numbers mostly as version strings,
file sizes and modification times; agents' tool outputs are full of other shapes — ISO
timestamps, Unix times in seconds and milliseconds, prices, hexadecimal and UUID ids,
addresses, phone numbers, metrics — laid out as JSON, CSV, logs or tables. Those shapes
are imitated here from a handful of field kinds and layouts; what decides a count (how
digits, separators and letters alternate) is what is generated, the words around them
are a fixed small vocabulary.

Two disjoint splits: ``"fit"`` (``benchmarks/fit_tokens.py --digits`` fits the pairs at a
digit run's ends on it, beside the real fit texts) and ``"eval"`` (the accuracy
benchmark's "numbers in tool output" rows and ``tests/test_token_model.py``), each from
its own RNG seed — and the eval split also lays its records out in two layouts the fit
split never uses (``markdown`` and ``yaml``), so its rows show whether the weights learnt
digits rather than layouts.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from typing import Literal

Split = Literal["fit", "eval"]
_SEEDS = {"fit": 71, "eval": 73}
FIT_LAYOUTS = ("json", "json_compact", "csv", "log", "key_value")
EVAL_ONLY_LAYOUTS = ("markdown", "yaml")
_WORDS = ("ok", "error", "retry", "shipped", "pending", "auth", "billing", "ledger",
          "checkout", "worker", "eu-west", "us-east", "GET", "POST", "timeout", "done")
_FIELD_NAMES = ("id", "ts", "amount", "count", "latency_ms", "user_id", "created_at",
                "price", "status", "host", "version", "size", "trace", "phone", "ratio")

Field = Callable[[random.Random], object]


def _iso(r: random.Random) -> str:
    return (f"20{r.randint(10, 30)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
            f"T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
            + r.choice(("Z", ".000Z", "+00:00", f".{r.randint(0, 999999):06d}")))


FIELDS: dict[str, Field] = {
    "iso_time": _iso,
    "date": lambda r: f"{r.randint(2000, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "clock": lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}",
    "epoch_s": lambda r: r.randint(1_000_000_000, 1_900_000_000),
    "epoch_ms": lambda r: r.randint(1_000_000_000_000, 1_900_000_000_000),
    "small_int": lambda r: r.randint(0, 999),
    "int": lambda r: r.randint(1_000, 10 ** r.randint(4, 9)),
    "price": lambda r: round(r.uniform(0, 10 ** r.randint(1, 5)), 2),
    "float": lambda r: round(r.uniform(-1, 1) * 10 ** r.randint(0, 4), r.randint(1, 6)),
    "ratio": lambda r: f"{r.uniform(0, 100):.1f}%",
    "hex_id": lambda r: f"{r.choice(('evt_', 'req_', '0x', ''))}{r.getrandbits(32 * r.randint(1, 2)):x}",
    "sha": lambda r: f"{r.getrandbits(160):040x}"[: r.choice((7, 12, 40))],
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128))),
    "ipv4": lambda r: ".".join(str(r.randint(0, 255)) for _ in range(4)),
    "version": lambda r: f"{r.randint(0, 20)}.{r.randint(0, 40)}.{r.randint(0, 300)}",
    "phone": lambda r: f"+{r.randint(1, 99)} {r.randint(100, 999)} {r.randint(1000000, 9999999)}",
    "code_id": lambda r: f"{r.choice(('ORD', 'INV', 'TKT', 'PR'))}-{r.randint(10, 9_999_999)}",
    "duration": lambda r: f"{r.uniform(0, 5000):.{r.randint(0, 2)}f}{r.choice(('ms', 's', 'us'))}",
    "word": lambda r: r.choice(_WORDS),
}


def _record(r: random.Random, kinds: list[str], names: list[str]) -> dict[str, object]:
    return {name: FIELDS[kind](r) for name, kind in zip(names, kinds, strict=True)}


def _layout(layout: str, rows: list[dict[str, object]], r: random.Random) -> str:
    names = list(rows[0])
    if layout == "json":
        return json.dumps({"data": rows, "count": len(rows)}, indent=r.choice((2, 4)))
    if layout == "json_compact":
        return json.dumps(rows, separators=(",", ":") if r.random() < 0.5 else (", ", ": "))
    if layout == "csv":
        return "\n".join([",".join(names)] + [",".join(str(v) for v in row.values())
                                               for row in rows])
    if layout == "log":
        return "\n".join(f"{_iso(r)} {r.choice(('INFO', 'WARN', 'ERROR'))} "
                         + " ".join(f"{k}={v}" for k, v in row.items()) for row in rows)
    if layout == "key_value":
        return "\n\n".join("\n".join(f"{k}: {v}" for k, v in row.items()) for row in rows)
    if layout == "markdown":
        head = "| " + " | ".join(names) + " |\n|" + "---|" * len(names)
        return head + "\n" + "\n".join("| " + " | ".join(str(v) for v in row.values()) + " |"
                                       for row in rows)
    if layout == "yaml":
        return "\n".join("- " + "\n  ".join(f"{k}: {v}" for k, v in row.items())
                         for row in rows)
    raise ValueError(layout)


def number_texts(split: Split, n: int) -> list[str]:
    """``n`` number-heavy tool outputs of ``split`` (deterministic)."""
    r = random.Random(_SEEDS[split])
    layouts = FIT_LAYOUTS + (EVAL_ONLY_LAYOUTS if split == "eval" else ())
    out = []
    for _ in range(n):
        width = r.randint(2, 6)
        kinds = [r.choice(list(FIELDS)) for _ in range(width)]
        names = r.sample(_FIELD_NAMES, width)
        rows = [_record(r, kinds, names) for _ in range(r.randint(3, 30))]
        out.append(_layout(r.choice(layouts), rows, r))
    return out
