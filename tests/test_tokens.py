"""The seed's estimator, exactly, plus caching and the pluggable counter."""

from __future__ import annotations

import pytest

from ctxstack.errors import TokenizerUnavailableError
from ctxstack.messages import ChatMessage, ImagePart, ImageURL, TextPart, ToolCall
from ctxstack.tokens import (
    HEURISTIC,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    estimate_messages_tokens,
    estimate_tokens,
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
def test_exact_values(text: str, expected: int) -> None:
    assert heuristic_text_tokens(text) == expected
    assert estimate_tokens(text) == expected


def test_images_cost_765_each_and_text_parts_join() -> None:
    img = ImagePart(image_url=ImageURL(url="data:image/png;base64,AA"))
    parts = [TextPart(text="a" * 40), img, TextPart(text="b" * 39), img]
    # "a"*40 + "\n" + "b"*39 = 80 chars -> 20 tokens, plus two images
    assert estimate_tokens(parts) == 20 + 2 * 765


def test_message_overhead_and_list_total() -> None:
    msgs = [ChatMessage.system("a" * 40), ChatMessage.user("中" * 3)]
    assert HEURISTIC.count_message(msgs[0]) == 4 + 10
    assert HEURISTIC.count_message(msgs[1]) == 4 + 2
    assert estimate_messages_tokens(msgs) == 20


def test_empty_message_costs_only_overhead() -> None:
    assert HEURISTIC.count_message(ChatMessage.assistant("")) == 4


def test_tool_calls_count() -> None:
    bare = ChatMessage.assistant(None, tool_calls=[ToolCall(id="1", name="f", arguments={})])
    big = ChatMessage.assistant(
        None, tool_calls=[ToolCall(id="1", name="f", arguments={"q": "x" * 400})]
    )
    assert HEURISTIC.count_message(bare) >= 5
    assert HEURISTIC.count_message(big) >= 4 + 100


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
    assert HEURISTIC.count_message(m) == 14
    assert HEURISTIC.count_message(m.replace(content="a" * 400)) == 104


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


def test_tiktoken_never_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    pytest.importorskip("tiktoken")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache: must not fetch
    with pytest.raises(TokenizerUnavailableError, match="not available offline"):
        TiktokenCounter("cl100k_base")


def test_tiktoken_unknown_encoding() -> None:
    pytest.importorskip("tiktoken")
    with pytest.raises(TokenizerUnavailableError):
        TiktokenCounter("no_such_encoding")
