"""The client guides' offline command sequences run as written and show what they say.

Each test runs exactly the ``bash`` and ``python`` blocks of one guide's "Try it offline"
section (:func:`tests.guide_support.run_section`: a real ``ctxstack stub-llm``, a real
``ctxstack proxy``, the official client libraries) and checks the output for what the
guide promises: the answers, the ``x-ctxstack-compaction`` header of a compacted request,
the shape of ``/ctxstack/stats`` (``by_model[wire][model]``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.guide_support import blocks, guide, run_section, script, section_in, shown

NONE = r"method=none; original=1; kept=1; summarized=0"


def compactions(out: str) -> list[tuple[str, int, int, int]]:
    """Every ``x-ctxstack-compaction`` value printed, as (method, original, kept, summarized)."""
    return [(m, int(o), int(k), int(s)) for m, o, k, s in re.findall(
        r"^method=(\w+); original=(\d+); kept=(\d+); summarized=(\d+)", out, re.MULTILINE)]


def summarised_then_extended(out: str, original: int) -> int:
    """Assert the run's long conversation (``original`` messages) was summarised once
    (``method=llm``) and the next turn, two messages longer, extended that same view
    (``method=checkpoint``, the same summary); the messages then forwarded."""
    seen = compactions(out)
    (llm,) = [c for c in seen if c[0] == "llm"]
    (checkpoint,) = [c for c in seen if c[0] == "checkpoint"]
    assert llm[1] == original, out
    assert llm[2] < original, out
    assert checkpoint[1:] == (original + 2, llm[2] + 2, llm[3]), out
    return llm[2]


def by_model_lines(out: str) -> dict[tuple[str, str], dict[str, int]]:
    """The guide's ``WIRE MODEL name: N …`` lines, by (wire, model)."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for wire, model, rest in re.findall(
            r"^(chat|responses|anthropic) (\S+) (\w+: \d+.*)$", out, re.MULTILINE):
        found[(wire, model)] = {k: int(v) for k, v in re.findall(r"(\w+): (\d+)", rest)}
    return found


def test_a_section_runs_as_one_shell_with_one_python_session_per_run_of_blocks() -> None:
    text = ("# G\n## Try it offline\nStart:\n```bash\nctxstack proxy --port 8787 &\n```\n"
            "```python\nx = 18787\n```\nthen\n```python\nprint(x, 8001)\n```\n"
            "```text\n18787 8001\n```\n## Later\n```bash\nnot run\n```\n")
    offline = section_in(text)
    assert [lang for lang, _ in blocks(offline)] == ["bash", "python", "python", "text"]
    out = script(blocks(offline, "bash", "python"), {"8001": "1", "8787": "2"})
    assert "ctxstack proxy --port 2 &" in out
    # consecutive Python blocks are one session; only whole port numbers are replaced
    assert out.count("python - <<'PY'") == 1
    assert "x = 18787\nprint(x, 1)\nPY" in out
    assert "not run" not in out


def test_the_openai_sdk_guide(tmp_path: Path) -> None:
    out = run_section(guide("openai-sdk"), tmp_path)
    shown(guide("openai-sdk"), out)
    # the short chat goes out as sent
    assert compactions(out)[0] == ("none", 1, 1, 0), out
    assert "You said: Hello through the proxy" in out
    # the long conversation: summarised once, then the session's view reused
    summarised_then_extended(out, 162)
    assert "| You said: When does #A-1042 ship?" in out
    assert "| You said: And the growth?" in out
    assert "You said: Stream it" in out
    # Responses: create, a previous_response_id chain, a stream, the WebSocket
    for answer in ("Hello, Responses", "And once more", "Stream a response",
                   "Over the WebSocket"):
        assert f"You said: {answer}" in out, answer
    # the stats: compactions by method, usage by_model[wire][model]
    assert re.search(r"\{'none': \d+, 'checkpoint': 1, 'llm': 1, 'truncate': 0\}", out), out
    models = by_model_lines(out)
    assert set(models) == {("chat", "gpt-4o"), ("responses", "gpt-4o")}, out
    assert models[("chat", "gpt-4o")]["answers"] == 3  # the stream reported no usage
    assert models[("responses", "gpt-4o")]["answers"] == 4
    assert all(m["input_tokens"] > 0 for m in models.values())


def test_the_anthropic_sdk_guide(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    out = run_section(guide("anthropic-sdk"), tmp_path)
    shown(guide("anthropic-sdk"), out)
    assert compactions(out)[0] == ("none", 1, 1, 0), out
    assert "You said: Hello through the proxy" in out
    # over budget: summarised once, then the same view extended by the two new messages
    kept = summarised_then_extended(out, 161)
    # what reached the upstream: system and the client's tool byte for byte (their
    # cache_control marks kept), the recall tool added, the messages fitted
    assert "system kept: True" in out
    assert "tools: ['lookup_order', 'ctxstack_recall'] | lookup_order kept: True" in out
    assert f"messages: 161 -> {kept}" in out
    assert "You said: From which warehouse?" in out
    (count,) = re.findall(r"^count_tokens: (\d+)$", out, re.MULTILINE)
    assert 0 < int(count) <= 4000  # the budget: 5000 - 1000
    assert "{'requests': 3, 'forwarded': 3, 'cache_read_tokens': 0, 'recall_rounds': 0}" in out
    assert "summaries written: 1" in out


def test_the_langchain_guide(tmp_path: Path) -> None:
    pytest.importorskip("langchain_openai")
    pytest.importorskip("langchain_anthropic")
    out = run_section(guide("langchain"), tmp_path)
    shown(guide("langchain"), out)
    seen = compactions(out)
    assert seen[0] == ("none", 1, 1, 0), out
    # ChatOpenAI's long history was summarised by the proxy, not sent whole
    assert seen[1][:2] == ("llm", 162), out
    assert seen[1][2] < 162, out
    assert out.count("You said: When does #A-1042 ship?") == 2  # ChatOpenAI, ChatAnthropic
    for answer in ("Stream it", "Hello, Responses", "Stream it, Claude"):
        assert f"You said: {answer}\n" in out, answer
    # the long history on the Anthropic wire was compacted too: two summaries in all
    assert re.search(r"\{'none': \d+, 'checkpoint': 0, 'llm': 2, 'truncate': 0\}", out), out
    models = by_model_lines(out)
    assert set(models) == {("chat", "gpt-4o"), ("responses", "gpt-4o"),
                           ("anthropic", "claude-sonnet-4-5")}, out
    assert models[("anthropic", "claude-sonnet-4-5")]["answers"] == 2
    assert models[("anthropic", "claude-sonnet-4-5")]["input_tokens"] <= 2 * 4000
