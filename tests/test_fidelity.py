"""The fidelity benchmark's parts: generator, verbatim scorer, validity check, strategies."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_fidelity
from benchmarks.fidelity.generator import FACT_KINDS, LANGUAGES, generate
from benchmarks.fidelity.scorer import (
    check_sequence,
    context_text,
    count_value,
    find_value,
    first_sentence,
    near_misses,
    score_facts,
    survived,
)
from benchmarks.fidelity.strategies import (
    NAIVE,
    all_strategies,
    lossy_summarizer,
    naive_drop_oldest,
    window_size,
)
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.tokens import HEURISTIC


def _dump(conv):  # type: ignore[no-untyped-def]
    return json.dumps([m.to_openai() | {"pinned": m.pinned, "metadata": m.metadata}
                       for m in conv.messages], ensure_ascii=False)


# ---------------------------------------------------------------------------- generator


@pytest.mark.parametrize("language", LANGUAGES)
def test_generator_is_deterministic_for_a_seed(language: str) -> None:
    a = generate(11, language, target_tokens=6_000, n_facts=10)  # type: ignore[arg-type]
    b = generate(11, language, target_tokens=6_000, n_facts=10)  # type: ignore[arg-type]
    c = generate(12, language, target_tokens=6_000, n_facts=10)  # type: ignore[arg-type]
    assert _dump(a) == _dump(b)
    assert a.facts == b.facts
    assert _dump(a) != _dump(c)
    assert [f.value for f in a.facts] != [f.value for f in c.facts]


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_fact_is_in_the_conversation_once_and_its_question_names_it(language: str) -> None:
    conv = generate(3, language, target_tokens=12_000, n_facts=15)  # type: ignore[arg-type]
    whole = context_text(conv.messages)
    assert len(conv.facts) == 15
    assert {f.kind for f in conv.facts} == set(FACT_KINDS)
    for fact in conv.facts:
        assert count_value(fact.value, whole) == 1, fact
        message = conv.messages[fact.message_index]
        assert fact.value in message.text
        assert message.role == fact.role
        assert fact.subject in fact.question
        assert fact.value not in fact.question
        # Never in the first sentence: the lossy summariser cannot carry it.
        assert fact.value not in first_sentence(message.text)
    # The uncompacted conversation keeps every fact.
    assert score_facts(conv.facts, conv.messages).share == 1.0


def test_conversation_shape_tools_system_prompt_and_pinned_query() -> None:
    conv = generate(5, "mixed", target_tokens=20_000, n_facts=20)
    assert conv.messages[0].role == "system"
    assert conv.query.pinned
    assert conv.query.kind == "query"
    assert conv.query.role == "user"
    assert 20_000 <= conv.tokens < 30_000
    assert check_sequence(conv.messages).valid
    tool_calls = [m for m in conv.messages if m.tool_calls]
    assert tool_calls
    assert all(m.content is None for m in tool_calls)
    results = [m for m in conv.messages if m.role == "tool"]
    assert max(len(m.text) for m in results) > 3_000  # large JSON tool results
    json.loads(results[0].text)
    # Mixed means all three languages occur.
    text = context_text(conv.messages)
    assert any("\u4e00" <= ch <= "\u9fff" for ch in text)
    assert any("\u3040" <= ch <= "\u30ff" for ch in text)
    # Constraints are stated once, early, by the user.
    constraints = [f for f in conv.facts if f.kind == "constraint"]
    assert constraints
    assert all(f.role == "user" for f in constraints)
    # (a turn — a tool loop with large outputs — is the granularity: "early" is the first
    # quarter of the messages)
    assert all(f.message_index < len(conv.messages) * 0.25 for f in constraints)
    # Facts come in every role.
    assert {f.role for f in conv.facts} == {"user", "assistant", "tool"}


def test_generator_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="language"):
        generate(1, "fr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_facts"):
        generate(1, "en", n_facts=0)
    with pytest.raises(ValueError, match="target_tokens"):
        generate(1, "en", target_tokens=100)


# ---------------------------------------------------------------------------- scorer


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("48213.75", "The total is 48213.75."),
        ("48213.75", "预算是48213.75。"),
        ("48213.75", '{"value": "48213.75", "x": 1}'),
        ("/srv/osprey/exports/2021-q3/ledger_4411.csv", "file /srv/osprey/exports/2021-q3/ledger_4411.csv, ok"),
        ("INV-2041-KX332", "発行済みの請求書はINV-2041-KX332です。"),
        ("2021-03-17", "cut over on 2021-03-17 at noon"),
        ("4750 rows", "keep it under 4750 rows."),
    ],
)
def test_scorer_counts_a_verbatim_fact(value: str, text: str) -> None:
    assert find_value(value, text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("48213.75", "The total is 48213.76."),  # one digit changed
        ("48213.75", "The total is 148213.75."),  # longer number
        ("48213.75", "The total is 48213.751"),
        ("48213.75", "version 48213.75.2"),
        ("48213.75", "about 48,213.75"),  # reformatted is not verbatim
        ("/srv/osprey/exports/2021-q3/ledger_4411.csv", "/srv/osprey/export/2021-q3/ledger_4411.csv"),
        ("/srv/osprey/exports/2021-q3/ledger_4411.csv", "/x/srv/osprey/exports/2021-q3/ledger_4411.csv"),
        ("/srv/osprey/exports/2021-q3/ledger_4411.csv", "/srv/osprey/exports/2021-q3/ledger_4411.csv.bak"),
        ("INV-2041-KX332", "INV-2041-KX3321"),
        ("2021-03-17", "2021-03-17T10:00:00Z"),
        ("TCK-335100", "TCK-335100-B"),
    ],
)
def test_scorer_does_not_count_a_near_miss(value: str, text: str) -> None:
    assert not find_value(value, text)


def test_no_generated_near_miss_counts_for_any_planted_fact() -> None:
    conv = generate(2, "en", target_tokens=6_000, n_facts=15)
    for fact in conv.facts:
        misses = near_misses(fact.value)
        assert misses
        for miss in misses:
            assert not find_value(fact.value, f"We noted {miss} yesterday.")
            assert not find_value(fact.value, f"记录：{miss}。")


def test_score_facts_after_removing_and_corrupting_messages() -> None:
    conv = generate(4, "zh", target_tokens=8_000, n_facts=10)
    dropped = conv.facts[0]
    corrupted = conv.facts[1]
    assert dropped.message_index != corrupted.message_index
    messages = []
    for i, m in enumerate(conv.messages):
        if i == dropped.message_index:
            continue
        if i == corrupted.message_index:
            m = m.replace(content=m.text.replace(corrupted.value, near_misses(corrupted.value)[0]))
        messages.append(m)
    score = score_facts(conv.facts, messages)
    assert dropped.id not in score.kept
    assert corrupted.id not in score.kept
    assert len(score.kept) == len(conv.facts) - 2
    assert score.share == pytest.approx((len(conv.facts) - 2) / len(conv.facts))
    assert sum(score.total_by_kind.values()) == len(conv.facts)


def test_facts_in_tool_call_arguments_count() -> None:
    call = ToolCall(id="c1", name="lookup", arguments={"invoice": "INV-1234-AB567"})
    messages = [ChatMessage.user("hi"), ChatMessage.assistant(None, tool_calls=[call]),
                ChatMessage.tool("c1", "{}")]
    assert find_value("INV-1234-AB567", context_text(messages))


# ---------------------------------------------------------------------------- validity


def _call(cid: str) -> ChatMessage:
    return ChatMessage.assistant(None, tool_calls=[ToolCall(id=cid, name="t", arguments={})])


def test_validity_accepts_a_proper_sequence() -> None:
    seq = [ChatMessage.system("s"), ChatMessage.system("[Conversation summary] x"),
           ChatMessage.user("q"), _call("a"), ChatMessage.tool("a", "r"),
           ChatMessage.assistant("done")]
    assert check_sequence(seq).valid


def test_validity_flags_orphan_tool_results() -> None:
    seq = [ChatMessage.system("s"), ChatMessage.user("q"), ChatMessage.tool("a", "r"),
           ChatMessage.assistant("x")]
    v = check_sequence(seq)
    assert not v.valid
    assert v.codes == {"orphan_tool_result"}
    # A result after the conversation moved on is an orphan too.
    seq = [ChatMessage.user("q"), _call("a"), ChatMessage.tool("a", "r"),
           ChatMessage.user("more"), ChatMessage.tool("a", "r again")]
    assert "orphan_tool_result" in check_sequence(seq).codes


def test_validity_flags_unanswered_calls_bad_start_and_duplicates() -> None:
    assert check_sequence([ChatMessage.user("q"), _call("a")]).codes == {"unanswered_tool_call"}
    assert check_sequence([ChatMessage.user("q"), _call("a"), ChatMessage.user("x")]).codes == {
        "unanswered_tool_call"}
    v = check_sequence([ChatMessage.system("s"), ChatMessage.assistant("hello"),
                        ChatMessage.user("q")])
    assert v.codes == {"not_user_first"}
    v = check_sequence([ChatMessage.user("q"), _call("a"), ChatMessage.tool("a", "1"),
                        ChatMessage.tool("a", "2")])
    assert v.codes == {"duplicate_tool_result"}
    assert check_sequence([]).codes == {"empty"}
    assert check_sequence([ChatMessage.system("s")]).codes == {"no_user"}


# ---------------------------------------------------------------------------- strategies


def test_naive_baseline_fits_keeps_system_and_can_orphan_tool_results() -> None:
    conv = generate(1, "en", target_tokens=12_000, n_facts=10)
    for budget in (2_000, 4_000, 8_000):
        out = naive_drop_oldest(conv.messages, budget)
        assert HEURISTIC.count_messages(out) <= budget
        assert out[0] == conv.system_prompt
        assert out[-1] == conv.query
        assert out[1:] == conv.messages[len(conv.messages) - len(out) + 1:]
    # Cutting just after a tool call leaves its results orphaned: the baseline is naive.
    i = next(i for i, m in enumerate(conv.messages) if m.tool_calls)
    budget = HEURISTIC.count_messages([conv.messages[0], *conv.messages[i + 1:]])
    assert "orphan_tool_result" in check_sequence(naive_drop_oldest(conv.messages, budget)).codes


@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_lossy_summariser_never_carries_a_fact(language: str) -> None:
    """The benchmark's premise, on real compaction requests: every kept fact was kept by
    the library, none by the summariser."""
    from ctxstack.compaction import CompactUtils
    from ctxstack.testing import first_sentence_summarizer

    conv = generate(6, language, target_tokens=12_000, n_facts=12)  # type: ignore[arg-type]
    llm = lossy_summarizer()
    for budget in (2_000, 8_000):
        await CompactUtils.llm_compact(conv.messages, llm, budget, keep_recent=4)
    assert llm.calls
    for call in llm.calls:
        summary = first_sentence_summarizer(call.messages)
        assert len(summary) > 100  # it did summarise something
        assert score_facts(conv.facts, [ChatMessage.system(summary)]).kept == []


def test_window_size_follows_mean_message_size() -> None:
    conv = generate(1, "en", target_tokens=8_000, n_facts=5)
    mean = HEURISTIC.count_messages(conv.messages[1:]) / (len(conv.messages) - 1)
    assert window_size(conv.messages, 4_000) == int(4_000 // mean)
    assert window_size(conv.messages, 1) == 1


async def test_measure_scores_a_strategy_run() -> None:
    conv = generate(2, "en", target_tokens=8_000, n_facts=10)
    run = await bench_fidelity.measure(conv, NAIVE, 4_000, None)
    assert run.error is None
    assert run.facts is not None
    assert run.tokens <= 4_000
    assert run.fits
    assert run.system_kept
    assert run.query_kept
    expected = score_facts(conv.facts, naive_drop_oldest(conv.messages, 4_000))
    assert run.facts.kept == expected.kept
    assert survived(conv.query, naive_drop_oldest(conv.messages, 4_000))


async def test_every_available_strategy_runs_on_a_conversation() -> None:
    """Wiring check: each strategy the benchmark finds runs and is scored (no exceptions)."""
    strategies = all_strategies()
    conv = generate(3, "mixed", target_tokens=8_000, n_facts=8)
    for strategy in strategies:
        run = await bench_fidelity.measure(conv, strategy, 2_000, None)
        assert run.error is None, (strategy.name, run.error)
        assert run.validity is not None
        assert run.facts is not None


def test_rows_compare_with_the_naive_baseline() -> None:
    res = bench_fidelity.FidelityResult(quick=True, mode="scripted")
    res.strategies = [NAIVE]
    for budget in bench_fidelity.BUDGETS:
        run = bench_fidelity.Run(NAIVE.name, budget, "en", 1)
        conv = generate(1, "en", target_tokens=4_000, n_facts=4)
        run.facts = score_facts(conv.facts, conv.messages[: len(conv.messages) // 2])
        res.runs.append(run)
    rows = bench_fidelity.rows_from(res)
    assert [r.name for r in rows] == [f"facts kept @{b // 1000}K, naive drop-oldest"
                                      for b in bench_fidelity.BUDGETS]
    assert all(r.baseline is None and r.met is None for r in rows)
    skipped = bench_fidelity.FidelityResult(quick=True, mode="real endpoint", skipped="no key")
    assert bench_fidelity.rows_from(skipped) == []


async def test_llm_mode_without_an_endpoint_is_skipped_with_a_clear_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_fidelity, "real_llm", lambda: "no endpoint configured (ConfigError)")
    res = await bench_fidelity.evaluate(True, use_real_llm=True)
    assert res.runs == []
    assert res.skipped is not None
    assert "--llm was given but no endpoint configured" in res.skipped
    assert bench_fidelity.rows_from(res) == []


async def test_llm_mode_sends_every_summary_through_the_configured_llm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxstack.llm import ScriptedLLM

    endpoint = ScriptedLLM(handler=lambda messages, tools: "Short summary.")
    monkeypatch.setattr(bench_fidelity, "real_llm", lambda: endpoint)
    monkeypatch.setattr(bench_fidelity, "conversations",
                        lambda quick: [generate(1, "en", target_tokens=6_000, n_facts=4)])
    res = await bench_fidelity.evaluate(True, use_real_llm=True)
    assert res.mode == "real endpoint"
    assert res.skipped is None
    llm_runs = [r for r in res.runs if r.llm_calls]
    assert sum(r.llm_calls for r in res.runs) == len(endpoint.calls)
    assert all(r.error is None for r in res.runs)
    # Without ctxstack's LLM strategies nothing calls it; with them, something must.
    if any(s.uses_llm for s in res.strategies):
        assert llm_runs


def test_real_llm_names_the_missing_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL", "FAST_LLM_BASE_URL",
                "FAST_LLM_API_KEY", "FAST_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    reason = bench_fidelity.real_llm()
    assert isinstance(reason, str)
    assert "FAST_LLM_BASE_URL" in reason


async def test_llm_mode_against_a_real_http_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """--llm end to end over loopback HTTP: the configured client does every summary."""
    from ctxstack.llm.stub import StubServer

    with StubServer(rule=lambda request: "Earlier we discussed the rollout.") as stub:
        monkeypatch.setenv("FAST_LLM_BASE_URL", stub.base_url)
        monkeypatch.setenv("FAST_LLM_API_KEY", "test-key")
        monkeypatch.setenv("FAST_LLM_MODEL", "stub-model")
        monkeypatch.setattr(bench_fidelity, "conversations",
                            lambda quick: [generate(2, "ja", target_tokens=6_000, n_facts=4)])
        res = await bench_fidelity.evaluate(True, use_real_llm=True)
        assert res.skipped is None
        assert all(r.error is None for r in res.runs)
        assert sum(r.llm_calls for r in res.runs) == len(stub.requests)


# ---------------------------------------------------------------------------- phrase dialogues


def test_phrase_dialogues_are_deterministic_and_state_each_answer_once() -> None:
    from benchmarks.fidelity.dialogues import phrase_dialogue

    one, again, other = phrase_dialogue(3), phrase_dialogue(3), phrase_dialogue(4)
    assert _dump(one) == _dump(again)
    assert _dump(one) != _dump(other)
    sessions = sum(m.text.startswith("(New session") for m in one.messages)
    assert sessions == one.sessions >= 4
    assert HEURISTIC.count_messages(one.messages) > 2 * 8_000  # long enough to compact at 8K
    for value, question in one.facts:
        assert len(value.split()) >= 2  # a phrase, not a number
        assert not find_value(value, question)
        hits = [m for m in one.messages if find_value(value, m.text)]
        assert len(hits) == 1
        assert hits[0].role == "user"
        # the lossy summariser keeps first sentences only: it can never carry an answer
        assert not find_value(value, first_sentence(hits[0].text))


def test_naive_baseline_at_the_real_token_budget_fits_by_the_exact_count() -> None:
    from benchmarks.fidelity.strategies import real_counter

    exact = real_counter()
    if exact is None:
        pytest.skip("the o200k tokenizer is not available offline")
    conv = generate(2, "mixed", target_tokens=8_000, n_facts=4)
    for budget in (1_000, 3_000):
        out = naive_drop_oldest(conv.messages, budget, exact)
        assert exact.count_messages(out) <= budget
        assert len(out) < len(conv.messages)


def test_held_out_tool_heavy_sessions_have_large_outputs_and_end_with_a_question() -> None:
    from benchmarks.fidelity.tool_heavy import session

    first, again = session(3, 40_000), session(3, 40_000)
    assert [m.model_dump() for m in first.messages] == [m.model_dump() for m in again.messages]
    assert first.tokens >= 40_000
    assert first.messages[0].role == "system"
    assert first.messages[-1].role == "user"
    assert check_sequence(first.messages).valid
    outputs = [HEURISTIC.count_message(m) for m in first.messages if m.role == "tool"]
    assert max(outputs) > 8_000  # larger than the headline budget on its own
    assert all(v in "".join(m.text for m in first.messages) for v in first.planted)


def test_fill_rows_hold_their_invariants_on_the_smoke_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(bench_fidelity.SMOKE_ENV, "1")
    rows = bench_fidelity.fill_rows(quick=True)
    if not rows:
        pytest.skip("the o200k vocabulary is not available offline")
    names = [r.name for r in rows]
    assert any("fill @8K" in n and "held-out" in n for n in names)
    assert all(r.met for r in rows if r.invariant)
    # Per set, the 0.9× row counts with the model's counter (exact, no margin) and the
    # default estimator's row carries the target its margin leaves room for.
    for name in ("development", "held-out"):
        exact = [r for r in rows if "model's counter" in r.name and f"{name} set" in r.name]
        estimated = [r for r in rows if "default estimator" in r.name and f"{name} set" in r.name]
        assert len(exact) == len(estimated) == 1
        assert exact[0].target == "≥ 0.9× naive (real budget)"
        assert exact[0].baseline == estimated[0].baseline  # the same naive runs
        # 0.9 × (1 − the default margin): 0.81× with o200k's 10%
        assert f"{0.9 * (1 - HEURISTIC.margin):.2f}×" in estimated[0].target
    assert bench_fidelity.budget_margin(bench_fidelity.model_counter()) == 0
