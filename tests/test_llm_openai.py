"""OpenAICompatibleLLM against the stub server over real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest

from ctxstack.budget import ModelBudget
from ctxstack.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    InputError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    MessageError,
    RateLimitError,
    ServerError,
)
from ctxstack.llm import LLM, ChatStream, Usage
from ctxstack.llm.openai import RAW_ARGUMENTS_KEY, OpenAICompatibleLLM
from ctxstack.llm.retry import RetryPolicy
from ctxstack.llm.stub import StubReply, StubServer, stub_usage
from ctxstack.messages import ChatMessage
from ctxstack.tokens import HEURISTIC
from tests.llm_fixtures import FAST_RETRY

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}

QUESTION = [ChatMessage.system("You are terse."), ChatMessage.user("What is 6 x 7?")]


@pytest.fixture
async def stub_client(stub: StubServer) -> AsyncIterator[OpenAICompatibleLLM]:
    llm = stub.client(retry_policy=FAST_RETRY, timeout=10.0, budget=ModelBudget())
    yield llm
    await llm.aclose()


async def collect(stream: ChatStream, into: list[str]) -> None:
    """Drain ``stream`` into ``into`` (so deltas seen before an error stay inspectable)."""
    async for delta in stream:
        into.append(delta)


# --------------------------------------------------------------------------- chat
async def test_plain_chat_returns_text_usage_and_sends_wire_messages(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push("It is 42.")
    result = await stub_client.chat(QUESTION)

    assert isinstance(stub_client, LLM)
    assert result.text == "It is 42."
    assert result.message.role == "assistant"
    assert result.finish_reason == "stop"
    assert result.model == "stub-model"
    prompt, completion = stub_usage(QUESTION, "It is 42.")
    assert result.usage == Usage(input_tokens=prompt, output_tokens=completion, calls=1)
    body = stub.last_request.body
    assert body["model"] == "stub-model"
    assert body["messages"] == [m.to_openai() for m in QUESTION]
    assert "max_tokens" not in body
    assert "tools" not in body
    assert stub.last_request.headers["authorization"] == "Bearer stub-key"


async def test_per_call_options_reach_the_server(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push("a", "b")
    await stub_client.chat(QUESTION, max_tokens=55, temperature=0.3,
                           response_format={"type": "json_object"}, seed=None)
    body = stub.last_request.body
    assert body["max_tokens"] == 55
    assert body["temperature"] == 0.3
    assert body["response_format"] == {"type": "json_object"}
    assert "seed" not in body  # None means "not set"

    reasoning = stub.client(max_tokens_param="max_completion_tokens",
                            default_options={"temperature": 0}, budget=ModelBudget())
    await reasoning.chat(QUESTION, max_tokens=9)
    body = stub.last_request.body
    assert body["max_completion_tokens"] == 9
    assert "max_tokens" not in body
    assert body["temperature"] == 0
    await reasoning.aclose()


async def test_the_sdk_style_options_reach_the_server_and_a_per_call_timeout_applies(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    """``extra_body`` and ``extra_headers`` (the OpenAI SDK's names) merge into the request;
    ``timeout`` bounds this call only: the stub answers after 3 s, within the client's 10 s,
    so a timeout error can only come from the call's own 0.3 s."""
    stub.push("a")
    await stub_client.chat(QUESTION, extra_body={"seed": 7, "metadata": {"run": "r1"}},
                           extra_headers={"X-Trace-Id": "t-42"})
    request = stub.last_request
    assert request.body["seed"] == 7
    assert request.body["metadata"] == {"run": "r1"}
    assert request.headers["x-trace-id"] == "t-42"
    once = stub.client(timeout=10.0, retry_policy=RetryPolicy.none(), budget=ModelBudget())
    stub.push(StubReply.text("late", delay=3), "on time")
    with pytest.raises(LLMTimeoutError):
        await once.chat(QUESTION, timeout=0.3)
    assert (await once.chat(QUESTION)).text == "on time"
    await once.aclose()


async def test_unknown_option_is_a_type_error_before_any_request(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    with pytest.raises(InputError, match="'temprature'"):
        await stub_client.chat(QUESTION, temprature=0.1)
    with pytest.raises(InputError, match="'bogus'"):
        stub_client.stream_chat(QUESTION, bogus=1)
    with pytest.raises(MessageError):
        await stub_client.chat([])
    assert stub.requests == []


async def test_cached_tokens_are_reported(stub: StubServer,
                                          stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.text("cached!", cached_tokens=3))
    result = await stub_client.chat(QUESTION)
    assert result.usage.cached_tokens == 3
    assert not result.usage.estimated


async def test_missing_usage_is_estimated_and_flagged(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.text("no usage here", include_usage=False))
    result = await stub_client.chat(QUESTION)
    assert result.usage.estimated
    assert result.usage.input_tokens == HEURISTIC.count_messages(QUESTION)
    assert result.usage.output_tokens == HEURISTIC.count_text("no usage here")
    assert result.usage.calls == 1


@pytest.mark.parametrize("prompt", [10**30, -7, True, "12", 3.5],
                         ids=["huge", "negative", "bool", "text", "float"])
async def test_absurd_usage_is_estimated_not_trusted(
    stub: StubServer, stub_client: OpenAICompatibleLLM, prompt: object
) -> None:
    """A figure that is not a count is not usage: the call is estimated instead (a 10**30
    would overflow every counter it is summed into, the service's 64-bit totals first)."""
    body = {"id": "chatcmpl-odd", "object": "chat.completion", "created": 0,
            "model": "stub", "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 1,
                      "prompt_tokens_details": {"cached_tokens": 10**30}}}
    stub.push(StubReply(raw_body=json.dumps(body)))
    result = await stub_client.chat(QUESTION)
    assert result.text == "ok"
    assert result.usage.estimated
    assert result.usage.input_tokens == HEURISTIC.count_messages(QUESTION)
    assert result.usage.cached_tokens == 0


async def test_an_absurd_cached_figure_alone_is_dropped(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    body = {"id": "chatcmpl-odd", "object": "chat.completion", "created": 0,
            "model": "stub", "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 1,
                      "prompt_tokens_details": {"cached_tokens": -3}}}
    stub.push(StubReply(raw_body=json.dumps(body)))
    result = await stub_client.chat(QUESTION)
    assert result.usage == Usage(input_tokens=40, output_tokens=1, calls=1)


# --------------------------------------------------------------------------- tools
async def test_tool_call_round_trip(stub: StubServer, stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.tool_call("get_weather", {"city": "Paris"}, call_id="call_w1"),
              "It is sunny in Paris.")
    messages = [ChatMessage.user("Weather in Paris?")]
    first = await stub_client.chat(messages, tools=[WEATHER_TOOL])

    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls is not None
    (call,) = first.message.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_w1", "get_weather", {"city": "Paris"})
    assert stub.last_request.body["tools"] == [WEATHER_TOOL]

    messages += [first.message, ChatMessage.tool("call_w1", '{"sky": "clear", "c": 21}')]
    second = await stub_client.chat(messages, tools=[WEATHER_TOOL])
    assert second.text == "It is sunny in Paris."
    sent = stub.last_request.body["messages"]
    assert sent[1]["tool_calls"] == [{"id": "call_w1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city":"Paris"}'}}]
    assert sent[2] == {"role": "tool", "content": '{"sky": "clear", "c": 21}',
                       "tool_call_id": "call_w1"}
    # The stub parsed what we sent back into the same messages.
    assert [m.to_openai() for m in stub.last_request.messages] == [
        m.to_openai() for m in messages]


async def test_parallel_tool_calls_keep_order(stub: StubServer,
                                              stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.tool_calls_of(("a", {"x": 1}), ("b", {"y": [1, 2]})))
    result = await stub_client.chat(QUESTION, tools=[WEATHER_TOOL])
    calls = result.message.tool_calls or []
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {"y": [1, 2]})]
    assert len({c.id for c in calls}) == 2


async def test_invalid_tool_arguments_are_kept_raw_not_fatal(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.tool_call("get_weather", '{"city": "Par'),
              StubReply.tool_call("get_weather", "[1, 2]"))
    broken = await stub_client.chat(QUESTION, tools=[WEATHER_TOOL])
    assert broken.message.tool_calls is not None
    assert broken.message.tool_calls[0].arguments == {RAW_ARGUMENTS_KEY: '{"city": "Par'}
    not_object = await stub_client.chat(QUESTION, tools=[WEATHER_TOOL])
    assert not_object.message.tool_calls is not None
    assert not_object.message.tool_calls[0].arguments == {RAW_ARGUMENTS_KEY: "[1, 2]"}


# --------------------------------------------------------------------------- streaming
async def test_stream_deltas_reassemble_the_text_and_usage_arrives(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    text = "Streaming works: 六かける七は四十二。 Done."
    stub.push(StubReply.text(text, chunk_size=5))
    stream = stub_client.stream_chat(QUESTION)
    deltas = [d async for d in stream]

    assert len(deltas) > 3
    assert "".join(deltas) == text
    prompt, completion = stub_usage(QUESTION, text)
    assert stream.usage == Usage(input_tokens=prompt, output_tokens=completion, calls=1)
    assert stream.done
    body = stub.last_request.body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_stream_without_usage_is_estimated(stub: StubServer,
                                                 stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.text("a reply the server does not count", include_usage=False))
    stream = stub_client.stream_chat(QUESTION)
    assert await stream.text() == "a reply the server does not count"
    assert stream.usage.estimated
    assert stream.usage.input_tokens == HEURISTIC.count_messages(QUESTION)
    assert stream.usage.output_tokens == HEURISTIC.count_text(
        "a reply the server does not count")


async def test_dropped_stream_raises_after_the_partial_deltas(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.dropped("abcdefghijklmnopqrstuvwxyz", after=3), "never used")
    stream = stub_client.stream_chat(QUESTION)
    received: list[str] = []
    with pytest.raises(LLMConnectionError, match="8 characters"):
        await collect(stream, received)
    assert "".join(received) == "abcdefgh"
    assert len(stub.requests) == 1  # text was already shown: never retried
    assert stub.pending == 1


async def test_stream_that_ends_cleanly_without_finish_is_incomplete(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.dropped("abcdefghijkl", after=2, mode="clean"))
    with pytest.raises(LLMConnectionError, match="incomplete"):
        await stub_client.stream_chat(QUESTION).text()


async def test_stream_dropped_before_any_text_is_retried(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.dropped("lost", after=1), "second try")
    stream = stub_client.stream_chat(QUESTION)
    assert await stream.text() == "second try"
    assert len(stub.requests) == 2


async def test_stream_error_before_start_is_typed(stub: StubServer,
                                                  stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.overflow())
    with pytest.raises(ContextOverflowError):
        await stub_client.stream_chat(QUESTION).text()
    stub.push(StubReply.rate_limited(retry_after=0.05), "after the wait")
    assert await stub_client.stream_chat(QUESTION).text() == "after the wait"


async def test_stream_can_be_closed_early(stub: StubServer,
                                          stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.text("x" * 400, chunk_size=2), "next")
    stream = stub_client.stream_chat(QUESTION)
    first = await anext(stream)
    await stream.aclose()
    assert first == "xx"
    assert (await stub_client.chat(QUESTION)).text == "next"  # the client still works


async def test_concurrent_streams_keep_their_own_usage(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    def rule(request: object) -> StubReply:
        text = getattr(request, "last_user_text", "")
        return StubReply.text(text * 3, chunk_size=3, chunk_delay=0.001)

    stub.rule = rule
    a = stub_client.stream_chat([ChatMessage.user("short")])
    b = stub_client.stream_chat([ChatMessage.user("a much longer question " * 5)])
    ta, tb = await asyncio.gather(a.text(), b.text())
    assert ta == "short" * 3
    assert a.usage.output_tokens == stub_usage([], ta)[1]
    assert b.usage.output_tokens == stub_usage([], tb)[1]
    assert a.usage.input_tokens < b.usage.input_tokens


# --------------------------------------------------------------------------- errors
async def test_context_overflow_400_is_not_retried(stub: StubServer,
                                                   stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.overflow(context_size=8192, requested=9100), "unused")
    with pytest.raises(ContextOverflowError, match="maximum context length is 8192") as info:
        await stub_client.chat(QUESTION)
    assert info.value.status_code == 400
    assert isinstance(info.value, BadRequestError)
    assert len(stub.requests) == 1


async def test_rate_limit_mentioning_tokens_per_minute_is_not_an_overflow(
    stub: StubServer) -> None:
    llm = stub.client(retry_policy=RetryPolicy.none(), budget=ModelBudget())
    stub.push(StubReply.rate_limited(retry_after=3, message=(
        "Request too large for gpt-4o in organization org-x on tokens per min (TPM): "
        "Limit 30000, Requested 36278. The input or output tokens must be reduced in "
        "order to run successfully.")))
    with pytest.raises(RateLimitError) as info:
        await llm.chat(QUESTION)
    assert not isinstance(info.value, ContextOverflowError)
    assert info.value.retry_after == 3.0
    await llm.aclose()


async def test_unauthorized_is_not_retried(stub: StubServer,
                                           stub_client: OpenAICompatibleLLM) -> None:
    stub.push(StubReply.unauthorized(), "unused")
    with pytest.raises(AuthenticationError, match="Incorrect API key") as info:
        await stub_client.chat(QUESTION)
    assert info.value.status_code == 401
    assert len(stub.requests) == 1


async def test_wrong_key_against_a_keyed_server() -> None:
    async with StubServer(["hello"], api_key="right-key") as server:
        wrong = server.client(api_key="wrong-key", budget=ModelBudget())
        with pytest.raises(AuthenticationError):
            await wrong.chat(QUESTION)
        right = server.client(budget=ModelBudget())
        assert (await right.chat(QUESTION)).text == "hello"
        assert len(server.requests) == 2
        await wrong.aclose()
        await right.aclose()


async def test_other_4xx_is_a_bad_request_without_retry(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.failure(404, "The model `nope` does not exist", code="model_not_found"))
    with pytest.raises(BadRequestError, match="does not exist") as info:
        await stub_client.chat(QUESTION)
    assert type(info.value) is BadRequestError
    assert len(stub.requests) == 1


async def test_empty_script_is_a_clear_bad_request(stub: StubServer,
                                                   stub_client: OpenAICompatibleLLM) -> None:
    with pytest.raises(BadRequestError, match="no scripted reply"):
        await stub_client.chat(QUESTION)


async def test_timeout_is_typed(stub: StubServer) -> None:
    llm = stub.client(timeout=0.2, retry_policy=RetryPolicy.none(), budget=ModelBudget())
    stub.push(StubReply.text("too late", delay=2.0))
    with pytest.raises(LLMTimeoutError, match=r"0\.2s"):
        await llm.chat(QUESTION)
    await llm.aclose()


async def test_timeouts_are_retried_within_the_bound(stub: StubServer) -> None:
    llm = stub.client(timeout=0.2, budget=ModelBudget(),
                      retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01))
    stub.push(StubReply.text("slow", delay=2.0), "fast")
    assert (await llm.chat(QUESTION)).text == "fast"
    assert len(stub.requests) == 2
    await llm.aclose()


async def test_stream_stall_is_a_timeout(stub: StubServer) -> None:
    llm = stub.client(timeout=0.2, retry_policy=RetryPolicy.none(), budget=ModelBudget())
    stub.push(StubReply.text("abcdefgh", chunk_size=2, pause_after=3, pause=2.0))
    stream = llm.stream_chat(QUESTION)
    received: list[str] = []
    with pytest.raises(LLMTimeoutError, match="after 4 characters of the answer"):
        await collect(stream, received)
    assert received == ["ab", "cd"]

    stub.push(StubReply.text("abcdefgh", pause_after=1, pause=2.0))  # stalls before any text
    with pytest.raises(LLMTimeoutError, match=r"no answer within 0\.2s$"):
        await llm.stream_chat(QUESTION).text()
    await llm.aclose()


async def test_connection_closed_without_an_answer_is_a_connection_error() -> None:
    """A server that reads the request and hangs up: a connection error, never a
    timeout."""
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", "k", "m", budget=ModelBudget(),
                              retry_policy=RetryPolicy.none())
    try:
        with pytest.raises(LLMConnectionError, match="connection failed"):
            await llm.chat(QUESTION)
        with pytest.raises(LLMConnectionError, match="connection failed"):
            await llm.stream_chat(QUESTION).text()
    finally:
        await llm.aclose()
        server.close()
        await server.wait_closed()


async def test_unreachable_endpoint_is_a_connection_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = OpenAICompatibleLLM(f"http://127.0.0.1:{port}/v1", "k", "m", budget=ModelBudget(),
                              retry_policy=RetryPolicy(max_attempts=2, base_delay=0.01))
    with pytest.raises(LLMConnectionError, match=f"127.0.0.1:{port}"):
        await llm.chat(QUESTION)
    with pytest.raises(LLMConnectionError):
        await llm.stream_chat(QUESTION).text()
    await llm.aclose()


@pytest.mark.parametrize(("body", "error", "match"), [
    ('{"id": "x", "object": "chat.completion", "choices": []}', LLMError, "no choices"),
    ("<html>502 Bad Gateway</html>", LLMError, "not JSON"),
    ('{"error": {"message": "This model\'s maximum context length is 4096 tokens.", '
     '"code": "context_length_exceeded"}}', ContextOverflowError, "4096"),
    ('{"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c", '
     '"type": "function", "function": {"arguments": "{}"}}]}}]}', LLMError, "function name"),
])
async def test_malformed_200_responses_are_typed_errors(
    stub: StubServer, stub_client: OpenAICompatibleLLM, body: str, error: type[LLMError],
    match: str,
) -> None:
    stub.push(StubReply.raw(body))
    with pytest.raises(error, match=match):
        await stub_client.chat(QUESTION)
    assert len(stub.requests) == 1


async def test_lenient_about_harmless_server_differences(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    # No tool-call id (older Ollama), content as parts, DeepSeek's cache field.
    stub.push(StubReply.raw(json.dumps({"choices": [{"finish_reason": "stop", "message": {
        "role": "assistant", "content": [{"type": "text", "text": "part one, "},
                                          {"type": "text", "text": "part two"}],
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": None}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4, "prompt_cache_hit_tokens": 6}})))
    result = await stub_client.chat(QUESTION)
    assert result.text == "part one, part two"
    assert result.message.tool_calls is not None
    assert result.message.tool_calls[0].id.startswith("call_")
    assert result.message.tool_calls[0].arguments == {}
    assert result.usage == Usage(input_tokens=10, output_tokens=4, cached_tokens=6, calls=1)
    assert result.model == "stub-model"  # the server named none: ours


async def test_hand_written_sse_with_comments_and_error_events(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    def event(delta: dict[str, object], finish: str | None = None) -> str:
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": finish}]}) + "\n\n"

    sse = (": OPENROUTER PROCESSING\n\n" + event({"role": "assistant"})
           + event({"content": "Hel"}) + "event: message\n" + event({"content": "lo"})
           + event({}, "stop") + "data: [DONE]\n\n")
    stub.push(StubReply.raw(sse, content_type="text/event-stream"))
    stream = stub_client.stream_chat(QUESTION)
    assert [d async for d in stream] == ["Hel", "lo"]
    assert stream.usage.estimated  # this server sent no usage

    overloaded = 'data: {"error": {"message": "Overloaded", "type": "server_error"}}\n\n'
    stub.push(StubReply.raw(event({"content": "partial"}) + overloaded,
                            content_type="text/event-stream"))
    received: list[str] = []
    with pytest.raises(ServerError, match="Overloaded"):
        await collect(stub_client.stream_chat(QUESTION), received)
    assert received == ["partial"]


# --------------------------------------------------------------------------- config
def test_budget_numbers_come_from_the_budget_or_overrides() -> None:
    budget = ModelBudget(context_size=32_000, max_output_tokens=4_000)
    llm = OpenAICompatibleLLM("http://127.0.0.1:1/v1", "k", "m", budget=budget)
    assert (llm.context_size, llm.max_output_tokens) == (32_000, 4_000)
    llm = OpenAICompatibleLLM("http://127.0.0.1:1/v1", "k", "m", budget=budget,
                              context_size=16_000, max_output_tokens=2_000)
    assert (llm.context_size, llm.max_output_tokens) == (16_000, 2_000)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"base_url": "localhost:8000/v1"}, "base_url"),
    ({"model": ""}, "model"),
    ({"api_key": ""}, "api_key"),
    ({"timeout": 0}, "timeout"),
    ({"default_options": {"temp": 1}}, "'temp'"),
])
def test_constructor_rejects_bad_settings(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"base_url": "http://127.0.0.1:1/v1", "api_key": "k",
                               "model": "m", "budget": ModelBudget(), **kwargs}
    with pytest.raises((ConfigError, TypeError), match=match):
        OpenAICompatibleLLM(**args)  # type: ignore[arg-type]


def test_from_env_missing_names_every_variable() -> None:
    with pytest.raises(ConfigError) as info:
        OpenAICompatibleLLM.from_env(env={})
    message = str(info.value)
    for var in ("LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL"):
        assert var in message

    with pytest.raises(ConfigError) as info:
        OpenAICompatibleLLM.from_env(env={"LLM_BASE_URL": "http://x/v1", "LLM_API_KEY": " "})
    assert "LLM_API_KEY" in str(info.value)
    assert "LLM_MODEL" in str(info.value)
    assert "LLM_BASE_URL" not in str(info.value)

    with pytest.raises(ConfigError) as info:
        OpenAICompatibleLLM.from_env("fast", env={"LLM_BASE_URL": "http://x/v1",
                                                  "LLM_API_KEY": "k"})
    assert "FAST_LLM_MODEL or LLM_MODEL" in str(info.value)
    assert "LLM_BASE_URL" not in str(info.value)


def test_from_env_rejects_a_url_without_scheme_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="FAST_LLM_BASE_URL"):
        OpenAICompatibleLLM.from_env("fast", env={
            "LLM_BASE_URL": "http://ok/v1", "FAST_LLM_BASE_URL": "ok:8000",
            "LLM_API_KEY": "k", "LLM_MODEL": "m"})


def test_fast_role_falls_back_to_main_settings_one_by_one() -> None:
    env = {"LLM_BASE_URL": "http://main:8000/v1", "LLM_API_KEY": "main-key",
           "LLM_MODEL": "big-model", "LLM_CONTEXT_SIZE": "32000",
           "LLM_MAX_OUTPUT_TOKENS": "8000"}
    fast = OpenAICompatibleLLM.from_env("fast", env=env)
    assert (fast.base_url, fast.model, fast.role) == ("http://main:8000/v1", "big-model", "fast")
    assert (fast.context_size, fast.max_output_tokens) == (32_000, 8_000)

    fast = OpenAICompatibleLLM.from_env("fast", env={**env, "FAST_LLM_MODEL": "small-model",
                                                     "FAST_LLM_CONTEXT_SIZE": "16000"})
    assert (fast.base_url, fast.model) == ("http://main:8000/v1", "small-model")
    assert fast.context_size == 16_000
    main = OpenAICompatibleLLM.from_env("main", env={**env, "FAST_LLM_MODEL": "small-model"})
    assert main.model == "big-model"
    assert "main-key" not in repr(main)


async def test_from_env_client_talks_to_the_configured_endpoint(stub: StubServer) -> None:
    stub.push("configured")
    llm = OpenAICompatibleLLM.from_env("fast", env={
        "LLM_BASE_URL": stub.base_url, "LLM_API_KEY": "env-key", "FAST_LLM_MODEL": "mini"})
    assert (await llm.chat(QUESTION)).text == "configured"
    assert stub.last_request.body["model"] == "mini"
    assert stub.last_request.headers["authorization"] == "Bearer env-key"
    await llm.aclose()


# --------------------------------------------------------------------------- wire helpers
async def test_sse_multiline_data_is_joined_and_other_fields_skipped(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    first = json.dumps({"choices": [{"index": 0, "delta": {"content": "multi"}}]})
    head, tail = first[:first.index("[")], first[first.index("["):]  # JSON allows the newline
    last = json.dumps({"choices": [{"index": 0, "delta": {"content": "line"},
                                    "finish_reason": "stop"}]})
    sse = (f": comment\nevent: message\nid: 7\ndata: {head}\ndata:{tail}\n\n\n"
           f"retry: 100\ndata: {last}\n\ndata:[DONE]\n\n")
    stub.push(StubReply.raw(sse, content_type="text/event-stream"))
    assert [d async for d in stub_client.stream_chat(QUESTION)] == ["multi", "line"]
