"""``benchmarks.realdata``: issue 29's rows on local copies of τ-bench and LoCoMo.

The files here are written by hand in the two data sets' shapes (no data set is in the
repository); the tests check the reading, the rows and the errors a user meets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.bench_bill import run_whole
from benchmarks.realdata import (
    DataError,
    floor_bill,
    half_of,
    load_locomo,
    locomo_rows,
    main,
    reach,
    running_chat_reach,
    tau_rows,
    tau_traces,
)

POLICY = "# Airline policy\n" + "Check the reservation id before any change. " * 80


def tau_run(task: int, turns: int) -> dict[str, Any]:
    traj: list[dict[str, Any]] = [{"role": "system", "content": POLICY}]
    for t in range(turns):
        call = f"call_{task}_{t}"
        traj += [
            {"role": "user", "content": f"Please look up reservation R{task}{t:03d}."},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call, "type": "function",
                "function": {"name": "get_reservation_details",
                             "arguments": json.dumps({"reservation_id": f"R{task}{t:03d}"})}}]},
            {"role": "tool", "tool_call_id": call, "name": "get_reservation_details",
             "content": json.dumps({"reservation_id": f"R{task}{t:03d}", "flights": [
                 {"flight_number": f"HAT{n:03d}", "date": "2024-05-20"} for n in range(12)]})},
            {"role": "assistant", "content": f"Reservation R{task}{t:03d} has 12 flights."},
        ]
    return {"task_id": task, "reward": 1.0, "traj": traj}


def locomo_sample() -> dict[str, Any]:
    filler = [{"speaker": s, "dia_id": f"D{d}:{i}",
               "text": f"Small talk {d}-{i} about the weather, the garden and the new fence."}
              for d in (1, 2) for i, s in enumerate(["Ana", "Ben"] * 60, start=3)]
    return {
        "conversation": {
            "speaker_a": "Ana", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "Big news today. I adopted a greyhound named Pixel!"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats!", "blip_caption":
                 "a photo of a dog"},
                *[f for f in filler if f["dia_id"].startswith("D1:")]],
            "session_2_date_time": "9:00 am on 1 June, 2023",
            "session_2": [
                *[f for f in filler if f["dia_id"].startswith("D2:")],
                {"speaker": "Ana", "dia_id": "D2:99", "text": "Pixel learnt to fetch today."}],
        },
        "qa": [
            {"question": "What is the name of Ana's greyhound?", "answer": "Pixel",
             "evidence": ["D1:1"], "category": 1},
            {"question": "What did Pixel learn?", "evidence": ["D2:99"], "category": 4},
            {"question": "Adversarial?", "evidence": ["D1:2"], "category": 5},
            {"question": "No evidence?", "evidence": [], "category": 2},
        ],
    }


def test_tau_runs_become_traces_at_the_system_prompt_plus_a_share(tmp_path: Path) -> None:
    path = tmp_path / "airline.json"
    path.write_text(json.dumps([tau_run(1, 8), tau_run(2, 6)]))
    traces = tau_traces(path, 0.4)
    assert [len(t.messages) for t in traces] == [33, 25]
    first = traces[0]
    assert first.messages[0].role == "system"
    assert first.messages[2].tool_calls
    # the floor never exceeds the whole history's bill (it drops the history's reads)
    assert 0 < floor_bill(first) <= run_whole(first).bill


async def test_tau_rows_price_the_guard_against_both_baselines(tmp_path: Path) -> None:
    path = tmp_path / "airline.json"
    path.write_text(json.dumps([tau_run(1, 10)]))
    rows = {r.name.split(": ", 1)[1]: r for r in await tau_rows(tau_traces(path, 0.4))}
    assert set(rows) == {
        "guard billed input ÷ whole history (writes 1.25×)",
        "guard billed input ÷ truncate each call",
        "truncate each call ÷ whole history",
        "floor (each message written once, only the system prompt read from the cache) "
        "÷ whole history",
        "guard compactions per 100 calls",
    }
    assert rows["guard compactions per 100 calls"].value > 0  # the history outgrew it
    floor = rows["floor (each message written once, only the system prompt read from the "
                 "cache) ÷ whole history"].value
    assert 0 < floor < 1
    assert rows["guard billed input ÷ whole history (writes 1.25×)"].met is not None


@pytest.mark.parametrize("layout", ["list", "directory"])
def test_locomo_samples_become_chats_with_their_questions(tmp_path: Path, layout: str) -> None:
    if layout == "list":
        path = tmp_path / "locomo10.json"
        path.write_text(json.dumps([locomo_sample()]))
    else:
        path = tmp_path / "samples"
        path.mkdir()
        (path / "26.json").write_text(json.dumps(locomo_sample()))
    ((messages, turns, questions),), _ = load_locomo(path)
    assert messages[0].role == "user"
    assert messages[0].text == "[1:56 pm on 8 May, 2023] Ana: Big news today. I adopted a greyhound named Pixel!"
    assert turns["D1:2"] == "Ben: Congrats! [shares a photo of a dog]"
    assert messages[1].role == "assistant"
    # category 5 and questions without evidence are left out
    assert questions == [("What is the name of Ana's greyhound?", ["D1:1"]),
                         ("What did Pixel learn?", ["D2:99"])]


async def test_reach_counts_context_and_search(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([locomo_sample()]))
    dialogues, _ = load_locomo(path)
    got = await reach(dialogues, 2_000)
    assert got["n"] == 2
    # the newest turn is in both contexts (the first one only in the lossy summary's first
    # sentence, not whole); the old one is found by both searches
    assert got["context"] == got["baseline context"] == 0.5
    assert got["hybrid"] == got["baseline"] == 1.0
    rows = await locomo_rows(dialogues)
    assert [r.name.split(" (")[0].split(":")[0] for r in rows] == [
        "LoCoMo at 2K", "LoCoMo at 2K", "LoCoMo at 2K as a running chat",
        "LoCoMo at 2K as a running chat", "LoCoMo at 8K", "LoCoMo at 8K",
        "LoCoMo at 8K as a running chat", "LoCoMo at 8K as a running chat"]
    assert not any(r.target for r in rows if "running chat" in r.name)  # informational


async def test_a_running_chat_checks_every_user_turn_and_keeps_its_context(
        tmp_path: Path) -> None:
    """The guard runs as a chat runs it: the context it compacted is carried on, so the
    newest turn is in it, and the old evidence is found by the archive's search."""
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([locomo_sample()]))
    dialogues, _ = load_locomo(path)
    got = await running_chat_reach(dialogues, 2_000)
    assert got == {"context": 0.5, "hybrid": 1.0}
    # with room for the whole dialogue nothing is compacted: both are in the context
    assert await running_chat_reach(dialogues, 200_000) == {"context": 1.0, "hybrid": 1.0}


@pytest.mark.parametrize("layout", ["list", "directory"])
async def test_only_the_evaluation_half_carries_the_target(tmp_path: Path, layout: str) -> None:
    """The reply share was chosen on LoCoMo's development half: given both halves, the
    rows say which is which, and the whole and the development half carry no target."""
    if layout == "list":
        path = tmp_path / "locomo10.json"
        path.write_text(json.dumps([{**locomo_sample(), "sample_id": f"conv-{n}"}
                                    for n in (26, 44)]))
    else:
        path = tmp_path / "samples"
        path.mkdir()
        for n in (26, 44):
            (path / f"{n}.json").write_text(json.dumps(locomo_sample()))
    dialogues, halves = load_locomo(path)
    assert halves == ["development", "evaluation"]
    rows = await locomo_rows(dialogues, halves)
    targeted = [r.name.split(" (")[0] for r in rows if r.target]
    assert targeted == ["LoCoMo evaluation half at 2K", "LoCoMo evaluation half at 8K"]
    assert all(r.met is None for r in rows if not r.target)
    assert any(r.name.startswith("LoCoMo development half (chosen on; not evidence) at 8K")
               for r in rows)
    # one half only (or unknown names): no split, the whole carries the target as before
    only = await locomo_rows(dialogues[:1], halves[:1])
    assert [r.name.split(" (")[0] for r in only if r.target] == ["LoCoMo at 2K", "LoCoMo at 8K"]


def test_halves_are_named_by_the_sample_number() -> None:
    assert half_of("26") == half_of("conv-43") == "development"
    assert half_of("44") == half_of("conv-50") == "evaluation"
    assert half_of("") is None
    assert half_of("notes") is None
    assert half_of("conv-99") is None  # not one of LoCoMo's ten: no half


def test_missing_or_malformed_files_say_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert main(["--tau", str(missing)]) == 2
    assert f"{missing}: cannot read it" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not JSON"):
        tau_traces(bad, 0.4)
    bad.write_text(json.dumps([{"task_id": 3}]))
    with pytest.raises(DataError, match="run 0 has no 'traj'"):
        tau_traces(bad, 0.4)
    bad.write_text(json.dumps([{"task_id": 3, "traj": [{"role": "robot", "content": "hi"}]}]))
    with pytest.raises(DataError, match="run 0: "):
        tau_traces(bad, 0.4)
    sample = locomo_sample()
    del sample["conversation"]["session_2"][0]["dia_id"]
    bad.write_text(json.dumps([sample]))
    with pytest.raises(DataError, match=r"session_2\[0\] needs 'speaker', 'text' and 'dia_id'"):
        load_locomo(bad)
    bad.write_text(json.dumps([{"conversation": {}, "qa": []}]))
    with pytest.raises(DataError, match="no conversation with 'speaker_a'"):
        load_locomo(bad)
    with pytest.raises(SystemExit):
        main([])  # neither data set given: argparse's usage error
    with pytest.raises(SystemExit):
        main(["--tau", str(missing), "--share", "0"])
