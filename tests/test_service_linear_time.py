"""No user text can freeze the server's event loop (issue 15, failure 3).

Every regular expression in ``ctxstack.server`` is listed here with the reason it is
safe; the test finds the patterns in the source, so a new one fails until it is added
(and fed the adversarial inputs). Each pattern, the arithmetic finder, the evaluator and
the demo model's handler then run on 100,000-character adversarial strings in a
subprocess: a super-linear one (the old finder was cubic: 2,000 digits took 66 s) cannot
finish within the generous bound, a linear one takes well under a second.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.service_support import clean_env

SERVER = Path(__file__).resolve().parent.parent / "src" / "ctxstack" / "server"
_RE_FUNCS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "split", "sub"}

# Every pattern the server applies (to user text, model text or error text).
KNOWN = {
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]",  # one char class
    r"-?\d+(?:[.,]\d+)*",  # unambiguous: each separator needs digits after it
    r"\n\n(?=[A-Z][^\n]{0,80}:\n)",  # bounded look-ahead
    r"Context: (\d+) earlier messages; summary: (yes|no)",  # literal prefix
    r"\w+",
    r"[a-zA-Z][a-zA-Z0-9+.-]{0,20}://[^\s'\"]+",  # bounded scheme, then one class
}

_PROBE = r'''
import re, sys, time
from ctxstack.agent._demo_tools import CalculationError, evaluate
from ctxstack.messages._model import ChatMessage
from ctxstack.server.demo_model import DemoHandler
from ctxstack.server.failures import scrub
from ctxstack.server.tools import find_arithmetic, text_stats

patterns = [re.compile(p) for p in sys.argv[1:]]
N = 100_000
inputs = [
    "1" * N, "1 " * (N // 2), "1." * (N // 2), "1+" * (N // 2), "(1" * (N // 2),
    "1," * (N // 2), "-1" * (N // 2), "\n\nA" + "a" * N, "\n\n" * (N // 2),
    "Context: " + "1" * N, "http://" * (N // 7), "a" * N, "1 + " * (N // 4) + "x",
    "((((" * (N // 4), "9" * (N - 2) + "*x", "1" * (N // 2) + "+" + " " * (N // 2),
]
for text in inputs:
    for pattern in patterns:
        pattern.search(text)
        pattern.findall(text)
        pattern.split(text)
        pattern.sub("", text)
    find_arithmetic(text)
    text_stats(text)
    scrub(text)
    try:
        evaluate(text[:500])
    except CalculationError:
        pass
    handler = DemoHandler()
    handler([ChatMessage.user(text)], [{"type": "function", "function": {"name": "calculate"}}])
    handler([ChatMessage.user(text)], None)
print("ok", len(inputs) * len(patterns))
'''


def _patterns_in_server() -> set[str]:
    found: set[str] = set()
    for path in sorted(SERVER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in _RE_FUNCS and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
    return found


def test_every_server_regex_is_listed_here() -> None:
    found = _patterns_in_server()
    assert found, "the scan found no pattern at all: is SERVER right?"
    assert found - KNOWN == set(), (
        "a new regular expression in ctxstack.server: add it to KNOWN with the reason it "
        "runs in linear time")


def test_adversarial_100k_inputs_finish_in_linear_time() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, *sorted(KNOWN)], env=clean_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


def test_the_arithmetic_finder_still_finds_arithmetic() -> None:
    from ctxstack.server.tools import find_arithmetic

    assert find_arithmetic("What is 6*7?") == "6*7"
    assert find_arithmetic("compute (17 + 25) * 3 please") == "(17 + 25) * 3"
    assert find_arithmetic("2**10 is?") == "2**10"
    assert find_arithmetic("1.5^2 and 3") == "1.5^2"
    assert find_arithmetic("no numbers here") is None
    assert find_arithmetic("version 1.2.3") is None
    assert find_arithmetic("1" * 1200 + "+" + "2" * 1200) == "1" * 1200 + "+" + "2" * 1200


_FACTS_PROBE = r'''
import re, sys
from ctxstack.compaction import _facts as facts

patterns = [p for p in vars(facts).values() if isinstance(p, re.Pattern)]
assert len(patterns) >= 5, "the scan found too few of the extractor's patterns"
assert facts._SCAN in patterns and facts._QUOTE in patterns
N = 100_000
units = ["1", "a", "a1", "1 ", "1.", "1,", "日", "1日", "x1日", '"a ', '"', "March 1 ",
         "5 March ", "1 kg ", "€1", "「", "https:/", "a@", "ORD-", "v1.", "-1", "#1", "/",
         "1,", "1a,", "Mar. ", "Sept. 1", "March 1st-", "1 kg-", "1年a"]
inputs = [(u * (N // len(u) + 1))[:N] for u in units]
inputs += ["日" + "1" * (N - 1), "1" * (N - 1) + "日", "a" * (N - 1) + "1", "M" + "1" * (N - 1),
           "1" + "," * (N - 2) + "a", "1 kg-" + "a" * (N - 6) + "1", "May 1st-" + "a" * (N - 9) + "1",
           "a" * (N - 1) + " ", "1 " + "a " * (N // 2 - 1)]
for text in inputs:
    for pattern in patterns:
        subject = text.encode() if isinstance(pattern.pattern, bytes) else text
        pattern.findall(subject)
        pattern.search(subject)
    # Classification patterns only ever see one token of at most MAX_FACT_CHARS.
    facts.classify(text[: facts.MAX_FACT_CHARS])
    facts.extract_candidates(text)
print("ok", len(patterns) * len(inputs))
'''


def test_every_fact_extractor_regex_is_linear_on_adversarial_100k_inputs() -> None:
    """The fact extractor runs over every compacted message (user text and tool output):
    each of its module-level patterns (the scans over whole texts) and the whole extractor
    on 100,000-character adversarial strings (a quadratic one cannot finish within the
    generous bound); the classification patterns see single tokens of at most
    ``MAX_FACT_CHARS``."""
    # Linear: a few seconds. The extractor before its CJK scan was fixed took ~2 minutes
    # here (re-reading a 100,000-digit run from every digit), hence the bound.
    done = subprocess.run([sys.executable, "-c", _FACTS_PROBE], env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")
