"""The seed's estimator (by name), exactly; the default heuristic; caching; pluggability."""

from __future__ import annotations

import copy
import pickle

import pytest

from ctxstack.errors import ConfigError, TokenizerUnavailableError
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import (
    DEFAULT_COUNTER,
    HEURISTIC,
    SEED_HEURISTIC,
    HeuristicCounter,
    SeedHeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    estimate_messages_tokens,
    estimate_tokens,
)
from ctxstack.tokens._counter import (
    MEMO_MIN_MESSAGES,
    MessageListMemo,
    common_prefix,
    heuristic_text_tokens,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a" * 400, 100),
        ("中" * 100, 66),
        ("Hello你好World世界", 5),
        ("", 0),
        ("a", 1),  # non-empty content is at least one token
        ("ab", 1),
        ("é", 1),
        ("😀" * 3, 2),  # emoji: 3 non-ASCII code points / 1.5
        ("日本語のテキスト" * 3, 16),
    ],
)
def test_seed_formula_exact_values(text: str, expected: int) -> None:
    assert heuristic_text_tokens(text) == expected
    assert SEED_HEURISTIC.count_parts(text) == expected
    assert SeedHeuristicCounter().count_text(text) == expected


def test_the_default_counter_is_the_bpe_heuristic_not_the_seed() -> None:
    assert DEFAULT_COUNTER is HEURISTIC
    assert isinstance(HEURISTIC, HeuristicCounter)
    assert HEURISTIC.cache_key != SEED_HEURISTIC.cache_key
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_tokens(text) == HEURISTIC.count_text(text) != heuristic_text_tokens(text)


def test_images_cost_765_each_and_text_parts_join() -> None:
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AA"))
    parts = [TextPart(text="a" * 40), img, TextPart(text="b" * 39), img]
    # "a"*40 + "\n" + "b"*39 = 80 chars -> 20 tokens, plus two images
    assert SEED_HEURISTIC.count_parts(parts) == 20 + 2 * 765
    joined = "a" * 40 + "\n" + "b" * 39
    assert estimate_tokens(parts) == HEURISTIC.count_text(joined) + 2 * 765


def test_message_overhead_and_list_total() -> None:
    msgs = [ChatMessage.system("a" * 40), ChatMessage.user("中" * 3)]
    assert SEED_HEURISTIC.count_message(msgs[0]) == 4 + 10
    assert SEED_HEURISTIC.count_message(msgs[1]) == 4 + 2
    assert estimate_messages_tokens(msgs, SEED_HEURISTIC) == 20
    assert HEURISTIC.count_message(msgs[0]) == 4 + HEURISTIC.count_text("a" * 40)
    assert estimate_messages_tokens(msgs) == 8 + sum(
        HEURISTIC.count_text(m.text) for m in msgs)


def test_empty_message_costs_only_overhead() -> None:
    assert HEURISTIC.count_message(ChatMessage.assistant("")) == 4
    assert SEED_HEURISTIC.count_message(ChatMessage.assistant("")) == 4


def test_tool_calls_count() -> None:
    bare = ChatMessage.assistant(None, tool_calls=[ToolCall(id="1", name="f", arguments={})])
    big = ChatMessage.assistant(
        None, tool_calls=[ToolCall(id="1", name="f", arguments={"q": "x" * 400})]
    )
    for counter in (HEURISTIC, SEED_HEURISTIC):
        assert counter.count_message(bare) >= 5
        assert counter.count_message(big) >= 4 + counter.count_text("x" * 400)
    assert SEED_HEURISTIC.count_message(big) >= 4 + 100


def test_estimates_are_cached_per_message() -> None:
    class Counting(HeuristicCounter):
        calls = 0

        def count_text(self, text: str) -> int:
            Counting.calls += 1
            return super().count_text(text)

    counter = Counting()
    msgs = [ChatMessage.user(f"message {i}") for i in range(50)]
    first = counter.count_messages(msgs)
    calls_after_first = Counting.calls
    assert counter.count_messages(msgs) == first
    assert Counting.calls == calls_after_first == 50


def test_changed_message_is_re_estimated() -> None:
    m = ChatMessage.user("a" * 40)
    assert SEED_HEURISTIC.count_message(m) == 14
    assert SEED_HEURISTIC.count_message(m.replace(content="a" * 400)) == 104
    longer = m.replace(content="a sentence of several words. " * 40)
    assert HEURISTIC.count_message(m) == 4 + HEURISTIC.count_text("a" * 40)
    assert HEURISTIC.count_message(longer) == 4 + HEURISTIC.count_text(longer.text)
    assert HEURISTIC.count_message(longer) > HEURISTIC.count_message(m)


def test_heuristic_is_a_token_counter() -> None:
    assert isinstance(HEURISTIC, TokenCounter)


def test_custom_counter_is_used() -> None:
    class OnePerChar(HeuristicCounter):
        @property
        def cache_key(self) -> str:
            return "one-per-char"

        def count_text(self, text: str) -> int:
            return len(text)

    msgs = [ChatMessage.user("abcd")]
    assert estimate_messages_tokens(msgs, OnePerChar()) == 8
    assert estimate_messages_tokens(msgs) == 5  # separate cache entry per counter
    assert estimate_messages_tokens(msgs, SEED_HEURISTIC) == 5


def test_heuristic_family_and_margin_are_validated() -> None:
    with pytest.raises(ConfigError, match="family"):
        HeuristicCounter("p50k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="margin"):
        HeuristicCounter(margin=0.7)
    cl100k = HeuristicCounter("cl100k")
    assert cl100k.cache_key != HEURISTIC.cache_key  # cached figures never mix families
    # the two vocabularies differ most on CJK: cl100k needs more tokens per character
    text = "这条命令修改某些全局用户权限和认证设置。只有数据库超级用户可以用这条命令。" * 5
    assert cl100k.count_text(text) > HEURISTIC.count_text(text)


def test_tiktoken_never_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    pytest.importorskip("tiktoken")
    import tiktoken.registry

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache: must not fetch
    # and no vocabulary already loaded by an earlier test of this process
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    with pytest.raises(TokenizerUnavailableError, match="not available offline"):
        TiktokenCounter("cl100k_base")


def test_tiktoken_unknown_encoding() -> None:
    pytest.importorskip("tiktoken")
    with pytest.raises(TokenizerUnavailableError):
        TiktokenCounter("no_such_encoding")


# ---------------------------------------------------------------------------- list memo


class _CountingTexts(HeuristicCounter):
    """Counts how many texts it estimates (a per-message cache miss each)."""

    def __init__(self, key: str = "counting-texts") -> None:
        super().__init__()
        self.key = key
        self.texts = 0

    @property
    def cache_key(self) -> str:
        return self.key

    def count_text(self, text: str) -> int:
        self.texts += 1
        return super().count_text(text)


def _long_list(n: int = MEMO_MIN_MESSAGES + 8) -> list[ChatMessage]:
    return [ChatMessage.user(f"message {i}: " + "words and numbers 42 " * (i % 7))
            for i in range(n)]


def test_the_memo_matches_by_identity_never_by_value() -> None:
    msgs = _long_list()
    a, b = msgs[0], msgs[0].model_copy()
    assert a == b  # equal values ...
    assert common_prefix([a, a], [a, b]) == 1  # ... but not the same object
    assert common_prefix([a], [a, b]) == 1
    assert common_prefix([], [a]) == 0
    counter = _CountingTexts()
    total = counter.count_messages(msgs)
    copies = [m.model_copy() for m in msgs]  # equal, fresh objects, empty caches
    assert counter.count_messages(copies) == total
    assert counter.texts == 2 * len(msgs)  # every copy was estimated, none taken as seen


def test_a_grown_list_is_counted_exactly_and_only_its_new_messages_estimated() -> None:
    counter = _CountingTexts()
    msgs = _long_list()
    first = counter.count_messages(msgs)
    grown = [*msgs, ChatMessage.assistant("a new answer"), ChatMessage.user("and a question")]
    expected = first + sum(counter.count_message(m) for m in grown[-2:])
    estimated = counter.texts
    assert counter.count_messages(grown) == expected
    assert counter.count_messages(tuple(grown)) == expected
    assert counter.texts == estimated  # nothing estimated twice
    assert counter.count_messages(msgs[:10] + msgs[10:]) == first  # a new list, same objects


def test_a_counter_with_a_new_cache_key_does_not_reuse_the_memo() -> None:
    counter = _CountingTexts("rule-a")
    msgs = _long_list()
    before = counter.count_messages(msgs)
    counter.key = "rule-b"  # a different counting rule from now on
    counter.count_text = lambda text: len(text)  # type: ignore[method-assign]
    after = counter.count_messages(msgs)
    assert after == sum(counter.message_overhead + len(m.text) for m in msgs)
    assert after != before


def test_a_messages_list_memo_is_owned_and_clearable() -> None:
    memo = MessageListMemo()
    counter = HeuristicCounter()
    msgs = _long_list(5)  # any length: the owner decides
    assert memo.last == ()
    assert memo.count(counter, msgs) == sum(counter.count_message(m) for m in msgs)
    assert list(memo.last) == msgs
    assert memo.last is not msgs  # a copy: the caller's list may change
    memo.clear()
    assert memo.last == ()


def test_copying_or_pickling_a_counter_leaves_its_memo_behind() -> None:
    msgs = _long_list()
    counter = HeuristicCounter("cl100k")
    total = counter.count_messages(msgs)
    assert counter._memo is not None
    clone = copy.copy(counter)
    assert clone._memo is None
    assert clone.family == "cl100k"
    assert clone.count_messages(msgs) == total
    seed = SeedHeuristicCounter()  # a counter with nothing unpicklable of its own
    seed_total = seed.count_messages(msgs)
    assert seed._memo is not None
    unpickled = pickle.loads(pickle.dumps(seed))
    assert unpickled._memo is None
    assert unpickled.count_messages(msgs) == seed_total
