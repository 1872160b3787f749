"""Retry policy, error classification from real provider shapes, and retries over HTTP."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack.budget import ModelBudget
from ctxstack.errors import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    RateLimitError,
    ServerError,
)
from ctxstack.llm.classify import (
    classify_status,
    is_context_overflow,
    is_retryable,
    parse_retry_after,
    retry_after_from_message,
)
from ctxstack.llm.retry import RetryEvent, RetryPolicy, retry_async
from ctxstack.llm.stub import StubReply, StubServer
from ctxstack.messages import ChatMessage

QUESTION = [ChatMessage.user("hello")]


# --------------------------------------------------------------------------- classification
def openai_error(message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"message": message, "type": type, "param": param, "code": code}


OVERFLOWS = [
    pytest.param(400, openai_error(
        "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 8227 tokens. Please reduce the length of the messages.", param="messages",
        code="context_length_exceeded"), id="openai"),
    pytest.param(400, {"error": openai_error(
        "This model's maximum context length is 4096 tokens. However, you requested 4222 "
        "tokens (1222 in the messages, 3000 in the completion). Please reduce the length of "
        "the messages or completion.")}, id="openai-wrapped-no-code"),
    pytest.param(400, {"object": "error", "message": "This model's maximum context length is "
                       "4096 tokens. However, your request has 4176 input tokens.",
                       "type": "BadRequestError", "param": None, "code": 400}, id="vllm"),
    pytest.param(400, openai_error(
        "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum "
        "context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - "
        "2778).", type="BadRequestError"), id="vllm-max-tokens"),
    pytest.param(500, {"error": {"code": 500, "message": "the request exceeds the available "
                       "context size. try increasing the context size or enable context shift",
                       "type": "exceed_context_size_error", "n_prompt_tokens": 1407,
                       "n_ctx": 256}}, id="llama.cpp-500"),
    pytest.param(400, {"error": "the input length exceeds the context length"}, id="ollama"),
    pytest.param(400, {"type": "error", "error": {"type": "invalid_request_error",
                       "message": "prompt is too long: 209062 tokens > 199999 maximum"}},
                 id="anthropic"),
    pytest.param(400, {"type": "error", "error": {"type": "invalid_request_error", "message":
                       "input length and `max_tokens` exceed context limit: 199759 + 8192 > "
                       "200000, decrease input length or `max_tokens` and try again"}},
                 id="anthropic-max-tokens"),
    pytest.param(400, [{"error": {"code": 400, "message": "The input token count (1200293) "
                        "exceeds the maximum number of tokens allowed (1048576).",
                        "status": "INVALID_ARGUMENT"}}], id="gemini"),
    pytest.param(422, {"error": "Input validation error: `inputs` tokens + `max_new_tokens` "
                       "must be <= 4096. Given: 4000 `inputs` tokens and 500 `max_new_tokens`",
                       "error_type": "validation"}, id="tgi"),
    pytest.param(400, openai_error("Prompt contains 40000 tokens and 0 draft tokens, too large "
                                   "for model with 32768 maximum context length"), id="mistral"),
    pytest.param(400, openai_error("Context size has been exceeded."), id="lmstudio"),
    pytest.param(400, {"message": "Input is too long for requested model."}, id="bedrock"),
    pytest.param(400, openai_error("This model's maximum prompt length is 131072 but the "
                                   "request contains 140000 tokens."), id="xai"),
]


@pytest.mark.parametrize(("status", "body"), OVERFLOWS)
def test_real_overflow_shapes_are_context_overflow(status: int, body: object) -> None:
    error = classify_status(status, body)
    assert isinstance(error, ContextOverflowError)
    assert error.status_code == status
    assert not is_retryable(error)


NOT_OVERFLOWS = [
    pytest.param(429, openai_error(
        "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit "
        "30000, Requested 36278. The input or output tokens must be reduced in order to run "
        "successfully.", type="tokens", code="rate_limit_exceeded"), RateLimitError,
        id="openai-tpm-request-too-large"),
    pytest.param(429, openai_error(
        "Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): Limit "
        "10000, Used 8554, Requested 3082. Please try again in 9.816s.", type="tokens",
        code="rate_limit_exceeded"), RateLimitError, id="openai-tpm"),
    pytest.param(429, {"error": {"code": "rate_limit_error", "message": "This request would "
                       "exceed the rate limit for your organization of 20,000 input tokens per "
                       "minute. Please reduce the prompt length or the maximum tokens "
                       "requested, or try again later."}}, RateLimitError,
                 id="anthropic-input-tpm"),
    pytest.param(413, openai_error(
        "Request too large for model `llama3-70b` on tokens per minute (TPM): Limit 6000, "
        "Requested 7200, please reduce your message size and try again.", type="tokens",
        code="rate_limit_exceeded"), RateLimitError, id="groq-413-tpm"),
    pytest.param(400, openai_error("Invalid value for 'temperature': must be <= 2."),
                 BadRequestError, id="plain-400"),
    pytest.param(404, openai_error("The model `gpt-9` does not exist", code="model_not_found"),
                 BadRequestError, id="404"),
    pytest.param(500, openai_error("The server had an error while processing your request.",
                                   type="server_error"), ServerError, id="500"),
    pytest.param(503, "upstream connect error", ServerError, id="503-text"),
    pytest.param(529, {"type": "error", "error": {"type": "overloaded_error",
                       "message": "Overloaded"}}, ServerError, id="anthropic-529"),
    pytest.param(401, openai_error("Incorrect API key provided", code="invalid_api_key"),
                 AuthenticationError, id="401"),
    pytest.param(403, openai_error("You are not allowed to sample from this model"),
                 AuthenticationError, id="403"),
    pytest.param(408, None, LLMTimeoutError, id="408"),
]


@pytest.mark.parametrize(("status", "body", "expected"), NOT_OVERFLOWS)
def test_other_failures_are_classified_by_kind(status: int, body: object,
                                               expected: type[LLMError]) -> None:
    error = classify_status(status, body)
    assert type(error) is expected
    assert not isinstance(error, ContextOverflowError)
    assert not is_context_overflow(status, body)


def test_rate_limit_retry_after_from_header_then_message() -> None:
    body = openai_error("Rate limit reached … Please try again in 1m19.2s.",
                        code="rate_limit_exceeded")
    error = classify_status(429, body, {"Retry-After": "7"})
    assert isinstance(error, RateLimitError)
    assert error.retry_after == 7.0
    error = classify_status(429, body)
    assert isinstance(error, RateLimitError)
    assert error.retry_after == pytest.approx(79.2)


def test_a_request_larger_than_the_whole_quota_is_not_retried() -> None:
    too_large = classify_status(429, openai_error(
        "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 36278."))
    busy = classify_status(429, openai_error(
        "Rate limit reached on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000."))
    assert isinstance(too_large, RateLimitError)
    assert not is_retryable(too_large)
    assert isinstance(busy, RateLimitError)
    assert is_retryable(busy)


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "2"}, 2.0),
    ({"retry-after": "0.25"}, 0.25),
    ({"retry-after-ms": "150", "retry-after": "9"}, 0.15),
    ({"Retry-After": "-3"}, 0.0),
    ({"Retry-After": "soon"}, None),
    ({}, None),
    (None, None),
])
def test_parse_retry_after_seconds(headers: dict[str, str] | None,
                                   expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


@pytest.mark.parametrize(("text", "expected"), [
    ("Please try again in 200ms.", 0.2),
    ("Please try again in 9.816s.", 9.816),
    ("Please try again in 1m19.2s.", 79.2),
    ("Please try again in 2m.", 120.0),
    ("Please try again later.", None),
])
def test_retry_after_from_message(text: str, expected: float | None) -> None:
    value = retry_after_from_message(text)
    assert value == (pytest.approx(expected) if expected is not None else None)


# --------------------------------------------------------------------------- policy (pure)
def test_backoff_doubles_is_capped_and_jittered_down_only() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, jitter=0.5)
    assert [policy.backoff(n, 0.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.backoff(2, 0.999999) == pytest.approx(0.5, rel=1e-5)
    assert RetryPolicy(jitter=0).backoff(3, 0.9) == 2.0


@settings(max_examples=60, deadline=None)
@given(attempt=st.integers(1, 40), draw=st.floats(0, 1, exclude_max=True),
       base=st.floats(0, 5), cap=st.floats(0, 60), jitter=st.floats(0, 1))
def test_backoff_stays_within_bounds(attempt: int, draw: float, base: float, cap: float,
                                     jitter: float) -> None:
    policy = RetryPolicy(base_delay=base, max_delay=cap, jitter=jitter)
    delay = policy.backoff(attempt, draw)
    assert 0 <= delay <= min(cap, base * 2 ** (attempt - 1)) + 1e-9
    assert delay >= (1 - jitter) * min(cap, base * 2 ** (attempt - 1)) - 1e-9


def test_next_delay_decisions() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=1.0, jitter=0.0, max_total_time=10,
                         max_retry_after=30)
    server = ServerError("boom", status_code=500)
    assert policy.next_delay(server, 1, 0.0, 0.5) == 1.0
    assert policy.next_delay(server, 2, 0.0, 0.5) == 2.0
    assert policy.next_delay(server, 3, 0.0, 0.5) is None  # attempts spent
    assert policy.next_delay(server, 1, 9.5, 0.5) is None  # would end past the total time
    limited = RateLimitError("slow down", retry_after=4.0)
    assert policy.next_delay(limited, 1, 0.0, 0.9) == 4.0  # exactly what the server asked
    assert policy.next_delay(RateLimitError("x", retry_after=31), 1, 0, 0) is None
    assert policy.next_delay(LLMConnectionError("refused"), 1, 0, 0) == 1.0
    assert policy.next_delay(LLMTimeoutError("slow"), 1, 0, 0) == 1.0
    for final in (ContextOverflowError("big"), AuthenticationError("key"),
                  BadRequestError("bad"), LLMError("other"), ValueError("bug")):
        assert policy.next_delay(final, 1, 0.0, 0.0) is None


async def test_retry_async_sleeps_per_policy_and_reraises_the_last_error() -> None:
    slept: list[float] = []
    events: list[RetryEvent] = []
    calls: list[int] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def always_500(attempt: int) -> str:
        calls.append(attempt)
        raise ServerError(f"boom {attempt}", status_code=500)

    policy = RetryPolicy(max_attempts=4, base_delay=0.1, jitter=0.0)
    with pytest.raises(ServerError, match="boom 4") as info:
        await retry_async(always_500, policy, sleep=sleep, on_retry=events.append)
    assert calls == [1, 2, 3, 4]
    assert slept == pytest.approx([0.1, 0.2, 0.4])
    assert [e.attempt for e in events] == [1, 2, 3]
    assert any("gave up after 4 attempts" in note for note in info.value.__notes__)


async def test_retry_async_stops_at_the_total_time_bound() -> None:
    clock = [0.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    async def flaky(attempt: int) -> str:
        clock[0] += 1.0  # each try takes a second
        raise LLMConnectionError("refused")

    policy = RetryPolicy(max_attempts=100, base_delay=1.0, max_delay=1.0, jitter=0.0,
                         max_total_time=5.0)
    with pytest.raises(LLMConnectionError):
        await retry_async(flaky, policy, sleep=sleep, clock=lambda: clock[0])
    assert clock[0] <= 5.0 + 1.0  # never started a wait that ends past the bound


async def test_retry_async_returns_first_success_and_never_retries_final_errors() -> None:
    attempts: list[int] = []

    async def second_time_lucky(attempt: int) -> str:
        attempts.append(attempt)
        if attempt == 1:
            raise RateLimitError("busy", retry_after=0.0)
        return "ok"

    assert await retry_async(second_time_lucky, RetryPolicy()) == "ok"
    assert attempts == [1, 2]

    async def overflow(attempt: int) -> str:
        attempts.append(attempt)
        raise ContextOverflowError("too long")

    attempts.clear()
    with pytest.raises(ContextOverflowError):
        await retry_async(overflow, RetryPolicy())
    assert attempts == [1]


# --------------------------------------------------------------------------- over HTTP
async def test_429_honours_retry_after_then_succeeds(stub: StubServer) -> None:
    llm = stub.client(budget=ModelBudget(), retry_policy=RetryPolicy(base_delay=0.001))
    stub.push(StubReply.rate_limited(retry_after=0.2), "finally")
    started = time.monotonic()
    result = await llm.chat(QUESTION)
    waited = time.monotonic() - started
    assert result.text == "finally"
    assert len(stub.requests) == 2
    assert waited >= 0.2  # the server's 0.2 s, not the 1 ms backoff
    await llm.aclose()


async def test_429_with_too_long_retry_after_raises_at_once(stub: StubServer) -> None:
    llm = stub.client(budget=ModelBudget(), retry_policy=RetryPolicy(max_retry_after=1.0))
    stub.push(StubReply.rate_limited(retry_after=120), "unused")
    with pytest.raises(RateLimitError) as info:
        await llm.chat(QUESTION)
    assert info.value.retry_after == 120.0
    assert len(stub.requests) == 1
    await llm.aclose()


async def test_500_is_retried_then_gives_up_after_the_bound(stub: StubServer) -> None:
    llm = stub.client(budget=ModelBudget(), max_retries=2,
                      retry_policy=RetryPolicy(max_attempts=3, base_delay=0.01))
    stub.fault = StubReply.server_error()
    with pytest.raises(ServerError, match="500") as info:
        await llm.chat(QUESTION)
    assert info.value.status_code == 500
    assert len(stub.requests) == 3
    assert any("gave up after 3 attempts" in n for n in info.value.__notes__)
    await llm.aclose()


async def test_5xx_then_success_and_max_retries_argument(stub: StubServer) -> None:
    llm = stub.client(budget=ModelBudget(), max_retries=1)
    assert llm.retry_policy.max_attempts == 2
    stub.push(StubReply.server_error(502), "recovered")
    assert (await llm.chat(QUESTION)).text == "recovered"
    no_retry = stub.client(budget=ModelBudget(), max_retries=0)
    stub.push(StubReply.server_error(503), "unused")
    with pytest.raises(ServerError):
        await no_retry.chat(QUESTION)
    assert len(stub.requests) == 3
    await llm.aclose()
    await no_retry.aclose()
