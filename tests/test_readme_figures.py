"""Every figure the documentation's "Headline figures" quotes agrees with
benchmarks/results/REPORT.md.

The headline figures live on the site's benchmarks page (docs/benchmarks.md; the README
links to it). The page is prose and the report is tables, so each quoted figure has a
*check* below: a pattern that finds the quote in the page and the report cell(s) it must
agree with.
A quote agrees when it equals the report's value rounded to the quote's precision (``51%``
for 51.25 %, ``≈ 0.03 ms`` for 0.0299 ms), or, for a bound ("within 1.3×", "≥ 20×"), when
the report's value satisfies it. Every number in the headline section must belong to one
check, so a figure added to the page without a check fails too.

When a figure disagrees, the failure names it, with the page's value and the report's:
regenerate the report (``benchmarks/run``) at the commit the page describes, or correct
the page.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
REPORT = ROOT / "benchmarks" / "results" / "REPORT.md"

_NUMBER = re.compile(r"[-−]?\d[\d,]*(?:\.\d+)?")


def number(text: str) -> float:
    """The first number in ``text`` (thousands separators and a Unicode minus allowed)."""
    match = _NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in {text!r}")
    return float(match.group().replace(",", "").replace("−", "-"))


def decimals(quoted: str) -> int:
    digits = quoted.replace(",", "").replace("−", "-")
    return max(0, -Decimal(digits).as_tuple().exponent)  # type: ignore[operator]


def rounds_to(quoted: str, actual: float) -> bool:
    """``quoted`` is ``actual`` rounded to the quote's precision (half a unit either way)."""
    half = 0.5 * 10 ** -decimals(quoted)
    return abs(number(quoted) - actual) <= half + 1e-12


# ---------------------------------------------------------------------------- the report


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]

    def row(self, first_cell: str) -> list[str]:
        found = [r for r in self.rows if r and r[0] == first_cell]
        if len(found) != 1:
            raise LookupError(f"{len(found)} rows {first_cell!r} in table {self.title!r}")
        return found[0]


@dataclass
class Section:
    text: str
    tables: list[Table] = field(default_factory=list)

    def _main(self) -> Table:
        main = next((t for t in self.tables if t.header[:1] == ["figure"]), None)
        if main is None:
            raise LookupError("no figures table")
        return main

    def figure(self, prefix: str) -> dict[str, str]:
        """The main table's row whose figure name starts with ``prefix`` (the one named
        exactly ``prefix`` when several do), by column."""
        found = self.figures(prefix)
        exact = [r for r in found if r["figure"] == prefix]
        if len(found) > 1 and len(exact) == 1:
            return exact[0]
        if len(found) != 1:
            names = [r["figure"] for r in found]
            raise LookupError(f"{len(found)} rows start with {prefix!r}: {names}")
        return found[0]

    def figures(self, prefix: str, *parts: str) -> list[dict[str, str]]:
        """Every main-table row whose name starts with ``prefix`` and contains each of
        ``parts`` (at least one, else LookupError)."""
        main = self._main()
        found = [dict(zip(main.header, r, strict=False)) for r in main.rows
                 if r[0].startswith(prefix) and all(p in r[0] for p in parts)]
        if not found:
            raise LookupError(f"no row starts with {prefix!r} and contains {parts}")
        return found

    def table(self, title_part: str) -> Table:
        found = [t for t in self.tables if title_part in t.title]
        if len(found) != 1:
            raise LookupError(f"{len(found)} tables titled like {title_part!r}")
        return found[0]


def _cells(line: str) -> list[str]:
    inner = line.strip().strip("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def parse_report(text: str) -> dict[str, Section]:
    """Sections by benchmark id (``agent``, ``fidelity``, …; ``""`` is the preamble)."""
    sections: dict[str, Section] = {}
    for i, chunk in enumerate(re.split(r'<a id="([^"]+)"></a>', text)):
        if i % 2 == 1:
            name = chunk
            continue
        key = "" if i == 0 else name
        section = Section(chunk)
        lines = chunk.splitlines()
        title = ""
        n = 0
        while n < len(lines):
            line = lines[n]
            if line.startswith("|") and n + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$",
                                                                         lines[n + 1]):
                header = [h.rstrip("?") for h in _cells(line)]
                rows = []
                n += 2
                while n < len(lines) and lines[n].startswith("|"):
                    rows.append(_cells(lines[n]))
                    n += 1
                section.tables.append(Table(title, header, rows))
                continue
            if line.strip():
                title = line.strip()
            n += 1
        sections[key] = section
    return sections


# ---------------------------------------------------------------------------- the checks

Actual = Callable[[dict[str, Section], tuple[str, ...]], list[tuple[str, str, float, str]]]
"""(report, page groups) -> [(figure, quoted, report value, "round" | "max" | "min" | "eq")]"""


@dataclass(frozen=True)
class Check:
    name: str
    pattern: str
    actual: Actual


def _value(report: dict[str, Section], module: str, row: str, column: str = "ctxstack") -> float:
    return number(report[module].figure(row)[column])


def _preamble(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    head = report[""]
    machine = next(t for t in head.tables if t.header[:1] == ["machine"])
    full = "full mode" in head.text
    return [
        ("full run", "1", 1.0 if full else 0.0, "eq"),
        ("cores", g[0], number(machine.row("cores")[1]), "eq"),
        ("Python", g[1], number(machine.row("Python")[1].split("CPython", 1)[1]), "round"),
    ]


def _setup(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    note = report["fidelity"].text
    convs = re.search(r"(\d+) conversations", note)
    tokens = re.search(r"([\d,]+)–([\d,]+) tokens", note)
    facts = re.search(r"(\d+) planted facts each", note)
    if not (convs and tokens and facts):
        raise LookupError("the fidelity note no longer states conversations, tokens and facts")
    low, high = number(tokens.group(1)), number(tokens.group(2))
    return [
        ("conversations", g[0], number(convs.group(1)), "eq"),
        ("conversation size (K tokens, lowest)", g[1], low / 1000, "round"),
        ("conversation size (K tokens, highest)", g[2], high / 1000, "round"),
        ("planted facts", g[3], number(facts.group(1)), "eq"),
    ]


def _facts(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    kept, budgets, naive = g[0:4], g[4:8], g[8:12]
    out = []
    for k, b, n in zip(kept, budgets, naive, strict=True):
        row = f"facts kept @{b}K, llm_compact (general)"
        out.append((f"{row}: llm_compact", k, _value(report, "fidelity", row), "round"))
        out.append((f"{row}: naive baseline", n, _value(report, "fidelity", row, "baseline"),
                    "round"))
    return out


def _guarantees(report: dict[str, Section], g: tuple[str, ...]
                ) -> list[tuple[str, str, float, str]]:
    rows = ("valid OpenAI sequence", "within budget", "system prompt kept", "pinned query kept")
    return [(f"{r} (100%)", "100", _value(report, "fidelity", r), "eq") for r in rows]


def _reestimate(report: dict[str, Section], g: tuple[str, ...]
                ) -> list[tuple[str, str, float, str]]:
    row = f"re-estimate unchanged {g[0]}-msg list"
    return [(row, g[1], _value(report, "foundation", row), "round")]


def _guard(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    row = f"check_and_compact under budget at {g[1]} msgs ({g[2]}K tokens), median"
    return [(row, g[0], _value(report, "guard", row), "round")]


KINDS = ("English prose", "code", "JSON tool output", "Chinese", "Japanese", "mixed chat")


def _token_errors(report: dict[str, Section], g: tuple[str, ...]
                  ) -> list[tuple[str, str, float, str]]:
    return [(f"p95 |error| vs o200k_base, {kind}", quoted,
             _value(report, "tokens_accuracy", f"p95 |error| vs o200k_base, {kind}"), "round")
            for kind, quoted in zip(KINDS, g, strict=True)]


def _token_speed(report: dict[str, Section], g: tuple[str, ...]
                 ) -> list[tuple[str, str, float, str]]:
    from benchmarks.bench_tokens_accuracy import TARGET_SPEEDUP

    section = report["tokens_accuracy"]
    ratios = []
    for kind in KINDS:
        rows = section.figures(f"estimator speed vs tiktoken (cold), {kind}", "pure")
        if len(rows) != 1:
            raise LookupError(f"{len(rows)} pure-Python speed rows for {kind}")
        ratios.append(number(rows[0]["ratio"]))
    return [("estimator speed / tiktoken's, slowest kind", g[0], min(ratios), "min"),
            ("estimator speed target", g[1], TARGET_SPEEDUP, "eq")]


def _fits(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    row = report["tokens_accuracy"].figure("smart_truncate results over budget by o200k count (500")
    convs = re.search(r"\((\d+) conversations", row["figure"])
    if convs is None:
        raise LookupError("the fits row no longer states its conversations")
    return [("results over budget by o200k count", g[0], number(row["ctxstack"]), "eq"),
            ("conversations", g[1], number(convs.group(1)), "eq")]


def _dbmemory(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    growth = f"with checkpoints: {g[0]}-msg load / {g[2]}-msg load"
    calls = f"summariser calls per turn, {g[4]} turns"
    return [
        (growth, g[1], _value(report, "dbmemory", growth), "max"),
        (f"{calls} (checkpoints)", g[3], _value(report, "dbmemory", calls), "round"),
        (f"{calls} (load-time only)", g[5], _value(report, "dbmemory", calls, "baseline"),
         "round"),
    ]


def _dbmemory_bill(report: dict[str, Section], g: tuple[str, ...]
                   ) -> list[tuple[str, str, float, str]]:
    kind, turns, budget, growth, truncating, whole = g
    at = f"chat {kind.lower()}, {turns} turns at {budget}K (history"
    rows = report["dbmemory"].figures(at)
    found = re.search(r"history ([\d.]+)× it", rows[0]["figure"]) if rows else None
    if found is None:
        raise LookupError("the DbMemory bill rows no longer state the history's growth")
    return [
        ("history ÷ budget", growth, number(found.group(1)), "round"),
        ("loads ÷ truncate each turn", truncating, number(report["dbmemory"].figures(
            at, "truncate each turn (writes")[0]["ratio"].rstrip("×")), "round"),
        ("loads ÷ whole history", whole, number(report["dbmemory"].figures(
            at, "loads ÷ whole history")[0]["ratio"].rstrip("×")), "round"),
    ]


def _dag(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    row = report["dag"].figure(f"{g[0]}-step plan: parallel vs critical-path bound")
    return [(f"{g[0]}-step plan / critical-path bound", g[1],
             number(row["ctxstack"]) / number(row["baseline"]), "max")]


def _load(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    streams, workers, latency, sqlite, postgres, target, lag, rss, per = g
    load = report["load"]
    where = (f"{streams} streams", f"{workers} workers")
    p99 = "turn time over the model's own time p99 (offered"
    out = [(f"{p99} {db}", quoted,
            number(load.figures(p99, *where, db)[0]["ctxstack"]), "round")
           for db, quoted in (("SQLite", sqlite), ("PostgreSQL", postgres))]
    out += [(f"target of {row['figure']}", target,
             number(row["target"].split("ms", 1)[0]), "eq") for row in load.figures(p99, *where)]
    out.append(("model latency per call", latency, number(
        load.figures("turns/s (saturated", *where)[0]["figure"].split("; ")[1]), "eq"))
    out += [(row["figure"], lag, number(row["ctxstack"]), "max")
            for row in load.figures("event-loop lag p99 (offered load", *where)]
    out += [(row["figure"], rss, number(row["ctxstack"]), "max")
            for row in load.figures(f"RSS growth per {per} turns")]
    return out


def _bill(report: dict[str, Section], g: tuple[str, ...]) -> list[tuple[str, str, float, str]]:
    from benchmarks.pricing import CACHE_READ, CACHE_WRITE

    read, write, loop, stateless, budgets, truncating = g[0], g[1], g[2:4], g[4:6], g[6:8], g[8:]
    out = [("cache read price", read, CACHE_READ, "eq"),
           ("cache write price", write, CACHE_WRITE, "eq")]
    for b, a, r, t in zip(budgets, loop, stateless, truncating, strict=True):
        at = f"held-out @ {b}K: guard"
        whole = _value(report, "bill", f"{at} billed input ÷ whole history (writes 1.25×)")
        out.append((f"{at} in a loop ÷ whole history", a, whole, "round"))
        out.append((f"{at} as a stateless caller ÷ whole history", r, _value(
            report, "bill", f"{at} as a stateless caller (refits its stored history) billed "
            "input ÷ whole history (writes 1.25×)"), "round"))
        per_truncate = _value(report, "bill",
                              f"{at} billed input ÷ truncate each call (writes 1.25×)")
        out.append((f"held-out @ {b}K: truncate each call ÷ whole history", t,
                    whole / per_truncate, "round"))
        facts = report["bill"].figure(f"held-out @ {b}K: facts kept, guard as a stateless")
        out.append((f"held-out @ {b}K: stateless facts kept = the loop's", "1",
                    float(number(facts["ctxstack"]) == number(facts["baseline"])), "eq"))
    return out


CHECKS = [
    Check("run and machine", r"full run, (\d+) cores, CPython (\d+\.\d+)", _preamble),
    Check("fidelity set-up",
          r"\((\d+) conversations of (\d+)–(\d+)K tokens in en/zh/ja/mixed, (\d+) planted",
          _setup),
    Check("facts kept",
          r"keeps (\d+)% / (\d+)% / (\d+)% / (\d+)% at (\d+)K / (\d+)K / (\d+)K / (\d+)K "
          r"tokens, against (\d+)% / (\d+)% / (\d+)% / (\d+)% for dropping", _facts),
    Check("guarantees", r"every ctxstack result is a valid OpenAI message sequence within "
          r"budget, with the system prompt and pinned question kept", _guarantees),
    Check("estimator accuracy",
          r"p95 \|error\| vs `o200k_base` (\d+\.\d)% prose, (\d+\.\d)% code, (\d+\.\d)% JSON "
          r"tool output, (\d+\.\d)% Chinese, (\d+\.\d)% Japanese, (\d+\.\d)% mixed chat",
          _token_errors),
    Check("estimator speed",
          r"counts at least (\d+\.\d)× as fast as tiktoken's `o200k_base` encode on each of "
          r"the six kinds of text \(target (\d+)×\)", _token_speed),
    Check("fits by the exact count",
          r"(\d+) of (\d+) conversations cut by `smart_truncate` at 2K–128K budgets exceed "
          r"the budget by `o200k_base`",
          _fits),
    Check("the bill under prompt caching",
          r"\(`bench_bill`: cached prefix read at (\d\.\d+)×, the rest written at "
          r"(\d\.\d+)×\): the guard in an agent loop pays (\d\.\d+)× / (\d\.\d+)× of "
          r"sending the whole history and, used by a caller that refits its stored history "
          r"at every call, (\d\.\d+)× / (\d\.\d+)× \(held-out traces, (\d+)K / (\d+)K "
          r"budgets, facts kept as in the loop\) — where truncating the history afresh at "
          r"every call pays (\d\.\d+)× / (\d\.\d+)×", _bill),
    Check("re-estimation", r"unchanged (\d+)-message list ≈ (\d+\.\d+) ms", _reestimate),
    Check("guard overhead", r"guard overhead under budget ≈ (\d+\.\d+) ms per call at (\d+) "
          r"messages \((\d+)K tokens\)", _guard),
    Check("DbMemory",
          r"a ([\d,]+)-message load within (\d+\.\d+)× of a (\d+)-message load; summariser "
          r"calls ≈ (\d+\.\d+) per turn over (\d+) turns \(load-time-only: (\d+\.\d+)\)",
          _dbmemory),
    *(Check(f"DbMemory bill, {kind}",
            rf"({kind}), a (\d+)-turn chat at (\d+)K \(its history (\d+)× the "
            r"budget\) is billed (\d\.\d+)× of truncating the history at every turn and "
            r"(\d\.\d+)× of sending it whole", _dbmemory_bill)
      for kind in ("With a summariser and checkpoints", "Without a summariser")),
    Check("DAG", r"a (\d+)-step plan runs within (\d+\.\d+)× of its critical-path bound",
          _dag),
    Check("service under load",
          r"\(`bench_load`, (\d+) streams, (\d+) workers, offered half of the measured "
          r"saturation, a stub model answering each call after (\d+) ms\): p99 of the turn "
          r"time over the model's own time (\d+) ms on SQLite and (\d+) ms on PostgreSQL "
          r"\(target (\d+) ms\), the event loop never late by more than ([\d.]+) ms at p99, "
          r"RSS growth ≤ (\d+) MB per ([\d,]+) turns", _load),
]


def headline() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("Headline figures")
    end = text.index("\n## ", start)
    return " ".join(text[start:end].split())


def agrees(quoted: str, actual: float, mode: str) -> bool:
    match mode:
        case "round":
            return rounds_to(quoted, actual)
        case "max":
            return actual <= number(quoted)
        case "min":
            return actual >= number(quoted)
        case _:
            return actual == number(quoted)


@pytest.fixture(scope="module")
def report() -> dict[str, Section]:
    return parse_report(REPORT.read_text(encoding="utf-8"))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_readme_figure_agrees_with_the_report(check: Check, report: dict[str, Section]) -> None:
    match = re.search(check.pattern, headline())
    assert match is not None, (
        f"docs/benchmarks.md 'Headline figures' no longer says what the {check.name!r} check looks for "
        f"({check.pattern!r}): update the check with the page"
    )
    try:
        figures = check.actual(report, match.groups())
    except (LookupError, KeyError, ValueError) as exc:
        pytest.fail(f"{check.name}: docs/benchmarks.md quotes {match.group(0)!r}, which REPORT.md "
                    f"does not contain ({exc})")
    wrong = [f"{name}: the page says {quoted}, REPORT.md has {actual:g} ({mode})"
             for name, quoted, actual, mode in figures if not agrees(quoted, actual, mode)]
    assert not wrong, "docs/benchmarks.md figures disagree with REPORT.md:\n" + "\n".join(wrong)


def test_every_number_in_the_headline_is_checked() -> None:
    text = headline()
    covered = [m.span() for c in CHECKS if (m := re.search(c.pattern, text))]
    loose = [
        text[max(0, m.start() - 30): m.end() + 10]
        for m in _NUMBER.finditer(text)
        if not any(a <= m.start() < b for a, b in covered)
    ]
    assert not loose, f"headline numbers no check covers: {loose}"


# ---------------------------------------------------------------------------- the checker


def test_rounding_rules() -> None:
    assert rounds_to("51", 51.25)
    assert rounds_to("33", 32.5)
    assert not rounds_to("29", -30.3 + 60)  # 29.7 is 30, not 29
    assert rounds_to("-30", -30.3)
    assert not rounds_to("-29", -30.3)
    assert rounds_to("0.03", 0.0299)
    assert not rounds_to("0.02", 0.0299)
    assert agrees("1.3", 1.08, "max")
    assert not agrees("1.02", 1.03, "max")
    assert agrees("20", 21.05, "min")


def test_the_parser_reads_figures_and_titled_tables() -> None:
    text = (
        "Command: `benchmarks/run` — full mode\n\n| machine | |\n|---|---|\n| cores | 2 logical |\n"
        '\n<a id="x"></a>\n\n## x\n\n| figure | ctxstack | baseline | ratio | target | met? |\n'
        "|---|---:|---:|---:|---|:---:|\n| a \\| b, 3 msgs | 1,234 ms | 2.5 ms | 2.00× | – | yes |\n"
        "\n**detail** (enc)\n\n| kind | median error |\n|---|---:|\n| JSON | −30.3% |\n"
    )
    parsed = parse_report(text)
    assert parsed[""].tables[0].row("cores") == ["cores", "2 logical"]
    row = parsed["x"].figure("a | b")
    assert number(row["ctxstack"]) == 1234.0
    assert row["met"] == "yes"
    assert number(parsed["x"].table("**detail**").row("JSON")[1]) == -30.3
    with pytest.raises(LookupError):
        parsed["x"].figure("missing")
