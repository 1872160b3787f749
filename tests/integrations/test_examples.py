"""The adapter examples run offline and exit 0 (they assert their own budget)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["langchain_agent.py", "pydantic_ai_agent.py"])
def test_example_runs(name: str) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "compaction (mask)" in done.stdout or "compaction (llm)" in done.stdout
    assert "answer: All 30 warehouses checked" in done.stdout
