"""No regular expression in ``src/`` can be stalled by its input (issue 30, item 1).

Every pattern ctxstack compiles meets model output, user input or upstream bodies somewhere,
so each must run in linear time. The test finds them all — the compiled patterns in every
module's globals, class attributes and module-level containers, plus every literal pattern
passed to a ``re`` function anywhere in the source (an AST scan, so a pattern built inside
a function is not missed) — and feeds each adversarial families built from the pattern's own
structure: for every repeat in it, a witness of the pattern with that repeat's body run out
to N characters (whole, without what follows, followed by junk, and as a repeated
near-miss), and a run of every character the pattern names. Each family is timed at 10,000
and 100,000 characters; a linear scan grows ~10x, a quadratic one ~100x (a growth over 30x
is confirmed at 200,000: ~2x more when linear, ~4x when quadratic). The measurement is
robust to a noisy shared machine: cheap cases are screened out by an absolute bound, the
rest repeated and the minimum taken.

A pattern whose input is bounded by construction (a single short token) is listed in
``BOUNDED`` with the bound and the reason, and is timed at that bound instead.
"""

from __future__ import annotations

import ast
import gc
import importlib
import pkgutil
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxstack.compaction import _facts as facts

SRC = Path(__file__).resolve().parent.parent / "src" / "ctxstack"
_RE_FUNCS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "split",
             "sub", "subn"}

# Patterns only ever applied, with ``fullmatch``, to one token of bounded length
# (pattern text → (bound, why)); timed at that bound.
BOUNDED: dict[str, tuple[int, str]] = {}
for _pattern in [*(k[3] for k in facts._KINDS), *facts._CLASSIFIERS.values()]:
    BOUNDED[_pattern.pattern] = (facts.MAX_FACT_CHARS,
                                 "fact classification: one candidate token (facts.classify)")

_SCREEN_SECONDS = 0.004  # a linear scan of 10K chars is far below this
_SLOW_AT_1K = 0.05  # a cubic pattern: stop before the 10K run takes hours
_SLOW_AT_10K = 0.25  # super-linear beyond doubt: stop before the 100K run
_MAX_RATIO = 30.0  # linear ~10, quadratic ~100
_SLOW_AT_100K = 1.0  # 10 µs a character: super-linear, whatever the ratios
_MAX_DOUBLING = 3.0  # 100K -> 200K: linear ~2, quadratic ~4
_FLOOR_100K = 0.02  # below this at 100K nothing is a stall, whatever the ratio

sre: Any = re._parser  # type: ignore[attr-defined]
C: Any = re._constants  # type: ignore[attr-defined]

_POOL = [" ", "a", "1", "x", "Z", "#", ".", ",", "-", ":", "*", "~", "<", ">", "(", ")", "[",
         "]", "\n", "\t", "\"", "'", "/", "\\", "_", "=", "é", "中", "日", "‹", "\x00", "!", "+"]
_CATEGORY_SAMPLES = {
    "CATEGORY_DIGIT": ["1", "9"], "CATEGORY_NOT_DIGIT": ["a", " "],
    "CATEGORY_SPACE": [" ", "\t", "\n"], "CATEGORY_NOT_SPACE": ["x", "1"],
    "CATEGORY_WORD": ["a", "1", "_"], "CATEGORY_NOT_WORD": [" ", "-"],
    "CATEGORY_LINEBREAK": ["\n"], "CATEGORY_NOT_LINEBREAK": ["a"],
}
_MARK = "\uf8ff"


def _category_samples(cat: Any) -> list[str]:
    name = str(cat).replace("UNI_", "").replace("LOC_", "")
    return _CATEGORY_SAMPLES.get(name, ["a"])


def _in_set(items: list[Any], ch: str) -> bool:
    """Whether ``ch`` is in a parsed character set (flags ignored: samples only)."""
    negate = False
    hit = False
    code = ord(ch)
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif ((op is C.LITERAL and av == code)
              or (op is C.RANGE and av[0] <= code <= av[1])
              or (op is C.CATEGORY and re.fullmatch(_category_regex(av), ch))):
            hit = True
    return hit != negate


def _category_regex(cat: Any) -> str:
    name = str(cat).replace("UNI_", "").replace("LOC_", "")
    return {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
            "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W",
            "CATEGORY_LINEBREAK": r"\n", "CATEGORY_NOT_LINEBREAK": r"[^\n]"}.get(name, ".")


def _set_samples(items: list[Any]) -> list[str]:
    """A few characters in the set: its literals, range ends and category samples."""
    candidates: list[str] = []
    for op, av in items:
        if op is C.LITERAL:
            candidates.append(chr(av))
        elif op is C.RANGE:
            candidates += [chr(av[0]), chr(av[1])]
        elif op is C.CATEGORY:
            candidates += _category_samples(av)
    candidates += _POOL
    out: list[str] = []
    for ch in candidates:
        if ch not in out and _in_set(items, ch):
            out.append(ch)
        if len(out) == 3:
            break
    return out or ["a"]


def _repeats(p: Any) -> Iterator[Any]:
    """Every repeated subpattern in a parsed pattern (with and without ancestors)."""
    for op, av in p:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            if av[1] > 1:
                yield av[2]
            yield from _repeats(av[2])
        elif op is C.SUBPATTERN:
            yield from _repeats(av[3])
        elif op is C.ATOMIC_GROUP:
            yield from _repeats(av)
        elif op is C.BRANCH:
            for item in av[1]:
                yield from _repeats(item)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            yield from _repeats(av[1])
        elif op is C.GROUPREF_EXISTS:
            yield from _repeats(av[1])
            if av[2] is not None:
                yield from _repeats(av[2])


def _contains(p: Any, target: Any) -> bool:
    return p is target or any(sub is target for sub in _repeats(p))


def _witness(p: Any, target: Any, pick: int, groups: dict[int, str]) -> str:
    """A string the pattern (roughly) matches; ``target``'s body is wrapped in marks.

    ``pick`` chooses among a set's sample characters at the target."""
    out: list[str] = []
    for op, av in p:
        if op is C.LITERAL:
            out.append(chr(av))
        elif op is C.NOT_LITERAL:
            out.append(next(c for c in _POOL if ord(c) != av))
        elif op is C.ANY:
            out.append("a")
        elif op is C.IN:
            samples = _set_samples(av)
            out.append(samples[min(pick, len(samples) - 1)] if pick >= 0 else samples[0])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            low, _high, sub = av
            if sub is target:
                out.append(_MARK + _witness(sub, None, pick, groups) + _MARK)
            else:
                inner_pick = pick if _contains(sub, target) else -1
                body = _witness(sub, target, inner_pick, groups)
                out.append(body * max(low, 1 if _contains(sub, target) else 0))
        elif op is C.SUBPATTERN:
            text = _witness(av[3], target, pick, groups)
            if av[0]:
                groups[av[0]] = text
            out.append(text)
        elif op is C.ATOMIC_GROUP:
            out.append(_witness(av, target, pick, groups))
        elif op is C.BRANCH:
            items = av[1]
            chosen = next((item for item in items if _contains(item, target)), items[0])
            out.append(_witness(chosen, target, pick, groups))
        elif op is C.GROUPREF:
            out.append(groups.get(av, ""))
        elif op is C.GROUPREF_EXISTS:
            out.append(_witness(av[1], target, pick, groups))
        # AT, ASSERT, ASSERT_NOT: zero-width, nothing to write
    return "".join(out)


def _literal_chars(p: Any) -> set[str]:
    chars: set[str] = set()
    for op, av in p:
        if op is C.LITERAL:
            chars.add(chr(av))
        elif op is C.IN:
            chars.update(_set_samples(av))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            chars |= _literal_chars(av[2])
        elif op is C.SUBPATTERN:
            chars |= _literal_chars(av[3])
        elif op is C.ATOMIC_GROUP:
            chars |= _literal_chars(av)
        elif op is C.BRANCH:
            for item in av[1]:
                chars |= _literal_chars(item)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            chars |= _literal_chars(av[1])
    return chars


def families(pattern: re.Pattern[str]) -> list[Callable[[int], str]]:
    """Adversarial input builders (length → text) for one pattern."""
    parsed = sre.parse(pattern.pattern, pattern.flags)
    out: dict[tuple[str, str, str, str], Callable[[int], str]] = {}

    def add(kind: str, before: str, unit: str, after: str) -> None:
        if not unit:
            return
        key = (kind, before, unit, after)
        if kind == "run":
            out[key] = lambda n: (before + unit * (n // len(unit) + 1))[:n] + after
        else:  # a repeated near-miss: the whole witness again and again
            whole = before + unit + after
            out[key] = lambda n: (whole * (n // len(whole) + 1))[:n]

    for ch in sorted(_literal_chars(parsed)):
        add("run", "", ch, "")
        add("run", "", ch, "\x00")
    for target in _repeats(parsed):
        for pick in range(3):
            text = _witness(parsed, target, pick, {})
            if text.count(_MARK) < 2:
                continue
            before, unit, after = text.split(_MARK, 2)
            after = after.replace(_MARK, "")
            add("run", before, unit, after)
            add("run", before, unit, "")
            add("run", before, unit, after + "\x00")
            add("run", before, unit, after[:-1])
            add("run", "", unit, after)
            add("near", before, unit, after[:-1] if after else "\x00")
            add("near", before, unit * 3, "")
    return list(out.values())


def _timed(pattern: re.Pattern[str], text: str, repeat: int, *, scan: bool = True) -> float:
    """The best of ``repeat`` runs: a scan for every match (what ``search``, ``findall``,
    ``sub`` and ``split`` cost at worst) and a ``match``; or, with ``scan=False``, one
    ``fullmatch`` (how the bounded patterns are used). The collector is off meanwhile: a
    pattern matching everywhere makes 100K match objects, and the collections they set off
    walk the whole heap (noise, not the pattern's cost)."""
    best = float("inf")
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            if scan:
                for _match in pattern.finditer(text):
                    pass
                pattern.match(text)
            else:
                pattern.fullmatch(text)
            best = min(best, time.perf_counter() - start)
    finally:
        if collecting:
            gc.enable()
    return best


def super_linear(pattern: re.Pattern[str]) -> str | None:
    """A description of the first family on which ``pattern`` grows super-linearly."""
    for build in families(pattern):
        t_tiny = _timed(pattern, build(1_000), 1)
        if t_tiny > _SLOW_AT_1K:  # once more: a busy machine, or really slow?
            t_tiny = _timed(pattern, build(1_000), 3)
        if t_tiny > _SLOW_AT_1K:  # a linear scan of 1K chars takes microseconds
            return f"{t_tiny:.2f}s at 1K chars already, on {build(1_000)[:40]!r}..."
        small = build(10_000)
        if _timed(pattern, small, 1) < _SCREEN_SECONDS:
            continue
        t_small = _timed(pattern, small, 3)
        if t_small > _SLOW_AT_10K:
            return f"{t_small:.2f}s at 10K chars on {small[:40]!r}..."
        if t_small < _SCREEN_SECONDS:
            continue
        large = build(100_000)
        t_large = _timed(pattern, large, 1)
        if t_large > _FLOOR_100K and t_large / t_small > _MAX_RATIO:
            t_large = _timed(pattern, large, 3)
            t_small = _timed(pattern, small, 7)
            if t_large > _FLOOR_100K and t_large / t_small > _MAX_RATIO:
                # Confirm at 200K: doubling costs ~2x when linear (a 10K text fits the CPU's
                # caches and a 100K one may not, which alone can look like x20-x30), ~4x
                # when quadratic.
                slow = t_large > _SLOW_AT_100K  # no linear scan is that slow: no need
                t_double = 0.0 if slow else _timed(pattern, build(200_000), 2)
                if slow or t_double / t_large > _MAX_DOUBLING:
                    return (f"{t_small * 1000:.1f} ms at 10K, {t_large * 1000:.1f} ms at 100K "
                            f"(x{t_large / t_small:.0f}), {t_double * 1000:.1f} ms at 200K "
                            f"on {small[:40]!r}...")
    return None


def _modules() -> list[Any]:
    import ctxstack

    names = ["ctxstack"]
    for info in pkgutil.walk_packages(ctxstack.__path__, "ctxstack."):
        if info.name == "ctxstack.store.migrations.env":
            continue  # Alembic's entry script: runs only inside Alembic's context
        names.append(info.name)
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError as exc:  # an optional dependency missing: say so, loudly
            raise AssertionError(f"cannot import {name} to scan its patterns: {exc}") from exc
    return modules


def _collect(value: Any, found: dict[str, re.Pattern[str]], depth: int = 0) -> None:
    if isinstance(value, re.Pattern):
        if isinstance(value.pattern, str):
            found.setdefault(value.pattern, value)
        else:
            found.setdefault(value.pattern.decode("latin-1"), re.compile(
                value.pattern.decode("latin-1"), value.flags & ~re.UNICODE & ~re.ASCII))
    elif depth < 3 and isinstance(value, (tuple, list, set, frozenset)):
        for item in value:
            _collect(item, found, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            _collect(item, found, depth + 1)


def _source_patterns() -> tuple[set[str], list[str]]:
    """(literal patterns passed to ``re`` functions, call sites with computed patterns)."""
    literal: set[str] = set()
    computed: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in _RE_FUNCS and node.args):
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    literal.add(arg.value)
                else:
                    computed.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return literal, computed


def all_patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for module in _modules():
        for value in vars(module).values():
            _collect(value, found)
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attr in vars(value).values():
                    _collect(attr, found)
    literal, _computed = _source_patterns()
    for text in literal:
        if text not in found:
            found[text] = re.compile(text)
    return found


_ALL = all_patterns()


def test_the_scan_finds_the_patterns_it_must() -> None:
    from ctxstack.compaction import _working_summary as working_summary
    from ctxstack.proxy import forwarding

    assert len(_ALL) > 50
    for pattern in (working_summary._WORDS, facts._SCAN, *working_summary._CLOSED_PATTERNS):
        assert pattern.pattern in _ALL
    assert any("\\d" in p for p in _ALL)
    assert vars(forwarding)  # imported: the proxy's patterns are in the scan
    # Computed patterns are only compiled at module level (so the globals scan sees them)
    _literal, computed = _source_patterns()
    module_level: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for stmt in tree.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Call) and not isinstance(
                        stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    module_level.add(f"{path.relative_to(SRC)}:{sub.lineno}")
    # token_scripts builds its patterns in a function called once at import, for the globals
    allowed_in_functions = {"tokens/_scripts.py"}
    stray = [site for site in computed if site not in module_level
             and site.split(":")[0] not in allowed_in_functions]
    assert stray == [], (
        "a pattern built from a computed string inside a function: the scan cannot see "
        "it; build it at module level (or list the module here with how it is covered)")


def test_the_families_reach_the_known_stalls() -> None:
    """The generator builds the inputs that stalled the old patterns (a self-check)."""
    cubic = re.compile(r"^\s{0,3}#{1,6}\s*(?P<name>.+?)\s*#*\s*$")
    assert super_linear(cubic) is not None
    tags = re.compile(r"<[^>]*>")
    assert super_linear(tags) is not None
    assert super_linear(re.compile(r"[a-z]+")) is None


@pytest.mark.parametrize("text", sorted(_ALL), ids=lambda t: t[:40])
def test_pattern_runs_in_linear_time(text: str) -> None:
    pattern = _ALL[text]
    if text in BOUNDED:
        bound, _why = BOUNDED[text]
        for build in families(pattern):
            text_at_bound = build(bound)
            if _timed(pattern, text_at_bound, 1, scan=False) > 0.01:
                assert _timed(pattern, text_at_bound, 3, scan=False) < 0.01, text_at_bound[:40]
        return
    problem = super_linear(pattern)
    assert problem is None, f"{text!r} is super-linear: {problem}"
