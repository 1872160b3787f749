"""bench_guard's baseline is the library itself with its caches off, checked to agree."""

from __future__ import annotations

import pytest

from benchmarks import bench_guard
from ctxstack import ChatMessage, ContextGuard, ImagePart, TextPart, ToolCall
from ctxstack.messages import ImageURL
from ctxstack.tokens import HEURISTIC


def _messages() -> list[ChatMessage]:
    call = ToolCall(id="c1", name="fetch", arguments={"url": "https://ex.com/ä"})
    return [
        ChatMessage.system("You are terse."),
        ChatMessage.user([TextPart(text="Look: 画像"),
                          ImagePart(image_url=ImageURL(url="data:image/png;base64,AA=="))]),
        ChatMessage.assistant("Fetching.", tool_calls=[call]),
        ChatMessage.tool("c1", "row 1: 12 units\n" * 40),
        ChatMessage.user("Summarise.", pinned=True, metadata={"kind": "query"}),
    ]


def test_the_uncached_counter_counts_exactly_like_the_heuristic_and_caches_nothing() -> None:
    messages = _messages()
    assert bench_guard.UNCACHED.count_messages(messages) == HEURISTIC.count_messages(messages)
    fresh = _messages()
    bench_guard.UNCACHED.count_messages(fresh)
    assert all(not m.__pydantic_private__["_token_cache"] for m in fresh)  # type: ignore[index]


async def test_a_timed_pair_refuses_a_conversation_over_budget() -> None:
    # Both guards must stay on the under-budget path, or the timings compare nothing.
    messages = _messages()
    cached = ContextGuard(default_budget=50, max_message_chars=bench_guard.MAX_CHARS)
    baseline = bench_guard.uncached_guard(50)
    with pytest.raises(AssertionError, match="left the under-budget path"):
        await bench_guard.timed_pair(cached, baseline, messages, "test")


async def test_a_baseline_that_counts_differently_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = _messages()
    monkeypatch.setattr(bench_guard.UncachedCounter, "count_messages",
                        lambda self, ms: 1 + sum(self.count_message(m) for m in ms))
    cached = ContextGuard(default_budget=10_000, max_message_chars=bench_guard.MAX_CHARS)
    baseline = bench_guard.uncached_guard(10_000)
    with pytest.raises(AssertionError, match="not the same computation"):
        await bench_guard.timed_pair(cached, baseline, messages, "test")


async def test_forgetting_vetting_makes_the_baseline_scan_again() -> None:
    messages = _messages()
    baseline = bench_guard.uncached_guard(10_000)
    await baseline.check_and_compact(messages)
    key = baseline._vetted_key
    assert all(key in m.__pydantic_private__["_token_cache"] for m in messages)  # type: ignore[index]
    bench_guard.forget_vetting(baseline, messages)
    assert not any(key in m.__pydantic_private__["_token_cache"] for m in messages)  # type: ignore[index]
