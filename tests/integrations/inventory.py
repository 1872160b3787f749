"""The inventory conversation the adapters' long-run tests share (LlamaIndex, Agents SDK).

Each turn asks about one shelf; the lookup tool answers with thirty rows, so a few turns
overflow the tests' small budgets and the guard must compact; the summariser always
answers the same summary.
"""

from __future__ import annotations

from ctxstack.testing import ScriptedLLM

INSTRUCTIONS = "You are a careful inventory assistant. Use the lookup tool for every question."
TURNS = 32


def question(turn: int) -> str:
    return (f"Question {turn}: what is stored under shelf S-{turn:03d}? Please check the "
            f"inventory and report the exact row values for shelf S-{turn:03d}.")


def lookup(key: str) -> str:
    """Look a shelf up in the inventory."""
    return f"{key}: " + " ".join(f"row{i}={key}-{i * 7}" for i in range(30))


def summariser() -> ScriptedLLM:
    return ScriptedLLM(handler=lambda messages, tools: (
        "The user asked about several shelves; each was looked up with the lookup tool "
        "and the row values were reported back."))
