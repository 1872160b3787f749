"""Issue 29's bill and reachability on public data sets the user holds locally.

Not part of ``benchmarks/run``: the data sets are other people's, and nothing here
downloads anything. Point it at local copies and it prints the same kind of rows as the
report (``python -m benchmarks.realdata --tau FILE --locomo PATH``):

* ``--tau FILE`` — τ-bench's recorded trajectories (``historical_trajectories/*.json`` of
  sierra-research/tau-bench: a list of runs, each ``{"task_id", "traj": [OpenAI chat
  messages]}``), replayed as agent loops exactly as :mod:`benchmarks.bench_bill` replays
  its traces (a model call before every assistant message, priced with prompt caching),
  at a budget of the system prompt plus ``--share`` (0.4) of the rest — issue 29's
  set-up. Rows: the guard's and truncate-each-call's bills ÷ whole history's, the guard ÷
  truncation, compactions per 100 calls, and a **floor**: every call writes its new
  messages at 1.25× and reads only the system prompt from the cache — what a strategy
  that sent every message once and never rewrote anything would pay. On runs as short as
  τ-bench's (~13 calls, history ~2.5× the budget) that floor sits near 0.75× the whole
  history's bill.
* ``--locomo PATH`` — LoCoMo (snap-research/locomo): ``locomo10.json`` (a list of
  samples with ``conversation`` and ``qa``) or a directory of one JSON file per sample.
  Each dialogue becomes one chat (``speaker_a`` the user; every turn ``"Name: text"``, an
  image's caption in brackets, a session's first turn opened by its date); questions of
  categories 1–4 with evidence. Rows at 2K and 8K: the share of questions whose evidence
  turn is in the guard's context (lossy summariser, a :class:`HistoryArchive`) or in
  ``archive.search(question, k=5)``, against truncation plus word BM25 over the dropped
  turns (:mod:`benchmarks.word_bm25`), and the evidence held by each context alone.
  Those rows compact each dialogue once, whole: the context right after a compaction.
  Two more rows replay it as a running chat (:func:`running_chat_reach`: the guard
  checks every user turn), where the question meets the context anywhere in its cycle.

Nothing in ctxstack was fitted on τ-bench. LoCoMo's dialogues were split in two before
the reply rule of the archive (:data:`ctxstack.compaction._archive.REPLY_CREDIT`) was
tried: its share was chosen on the development half (samples 26, 30, 41, 42, 43,
:data:`DEVELOPMENT`) with the fitting set of :mod:`benchmarks.bench_recall`, and the
evaluation half (44, 47, 48, 49, 50) was run once afterwards (figures in
``bench_recall``'s (vii-f)). Given samples of both halves (named by file or
``sample_id``), the rows are printed for all of them and for each half, and only the
evaluation half's carry the target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_bill import DEFAULTS, Trace, run_guard, run_truncate, run_whole
from benchmarks.bench_recall import _question_reach, _text
from benchmarks.common import BenchRow, print_table
from benchmarks.fidelity.strategies import lossy_summarizer
from benchmarks.pricing import CACHE_READ, CACHE_WRITE
from ctxstack import ContextGuard, HistoryArchive
from ctxstack.compaction._facts import message_fact_text
from ctxstack.errors import MessageError
from ctxstack.messages import ChatMessage, from_openai_messages
from ctxstack.tokens import HEURISTIC

BUDGETS = (2_000, 8_000)


class DataError(Exception):
    """A data file is missing or not in the expected shape (the message says which)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise DataError(f"{path}: not JSON ({exc})") from exc


# ------------------------------------------------------------------------------ τ-bench
def tau_traces(path: Path, share: float) -> list[Trace]:
    """Each run's trajectory as a :class:`Trace` at ``system prompt + share × rest``."""
    runs = _read_json(path)
    if not isinstance(runs, list):
        raise DataError(f"{path}: expected a list of runs with a 'traj'")
    traces = []
    for n, run in enumerate(runs):
        traj = run.get("traj") if isinstance(run, dict) else None
        if not isinstance(traj, list) or not traj:
            raise DataError(f"{path}: run {n} has no 'traj' list of messages")
        try:
            messages = from_openai_messages(traj)
        except MessageError as exc:
            raise DataError(f"{path}: run {n}: {exc}") from exc
        system = HEURISTIC.count_messages(messages[:1]) if messages[0].role == "system" else 0
        rest = HEURISTIC.count_messages(messages) - system
        traces.append(Trace(f"tau-{run.get('task_id', n)}", messages, [],
                            int(system + share * rest)))
    return traces


def floor_bill(trace: Trace) -> float:
    """What ``trace`` costs if each call writes only what it adds and reads only the
    system prompt from the cache (the first call writes everything it sends)."""
    system = trace.messages[:1] if trace.messages[0].role == "system" else []
    read = HEURISTIC.count_messages(system) if system else 0
    bill, previous = 0.0, 0
    for i in trace.call_points:
        new = HEURISTIC.count_messages(trace.messages[previous:i]) if i > previous else 0
        bill += CACHE_WRITE * new + (CACHE_READ * read if previous else 0.0)
        previous = i
    return bill


async def tau_rows(traces: Sequence[Trace]) -> list[BenchRow]:
    whole = truncate = guard = bound = 0.0
    calls = compactions = 0
    for trace in traces:
        whole += run_whole(trace).bill
        truncate += run_truncate(trace).bill
        outcome = await run_guard(trace, DEFAULTS)
        guard += outcome.bill
        calls += outcome.calls
        compactions += outcome.compactions
        bound += floor_bill(trace)
    label = f"τ-bench ({len(traces)} runs, {calls} calls)"
    return [
        BenchRow(f"{label}: guard billed input ÷ whole history (writes 1.25×)",
                 guard / whole, "×", baseline=1.0, target="≤ 0.75 (issue 29)",
                 met=guard / whole <= 0.75),
        BenchRow(f"{label}: guard billed input ÷ truncate each call", guard / truncate, "×",
                 baseline=1.0, target="≤ 0.8 (issue 29)", met=guard / truncate <= 0.8),
        BenchRow(f"{label}: truncate each call ÷ whole history", truncate / whole, "×"),
        BenchRow(f"{label}: floor (each message written once, only the system prompt read "
                 "from the cache) ÷ whole history", bound / whole, "×"),
        BenchRow(f"{label}: guard compactions per 100 calls", 100 * compactions / calls,
                 "per 100"),
    ]


# ------------------------------------------------------------------------------- LoCoMo
Dialogue = tuple[list[ChatMessage], dict[str, str], list[tuple[str, list[str]]]]
"""Messages, each turn's text by its ``dia_id``, and (question, evidence ids) pairs."""


DEVELOPMENT = frozenset({"26", "30", "41", "42", "43"})
"""LoCoMo's samples the archive's reply share was chosen on (see the module doc), by the
number of their file (``26.json``) or ``sample_id`` (``conv-26``)."""
EVALUATION = frozenset({"44", "47", "48", "49", "50"})
"""LoCoMo's other five samples: run once, after the choice."""


def _samples(path: Path) -> list[tuple[str, Any]]:
    """``(name, sample)`` pairs: a directory's files by stem, a list by ``sample_id``."""
    if path.is_dir():
        return [(p.stem, _read_json(p)) for p in sorted(path.glob("*.json"))]
    data = _read_json(path)
    samples = data if isinstance(data, list) else [data]
    return [(str(s.get("sample_id", "")) if isinstance(s, dict) else "", s) for s in samples]


def half_of(name: str) -> str | None:
    """``"development"`` or ``"evaluation"`` for one of LoCoMo's ten samples, else None."""
    number = name.rsplit("-", 1)[-1]
    if number in DEVELOPMENT:
        return "development"
    return "evaluation" if number in EVALUATION else None


def load_locomo(path: Path) -> tuple[list[Dialogue], list[str | None]]:
    """Each LoCoMo sample as a chat with its questions of categories 1–4, and each
    sample's half (:func:`half_of`), in the same order."""
    out = []
    samples = _samples(path)
    for n, (_, sample) in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("qa"), list):
            raise DataError(f"{path}: sample {n} has no 'qa' list")
        conv = sample.get("conversation", sample)
        if not isinstance(conv, dict) or "speaker_a" not in conv:
            raise DataError(f"{path}: sample {n} has no conversation with 'speaker_a'")
        messages: list[ChatMessage] = []
        turns: dict[str, str] = {}
        session = 1
        while isinstance(conv.get(f"session_{session}"), list):
            date = conv.get(f"session_{session}_date_time", "")
            for j, turn in enumerate(conv[f"session_{session}"]):
                if not isinstance(turn, dict) or not all(
                        isinstance(turn.get(key), str) for key in ("speaker", "text", "dia_id")):
                    raise DataError(f"{path}: sample {n}, session_{session}[{j}] needs "
                                    "'speaker', 'text' and 'dia_id' strings")
                body = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    body += f" [shares {turn['blip_caption']}]"
                if j == 0 and date:
                    body = f"[{date}] {body}"
                role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
                messages.append(ChatMessage(role=role, content=body))
                turns[turn["dia_id"]] = body
            session += 1
        questions = [(q["question"], [e for e in q["evidence"] if e in turns])
                     for q in sample["qa"]
                     if isinstance(q, dict) and q.get("category") != 5
                     and isinstance(q.get("evidence"), list) and isinstance(q.get("question"), str)]
        out.append((messages, turns, [(q, ev) for q, ev in questions if ev]))
    return out, [half_of(name) for name, _ in samples]


_SEP = "\x00"  # joins a question's evidence turns into one value (no turn holds it)


def _holds(value: str, text: str) -> bool:
    """Whether ``text`` holds one of the evidence turns ``value`` joins, whole."""
    return any(turn in text for turn in value.split(_SEP))


def _evidence(turns: dict[str, str], ids: Sequence[str]) -> str:
    """A question's evidence turns as one value for :func:`_holds`."""
    return _SEP.join(turns[e] for e in ids)


async def reach(dialogues: Sequence[Dialogue], budget: int) -> dict[str, float]:
    """Shares of questions reached at ``budget`` (see the module doc): the guard with the
    hybrid archive (``hybrid``), its context alone (``context``), truncation + word BM25
    (``baseline``) and truncation's context alone (``baseline context``), as
    :mod:`benchmarks.bench_recall` measures its own dialogues; ``n`` questions."""
    convs = [(messages, [(_evidence(turns, evidence), question)
                         for question, evidence in questions])
             for messages, turns, questions in dialogues]
    shares = await _question_reach(convs, budget, _holds)
    return shares | {"n": sum(len(q) for _, _, q in dialogues)}


async def running_chat_reach(dialogues: Sequence[Dialogue], budget: int) -> dict[str, float]:
    """Reach when the guard runs as a chat runs it: each user turn is a model call whose
    input the guard checks (the compacted context carried on, as an agent or the service
    carries it), the questions asked after the last turn. ``context``: evidence in that
    context; ``hybrid``: in it or in ``archive.search(question, k=5)``. The one-shot rows
    measure the context right after a compaction, the low point of this cycle."""
    total = in_context = reached = 0
    for messages, turns, questions in dialogues:
        archive = HistoryArchive()
        guard = ContextGuard(lossy_summarizer(), default_budget=budget, archive=archive)
        context: list[ChatMessage] = []
        for message in messages:
            context.append(message)
            if message.role == "user":
                context = await guard.check_and_compact(context)
        text = _text(context)
        for question, evidence in questions:
            value = _evidence(turns, evidence)
            total += 1
            held = _holds(value, text)
            in_context += held
            reached += held or any(_holds(value, message_fact_text(hit.message))
                                   for hit in await archive.search(question, k=5))
    return {"context": in_context / max(1, total), "hybrid": reached / max(1, total)}


async def locomo_rows(dialogues: Sequence[Dialogue],
                      halves: Sequence[str | None] | None = None) -> list[BenchRow]:
    """Rows at each budget over all ``dialogues``, and per half when ``halves`` names
    both (:func:`load_locomo`): then only the evaluation half carries the target — the
    development half, and so the whole, hold partly by selection."""
    named = list(zip(halves, dialogues, strict=True)) if halves is not None else []
    groups: list[tuple[str, list[Dialogue], bool]] = []
    split = {h for h, _ in named} >= {"development", "evaluation"}
    groups.append(("LoCoMo", list(dialogues), not split))
    if split:
        groups += [("LoCoMo evaluation half", [d for h, d in named if h == "evaluation"], True),
                   ("LoCoMo development half (chosen on; not evidence)",
                    [d for h, d in named if h == "development"], False)]
    rows = []
    for budget in BUDGETS:
        for title, group, targeted in groups:
            r = await reach(group, budget)
            label = f"{title} at {budget // 1000}K ({int(r['n'])} questions)"
            rows += [
                BenchRow(f"{label}: guard + hybrid archive (context or search k=5)",
                         r["hybrid"], "share", baseline=r["baseline"],
                         ratio=r["hybrid"] / r["baseline"] if r["baseline"] else None,
                         target=(">= baseline (truncation + word BM25 over dropped turns)"
                                 if targeted else ""),
                         met=r["hybrid"] >= r["baseline"] if targeted else None),
                BenchRow(f"{label}: evidence in the guard's context / in truncation's",
                         r["context"], "share", baseline=r["baseline context"]),
            ]
        chat = await running_chat_reach(dialogues, budget)
        rows += [
            BenchRow(f"LoCoMo at {budget // 1000}K as a running chat (the guard checks every "
                     "user turn; informational): guard + hybrid archive (context or search "
                     "k=5)", chat["hybrid"], "share"),
            BenchRow(f"LoCoMo at {budget // 1000}K as a running chat: evidence in the "
                     "guard's context", chat["context"], "share"),
        ]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.realdata",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--tau", type=Path, help="τ-bench historical trajectories (JSON)")
    parser.add_argument("--share", type=float, default=0.4,
                        help="budget = system prompt + this share of the rest (0.4)")
    parser.add_argument("--locomo", type=Path, help="locomo10.json or a directory of samples")
    args = parser.parse_args(argv)
    if args.tau is None and args.locomo is None:
        parser.error("give --tau FILE and/or --locomo PATH (local copies; nothing is fetched)")
    if not 0 < args.share <= 1:
        parser.error(f"--share: expected a number in (0, 1], got {args.share}")
    rows: list[BenchRow] = []
    try:
        if args.tau is not None:
            rows += asyncio.run(tau_rows(tau_traces(args.tau, args.share)))
        if args.locomo is not None:
            rows += asyncio.run(locomo_rows(*load_locomo(args.locomo)))
    except DataError as exc:
        print(f"realdata: {exc}", file=sys.stderr)
        return 2
    print_table(rows, "Issue 29 on local copies of public data sets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
