"""Hint prompts, scratchpad stripping, and the merge of react_iteration working summaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.compaction._prompts import (
    HINTS,
    LANGUAGE_INSTRUCTION,
    check_hint,
    compaction_prompt,
    finalize_summary,
    strip_scratchpad,
)
from ctxstack.compaction._working_summary import SECTIONS, closed_core, parse_summary, words
from ctxstack.errors import ConfigError

# ---------------------------------------------------------------------------- prompts


def test_every_hint_has_its_own_prompt_ending_with_the_language_instruction() -> None:
    prompts = {hint: compaction_prompt(hint) for hint in HINTS}
    assert len(set(prompts.values())) == len(HINTS)
    for prompt in prompts.values():
        assert prompt.rstrip().endswith(LANGUAGE_INSTRUCTION)
        assert "verbatim" in prompt  # exact values are kept by every hint


@pytest.mark.parametrize(
    ("hint", "keeps", "drops"),
    [
        ("react_iteration", ["## Goal", "## Key data", "## Pending", "## Next step", "(done)"],
         ["failed retries", "verbose tool output"]),
        ("planner_input", ["intent", "constraint", "decisions"],
         ["greetings", "tool-call mechanics"]),
        ("step_dependency", ["numbers", "conclusions"], ["reasoning process", "failed attempts"]),
        ("general", ["facts", "decisions", "tool results"], ["greetings", "filler"]),
    ],
)
def test_each_prompt_says_what_it_keeps_and_drops(
    hint: str, keeps: list[str], drops: list[str]
) -> None:
    prompt = compaction_prompt(hint).lower()
    for phrase in keeps + drops:
        assert phrase.lower() in prompt, (hint, phrase)


def test_custom_prompt_replaces_the_hint_text_but_keeps_the_language_instruction() -> None:
    prompt = compaction_prompt("general", custom="Summarise as a haiku.")
    assert prompt.startswith("Summarise as a haiku.")
    assert prompt.endswith(LANGUAGE_INSTRUCTION)
    assert "greetings" not in prompt


def test_unknown_hint_is_a_config_error_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown hint 'react'.*react_iteration"):
        check_hint("react")
    with pytest.raises(ConfigError, match="unknown hint"):
        compaction_prompt("nope")
    with pytest.raises(ConfigError, match="unknown hint"):
        compaction_prompt("nope", custom="anything")
    with pytest.raises(ConfigError, match="unknown hint"):
        finalize_summary("nope", None, "text")


def test_empty_custom_prompt_is_refused() -> None:
    with pytest.raises(ConfigError, match="must not be empty"):
        compaction_prompt("general", custom="   ")


# ---------------------------------------------------------------------------- scratchpad


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("<think>let me see</think>The summary.", "The summary."),
        ("<analysis>\nsteps\n</analysis>\n\nSummary", "Summary"),
        ("<THINKING>x</THINKING>a<scratchpad>y</scratchpad>b", "ab"),
        ("<think>never closed, all reasoning", ""),
        ("reasoning whose opening tag was lost</think>Final text", "Final text"),
        ("<|channel|>analysis<|message|>thinking...<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Kept answer<|return|>", "Kept answer"),
        ("<|channel|>analysis<|message|>only analysis<|end|>", ""),
        ("Plain summary with <b>html</b>", "Plain summary with <b>html</b>"),
    ],
)
def test_strip_scratchpad(raw: str, clean: str) -> None:
    assert strip_scratchpad(raw) == clean


# ---------------------------------------------------------------------------- finalize

PREVIOUS = f"""{SUMMARY_PREFIX}
## Goal
Find Q3 revenue for ACME
## Key data
- Q2 revenue: $1.1M
- report path: /data/acme/q3.pdf
## Tried and learned
- searched the web for "ACME Q3": nothing useful
## Errors still relevant
- 401 Unauthorized on https://api.acme.com/v1/reports
## Pending
- fetch the Q3 report
- compare with Q2
## Next step
Retry the API with a token
"""

NEW = """<think>merge carefully</think>
## Goal
Find Q3 revenue for ACME and compare it with Q2
## Key data
- Q2 revenue: $1.2M
- Q3 revenue: $1.5M
## Tried and learned
- retried the API with a token: works
## Errors still relevant
- 401 Unauthorized on https://api.acme.com/v1/reports (resolved)
## Pending
- fetch the Q3 report (done)
## Next step
Compute the growth rate
"""


def test_react_summaries_merge_keep_unclosed_items_and_drop_closed_ones() -> None:
    merged = finalize_summary("react_iteration", PREVIOUS, NEW)
    parsed = parse_summary(merged)
    s = parsed.sections
    # Single-valued sections: the new value wins.
    assert s["Goal"] == ["Find Q3 revenue for ACME and compare it with Q2"]
    assert s["Next step"] == ["Compute the growth rate"]
    # Key data: same name replaced in place, other previous items survive, new appended.
    assert s["Key data"] == [
        "Q2 revenue: $1.2M", "report path: /data/acme/q3.pdf", "Q3 revenue: $1.5M"
    ]
    # Learned items accumulate in order.
    assert s["Tried and learned"] == [
        'searched the web for "ACME Q3": nothing useful',
        "retried the API with a token: works",
    ]
    # Closed items disappear from the open sections; the unclosed one survives.
    assert s["Errors still relevant"] == []
    assert s["Pending"] == ["compare with Q2"]
    # Scratchpad and prefix are gone; every section is present, in order.
    assert "<think>" not in merged
    assert SUMMARY_PREFIX not in merged
    assert list(s) == list(SECTIONS)


def test_items_left_out_of_the_new_summary_survive() -> None:
    new = "## Goal\nFind Q3 revenue for ACME\n## Tried and learned\n- API works with token\n"
    merged = parse_summary(finalize_summary("react_iteration", PREVIOUS, new)).sections
    assert "report path: /data/acme/q3.pdf" in merged["Key data"]
    assert merged["Pending"] == ["fetch the Q3 report", "compare with Q2"]
    assert merged["Errors still relevant"] == [
        "401 Unauthorized on https://api.acme.com/v1/reports"
    ]
    assert merged["Next step"] == ["Retry the API with a token"]  # not superseded


def test_restated_items_are_not_duplicated_and_take_the_new_wording() -> None:
    new = (
        "## Pending\n- Fetch the Q3 report from the API\n- compare with Q2\n"
        "## Tried and learned\n- searched the web for 'ACME Q3': nothing useful\n"
    )
    merged = parse_summary(finalize_summary("react_iteration", PREVIOUS, new)).sections
    assert merged["Pending"] == ["Fetch the Q3 report from the API", "compare with Q2"]
    assert merged["Tried and learned"] == ["searched the web for 'ACME Q3': nothing useful"]


def test_a_different_number_is_not_a_duplicate() -> None:
    prev = "## Key data\n- ACME headcount 120 in 2023\n"
    new = "## Key data\n- ACME headcount 135 in 2024\n"
    merged = parse_summary(finalize_summary("react_iteration", prev, new)).sections
    assert merged["Key data"] == ["ACME headcount 120 in 2023", "ACME headcount 135 in 2024"]


@pytest.mark.parametrize(
    "closing",
    [
        "- [x] fetch the Q3 report",
        "- ~~fetch the Q3 report~~",
        "- DONE: fetch the Q3 report",
        "- fetch the Q3 report — done",
        "- ✅ fetch the Q3 report",
        "- fetch the Q3 report（完了）".replace("（", "(").replace("）", ")"),
        "- Q3 report fetched (done)",
    ],
)
def test_closing_marks_are_recognised(closing: str) -> None:
    merged = finalize_summary("react_iteration", PREVIOUS, f"## Pending\n{closing}\n")
    assert parse_summary(merged).sections["Pending"] == ["compare with Q2"]


def test_bold_and_colon_headings_and_none_items_are_understood() -> None:
    new = (
        "**Goal**: Find Q3 revenue\n"
        "Key data:\n- Q3 revenue: $1.5M\n"
        "Errors still relevant: none\n"
        "Pending:\n- (none)\n"
    )
    parsed = parse_summary(new)
    assert parsed.structured
    assert parsed.sections["Goal"] == ["Find Q3 revenue"]
    assert parsed.sections["Errors still relevant"] == []
    assert parsed.sections["Pending"] == []
    merged = parse_summary(finalize_summary("react_iteration", PREVIOUS, new)).sections
    assert merged["Pending"] == ["fetch the Q3 report", "compare with Q2"]  # "none" closes nothing


def test_japanese_working_summary_merges_with_english_headings() -> None:
    prev = "## Goal\n売上を調べる\n## Pending\n- 第3四半期の報告書を取得する\n- 前年と比較する\n"
    new = "## Pending\n- 第3四半期の報告書を取得する (done)\n## Next step\n前年と比較する\n"
    merged = parse_summary(finalize_summary("react_iteration", prev, new)).sections
    assert merged["Goal"] == ["売上を調べる"]
    assert merged["Pending"] == ["前年と比較する"]


def test_unstructured_answers_are_accepted_as_they_are() -> None:
    plain = "The agent found Q3 revenue of $1.5M and still has to compare it with Q2."
    assert finalize_summary("react_iteration", PREVIOUS, plain) == plain
    structured = "## Goal\nX\n## Pending\n- y\n"
    assert finalize_summary("react_iteration", "free text summary", structured) == structured.strip()
    assert finalize_summary("react_iteration", None, structured) == structured.strip()


def test_other_hints_are_not_merged_but_are_cleaned() -> None:
    for hint in ("general", "planner_input", "step_dependency"):
        out = finalize_summary(hint, PREVIOUS, f"<think>x</think>{SUMMARY_PREFIX} short")
        assert out == "short"


def test_unknown_markdown_sections_are_merged_as_lists() -> None:
    prev = "## Goal\nG\n## Sources\n- https://a.example/1\n"
    new = "## Goal\nG\n## Sources\n- https://b.example/2\n"
    merged = parse_summary(finalize_summary("react_iteration", prev, new)).sections
    assert merged["Sources"] == ["https://a.example/1", "https://b.example/2"]


def test_an_appended_facts_block_is_left_to_the_appender() -> None:
    prev = (
        "## Goal\nG\n## Next step\nRead page 2\n\n"
        "Facts kept verbatim:\n- INV-2024-0042\n- $1,234.50\n"
    )
    new = "## Next step\nRead page 3\n\nFacts kept verbatim:\n- 2024-05-01\n"
    merged = finalize_summary("react_iteration", prev, new)
    sections = parse_summary(merged).sections
    assert sections["Next step"] == ["Read page 3"]  # the facts did not leak into it
    assert sections["Goal"] == ["G"]
    assert "Facts kept verbatim" not in merged
    # Other hints: a copied list is dropped too, the rest of the answer kept.
    out = finalize_summary("general", None, "Paid.\n\nFacts kept verbatim:\n- $5\n\nMore text.")
    assert out == "Paid.\n\nMore text."


def test_closing_marks_and_word_matching_helpers() -> None:
    assert closed_core("fetch it (done)") == "fetch it"
    assert closed_core("fetch it") is None
    assert closed_core("(done)") is None  # a mark with nothing to close
    assert words("Revenue: $1.2M at /data/q3.pdf") == {"revenue", "1.2m", "at", "data/q3.pdf"}


# ---------------------------------------------------------------------------- property

_item = st.text(alphabet="abcdefghij 0123456789", min_size=3, max_size=30).filter(
    lambda s: len(words(s)) >= 1 and s.strip().lower() not in {"na"}
)


@settings(max_examples=60, deadline=None)
@given(
    prev_pending=st.lists(_item, max_size=6, unique=True),
    new_pending=st.lists(_item, max_size=6, unique=True),
    prev_data=st.lists(_item, max_size=6, unique=True),
)
def test_merge_never_loses_an_open_item(
    prev_pending: list[str], new_pending: list[str], prev_data: list[str]
) -> None:
    """Nothing closes anything here, so every word of every item must survive the merge."""
    def block(name: str, items: list[str]) -> str:
        return f"## {name}\n" + "".join(f"- {i}\n" for i in items)

    prev = "## Goal\ng\n" + block("Pending", prev_pending) + block("Key data", prev_data)
    new = "## Goal\nh\n" + block("Pending", new_pending)
    merged = parse_summary(finalize_summary("react_iteration", prev, new)).sections
    out_pending = [words(i) for i in merged["Pending"]]
    for item in prev_pending + new_pending:
        assert any(words(item) <= out for out in out_pending), item
    out_data = [words(i) for i in merged["Key data"]]
    for item in prev_data:
        assert any(words(item) <= out for out in out_data), item
    assert merged["Goal"] == ["h"]
