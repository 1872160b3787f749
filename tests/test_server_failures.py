"""What a failed turn tells the user (ctxstack.server.failures): each kind of failure is
classified by the dependency it stands for, and the text shown never carries a URL, a
host or a credential, whatever the exception's message held."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from ctxstack.errors import (
    AuthenticationError,
    ContextOverflowError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    RateLimitError,
)
from ctxstack.server.failures import (
    PUBLIC_MESSAGES,
    DependencyError,
    classify,
    failure_text,
    turn_failure_text,
)
from ctxstack.store.errors import NotFoundError, StorageError

SECRET = ("postgresql://admin:hunter2@10.0.0.7:5432/prod and "
          "https://api.internal.example/v1?key=sk-live-123")


@pytest.mark.parametrize(("exc", "dependency"), [
    (DependencyError("redis", SECRET), "redis"),
    (StorageError(f"commit failed on {SECRET}"), "database"),
    (RedisConnectionError(f"Error 111 connecting to {SECRET}"), "redis"),
    (LLMTimeoutError(f"no answer from {SECRET}"), "model"),
    (RateLimitError(f"429 from {SECRET}"), "model"),
    (NotFoundError("conversation 7 not found"), None),
    (ValueError("the agent refused"), None),
])
def test_failures_are_classified_by_the_dependency_they_stand_for(
        exc: BaseException, dependency: str | None) -> None:
    failure = classify(exc)
    if dependency is None:
        assert failure is None
        return
    assert failure is not None
    assert failure.dependency == dependency
    assert failure.status == 503
    assert "://" not in failure.message
    assert "hunter2" not in failure.message


@pytest.mark.parametrize("exc", [
    StorageError(f"commit failed on {SECRET}"),
    DependencyError("database", SECRET),
    RedisConnectionError(f"Error 111 connecting to {SECRET}"),
    LLMTimeoutError(f"no answer from {SECRET}"),
    LLMConnectionError(f"refused by {SECRET}"),
    AuthenticationError(f"401 from {SECRET}"),
    ContextOverflowError(f"too long for {SECRET}"),
    LLMError(f"HTTP 500 from {SECRET}"),
    ValueError(f"the agent could not parse {SECRET}"),
])
def test_the_text_a_user_reads_never_carries_a_url_host_or_credential(
        exc: BaseException) -> None:
    text = failure_text(exc)
    assert text.startswith("The turn failed: ")
    assert text.endswith("Your question is saved; you can retry or rephrase.")
    for leak in ("://", "hunter2", "10.0.0.7", "api.internal.example", "sk-live-123"):
        assert leak not in text, (type(exc).__name__, text)


def test_each_failure_reads_as_what_happened() -> None:
    assert "did not answer within the time limit" in turn_failure_text("LLMTimeoutError", "")
    assert "rate limiting" in turn_failure_text("RateLimitError", "")
    assert "no longer fits" in turn_failure_text("ContextOverflowError", "")
    assert "dependency is unavailable" in turn_failure_text("StorageError", SECRET)
    assert "dependency is unavailable" in failure_text(
        RedisConnectionError("Error 111 connecting to 127.0.0.1:6379"))
    # the agent's own refusal keeps its words, its URLs scrubbed
    refusal = turn_failure_text("InputError", "query: too long (see https://docs.x/limits)")
    assert "query: too long (see <url>)" in refusal
    assert turn_failure_text("InputError", "").startswith("The turn failed: InputError.")
    assert set(PUBLIC_MESSAGES) == {"database", "redis", "model"}
