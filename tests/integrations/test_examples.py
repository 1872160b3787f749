"""The adapter examples run offline and exit 0 (they assert their own budget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name: str) -> str:
    """Run ``examples/<name>``; its output (the run must succeed)."""
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", ["langchain_agent.py", "pydantic_ai_agent.py"])
def test_example_runs(name: str) -> None:
    out = _run(name)
    assert "compaction (mask)" in out or "compaction (llm)" in out
    assert "answer: All 30 warehouses checked" in out


@pytest.mark.parametrize(("name", "twelfth_turn"), [
    ("llamaindex_memory.py", "turn 12: Found: shelf 12"),
    ("openai_agents_session.py", "turn 12: Found it: shelf 12"),
])
def test_session_example_runs(name: str, twelfth_turn: str) -> None:
    """The memory/session examples summarise their long inventory conversation."""
    out = _run(name)
    assert "compaction: llm" in out
    assert twelfth_turn in out
