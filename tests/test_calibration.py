"""CalibratingCounter: learns a bounded, smoothed per-model factor from reported usage."""

from __future__ import annotations

import random

import pytest

from ctxstack.errors import ConfigError
from ctxstack.llm import LLMResult, ScriptedLLM, Usage
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import HEURISTIC, CalibratingCounter, TokenCounter


def _conversation(rng: random.Random, n: int) -> list[ChatMessage]:
    return [
        ChatMessage.user("".join(rng.choice("abcdefgh ") for _ in range(rng.randint(200, 2000))))
        for _ in range(n)
    ]


def test_converges_toward_a_known_factor_on_synthetic_data() -> None:
    rng = random.Random(7)
    true_factor = 1.37
    counter = CalibratingCounter()
    errors = []
    for _ in range(40):
        msgs = _conversation(rng, rng.randint(1, 6))
        base = counter.base_count(msgs)
        reported = round(base * true_factor * rng.uniform(0.97, 1.03))  # provider noise
        assert counter.observe(base, reported)
        errors.append(abs(counter.factor() - true_factor))
    assert errors[-1] < 0.05
    assert errors[-1] < errors[0] / 5
    # Estimates now carry the factor on top of the cached base figure.
    msgs = _conversation(rng, 3)
    base = HEURISTIC.count_messages(msgs)
    assert counter.count_messages(msgs) == pytest.approx(base * true_factor, rel=0.05)
    assert counter.samples() == 40


def test_one_outlier_moves_the_factor_only_by_the_smoothing_share() -> None:
    counter = CalibratingCounter(smoothing=0.3)
    for _ in range(30):
        counter.observe(1000, 1200)
    settled = counter.factor()
    counter.observe(1000, 2400)
    assert counter.factor() == pytest.approx(settled + 0.3 * (2.4 - settled))


@pytest.mark.parametrize(("ratio", "bound"), [(5.0, 3.0), (0.3, 0.5)])
def test_factor_stays_within_bounds(ratio: float, bound: float) -> None:
    counter = CalibratingCounter(min_factor=0.5, max_factor=3.0)
    for _ in range(50):
        assert counter.observe(1000, round(1000 * ratio))
    assert counter.factor() == pytest.approx(bound)


@pytest.mark.parametrize(
    ("estimated", "reported"),
    [
        (1000, 0),  # provider reported nothing
        (1000, 100_000),  # ratio 100: a wrong number, not a tokenizer difference
        (1000, 100),  # ratio 0.1
        (10, 30),  # too small to learn from
        (0, 500),
    ],
)
def test_absurd_samples_are_ignored(estimated: int, reported: int) -> None:
    counter = CalibratingCounter()
    counter.observe(1000, 1500)
    before = counter.factor()
    assert not counter.observe(estimated, reported)
    assert counter.factor() == before
    assert counter.rejected == 1


def test_factors_are_per_model_with_the_unnamed_factor_as_fallback() -> None:
    counter = CalibratingCounter()
    for _ in range(30):
        counter.observe(1000, 2000, model="small-vocab")
        counter.observe(1000, 1100, model="gpt-x")
    assert counter.factor("small-vocab") == pytest.approx(2.0, rel=0.01)
    assert counter.factor("gpt-x") == pytest.approx(1.1, rel=0.01)
    assert counter.factor("never-seen") == 1.0
    counter.observe(1000, 1300)  # unnamed
    assert counter.factor("never-seen") == pytest.approx(1.09)
    view = counter.for_model("small-vocab")
    msg = ChatMessage.user("x" * 4000)
    assert view.count_message(msg) == 2 * HEURISTIC.count_message(msg)
    # The view shares what the counter learns.
    view.observe(1000, 2000)
    assert counter.samples("small-vocab") == 31


def test_learning_never_invalidates_the_per_message_cache() -> None:
    counter = CalibratingCounter()
    msg = ChatMessage.user("y" * 800)
    first = counter.count_message(msg)
    assert msg._token_cache[HEURISTIC.cache_key] == first  # base figure, cached once
    assert counter.cache_key != HEURISTIC.cache_key
    assert counter.cache_key not in msg._token_cache
    for _ in range(20):
        counter.observe(1000, 1500)
    assert msg._token_cache[HEURISTIC.cache_key] == first
    assert counter.count_message(msg) == -(-first * counter.factor() // 1)  # ceil
    assert counter.count_text("") == 0
    assert isinstance(counter, TokenCounter)


async def test_observe_result_learns_from_reported_usage_and_skips_estimates() -> None:
    counter = CalibratingCounter()
    msgs = [ChatMessage.user("z" * 2000)]
    base = counter.base_count(msgs)
    reported = LLMResult(message=ChatMessage.assistant("ok"),
                         usage=Usage(input_tokens=base * 2, calls=1), model="m1")
    assert counter.observe_result(msgs, reported)
    assert counter.samples("m1") == 1
    assert counter.factor("m1") > 1.0
    estimated = LLMResult(message=ChatMessage.assistant("ok"),
                          usage=Usage(input_tokens=base * 2, estimated=True))
    assert not counter.observe_result(msgs, estimated)
    # ScriptedLLM reports the heuristic estimate itself: calibration stays at 1.0.
    llm = ScriptedLLM(handler=lambda m, t: "fine")
    plain = CalibratingCounter()
    for _ in range(5):
        result = await llm.chat(msgs)
        assert plain.observe_result(msgs, result, model="scripted")
    assert plain.factor("scripted") == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_factor": 0},
        {"min_factor": 1.5},
        {"max_factor": 0.9},
        {"max_factor": float("inf")},
        {"smoothing": 0},
        {"smoothing": 1.5},
        {"min_sample_tokens": 0},
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        CalibratingCounter(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- per content kind
def test_content_kinds_are_told_apart() -> None:
    from ctxstack.tokens._model import CONTENT_KINDS, content_kind

    assert CONTENT_KINDS[content_kind("The meeting moved to Thursday; bring the notes.")] \
        == "prose"
    assert CONTENT_KINDS[content_kind('{"id": 7, "tags": ["a", "b"], "ok": true}')] == "code"
    assert CONTENT_KINDS[content_kind("def f(x_1):\n    return {k: v for k, v in x_1}")] \
        == "code"
    assert CONTENT_KINDS[content_kind("会議は木曜日に変更されました。資料を持ってきてください。")] \
        == "cjk"


def test_per_kind_factors_are_learnt_from_mixed_calls() -> None:
    """A provider whose tokenizer bills CJK at 1.6x the heuristic and everything else at
    1.0x: one overall factor cannot be right for both; per-kind factors are."""
    from ctxstack.tokens._calibration import message_kind
    from ctxstack.tokens._model import CONTENT_KINDS

    prose = ChatMessage.user("Please summarise the quarterly report for the board. " * 12)
    cjk = ChatMessage.user("四半期報告書を取締役会向けに要約してください。" * 12)
    assert CONTENT_KINDS[message_kind(prose)] == "prose"
    assert CONTENT_KINDS[message_kind(cjk)] == "cjk"

    def billed(msgs: list[ChatMessage]) -> int:
        return sum(round(HEURISTIC.count_message(m) * (1.6 if m is cjk else 1.0))
                   for m in msgs)

    counter = CalibratingCounter(model="m", max_factor=3.0)
    for mix in ([prose], [cjk], [prose, cjk], [cjk, cjk, prose], [prose, prose]):
        assert counter.observe_messages(mix, billed(mix))
    assert counter.kind_factor(CONTENT_KINDS.index("cjk")) == pytest.approx(1.6, rel=0.08)
    assert counter.kind_factor(CONTENT_KINDS.index("prose")) == pytest.approx(1.0, rel=0.08)
    for mix in ([cjk, prose, cjk], [prose] * 3, [cjk] * 3):
        assert counter.count_messages(mix) == pytest.approx(billed(mix), rel=0.08)
    single = CalibratingCounter(model="m")
    for mix in ([prose], [cjk], [prose, cjk], [cjk, cjk, prose], [prose, prose]):
        single.observe(HEURISTIC.count_messages(mix), billed(mix))  # no kinds: one factor
    worst_single = max(abs(single.count_messages(m) - billed(m)) / billed(m)
                       for m in ([prose] * 3, [cjk] * 3))
    assert worst_single > 0.15  # what the per-kind factors fix
    # and what was learnt survives a round trip through export_state/load_state
    fresh = CalibratingCounter(model="m", max_factor=3.0)
    fresh.load_state(counter.export_state())
    assert fresh.count_messages([cjk, prose, cjk]) == counter.count_messages([cjk, prose, cjk])


def _reference_count(counter: CalibratingCounter, message: ChatMessage) -> int:
    """The calibrated per-message rule, written out plainly (no fast paths)."""
    import math

    from ctxstack.tokens._calibration import message_floor, message_kind
    from ctxstack.tokens._model import CONTENT_KINDS

    base = counter.base.count_message(message)
    if base <= 0:
        return base
    models = {model for model, _ in counter._state.kind_factors}
    if counter.model in models or None in models:
        factor = counter.kind_factor(message_kind(message))
    else:
        factor = counter.factor()
    assert 0 <= message_kind(message) < len(CONTENT_KINDS)
    return max(math.ceil(base * factor), message_floor(message, counter.base))


@pytest.mark.parametrize("min_factor", [0.5, 1.0])
def test_count_message_follows_the_rule_in_every_state(min_factor: float) -> None:
    """Per message (``count_message``, and ``count_each`` over a list): base count × the
    factor of its kind (the overall factor before any per-kind learning), rounded up,
    never below its floor — before learning, after
    overall and per-kind learning upward and downward, for another model's view, and
    after a state is loaded into a fresh counter."""
    rng = random.Random(11)
    texts = ["", "plain prose about the weather " * 9, '{"key": [1, 2, {"x": "y"}]}' * 5,
             "日本語の文章と中文的句子。" * 12, "x"]
    messages = [ChatMessage.user(t) for t in texts] + [
        ChatMessage.assistant(None, tool_calls=[ToolCall(id="c1", name="f", arguments={"a": 1})]),
        ChatMessage.tool("c1", "result " * 30),
        ChatMessage.user([TextPart(text="see"), ImagePart(image_url=ImageURL(url="data:x"))]),
    ]
    counter = CalibratingCounter(min_factor=min_factor, model="m")

    def check(c: CalibratingCounter) -> None:
        for m in messages:
            fresh = m.model_copy()  # no cached figures
            assert c.count_message(m) == _reference_count(c, fresh)
            assert c.count_message(fresh) == _reference_count(c, fresh)
        # count_each: the same figures in one pass, cached or not
        expected = [_reference_count(c, m.model_copy()) for m in messages]
        assert c.count_each(m.model_copy() for m in messages) == expected
        assert c.count_each(messages) == expected

    check(counter)
    for ratio in (0.6, 1.4):
        base = counter.base_count(messages)
        counter.observe(base, round(base * ratio))  # overall factor only
        check(counter)
    for ratio in (0.55, 1.8, 0.7):
        msgs = rng.sample(messages, 4)
        assert counter.observe_messages(msgs, round(counter.base_count(msgs) * ratio) + 40)
        check(counter)
        check(counter.for_model("other"))
    loaded = CalibratingCounter(min_factor=min_factor, model="m")
    loaded.load_state(counter.export_state())
    check(loaded)
    assert loaded._kinds_learnt() == counter._kinds_learnt()
