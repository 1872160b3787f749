"""structured_call: JSON answers validated with pydantic, one re-ask, typed failure."""

from __future__ import annotations

import json
import re
from typing import Generic, TypeVar

import pytest
from pydantic import BaseModel, Field

from ctxstack.dag._structured import (
    extract_json,
    response_format_for,
    structured_call,
    with_instruction,
)
from ctxstack.errors import StructuredOutputError
from ctxstack.llm import LLMResult, ScriptedLLM, Usage
from ctxstack.llm.openai import OpenAICompatibleLLM
from ctxstack.llm.stub import StubReply, StubServer, stub_usage
from ctxstack.messages import ChatMessage, TextPart

T = TypeVar("T")


class Step(BaseModel):
    id: str
    task: str
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    goal: str
    steps: list[Step]


PLAN = {"goal": "compare prices", "steps": [
    {"id": "s1", "task": "fetch prices"},
    {"id": "s2", "task": "compare", "depends_on": ["s1"]},
]}
PLAN_JSON = json.dumps(PLAN)
ASK = [ChatMessage.system("You plan work."), ChatMessage.user("Compare the two offers.")]


# --------------------------------------------------------------------------- over HTTP
async def test_valid_answer_on_first_try(stub: StubServer,
                                         stub_client: OpenAICompatibleLLM) -> None:
    stub.push(PLAN_JSON)
    result = await structured_call(stub_client, ASK, Plan, max_tokens=300)

    assert result.value == Plan.model_validate(PLAN)
    assert result.attempts == 1
    assert result.raw == PLAN_JSON
    body = stub.last_request.body
    assert body["max_tokens"] == 300
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == Plan.model_json_schema()
    system = body["messages"][0]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]  # merged, not added
    assert system["content"].startswith("You plan work.")
    assert '"depends_on"' in system["content"]  # the schema is in the instruction too


async def test_invalid_json_is_re_asked_once_then_succeeds(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.invalid_json(), f"Sure! Here it is:\n```json\n{PLAN_JSON}\n```")
    result = await structured_call(stub_client, ASK, Plan)

    assert result.value.steps[1].depends_on == ["s1"]
    assert result.attempts == 2
    assert len(stub.requests) == 2
    retry = stub.requests[1].messages
    assert retry[-2].role == "assistant"
    assert retry[-2].text == StubReply.invalid_json().content
    assert retry[-1].role == "user"
    assert "not valid" in retry[-1].text
    assert "Plan" in retry[-1].text
    first_usage = stub_usage(stub.requests[0].messages, StubReply.invalid_json().content)
    second_usage = stub_usage(retry, f"Sure! Here it is:\n```json\n{PLAN_JSON}\n```")
    assert result.usage.input_tokens == first_usage[0] + second_usage[0]
    assert result.usage.output_tokens == first_usage[1] + second_usage[1]
    assert result.usage.calls == 2


async def test_still_invalid_after_re_ask_raises_with_raw_text_and_usage(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push(StubReply.invalid_json(), '{"goal": "x", "steps": [{"id": "s1"}]}', "unused")
    with pytest.raises(StructuredOutputError, match=r"steps\.0\.task") as info:
        await structured_call(stub_client, ASK, Plan)
    assert info.value.raw == '{"goal": "x", "steps": [{"id": "s1"}]}'
    assert info.value.usage is not None
    assert info.value.usage.calls == 2
    assert len(stub.requests) == 2  # exactly one re-ask
    assert stub.pending == 1


async def test_schema_mismatch_re_ask_names_the_field(
    stub: StubServer, stub_client: OpenAICompatibleLLM
) -> None:
    stub.push('{"goal": "g", "steps": "none"}', PLAN_JSON)
    result = await structured_call(stub_client, ASK, Plan)
    assert result.attempts == 2
    assert "steps" in stub.requests[1].messages[-1].text


async def test_response_format_follows_what_the_llm_supports(stub: StubServer) -> None:
    plain = stub.client(response_format_support="none")
    object_only = stub.client(response_format_support="json_object")
    stub.push(PLAN_JSON, PLAN_JSON, PLAN_JSON)
    await structured_call(plain, ASK, Plan)
    assert "response_format" not in stub.last_request.body
    await structured_call(object_only, ASK, Plan)
    assert stub.last_request.body["response_format"] == {"type": "json_object"}
    await structured_call(object_only, ASK, Plan, response_format=None)
    assert "response_format" not in stub.last_request.body
    await plain.aclose()
    await object_only.aclose()


# --------------------------------------------------------------------------- any LLM
async def test_works_with_scripted_llm_and_scratchpad_answers() -> None:
    llm = ScriptedLLM([f"<think>the user wants a plan {{not json}}</think>\n{PLAN_JSON}"])
    result = await structured_call(llm, [ChatMessage.user("plan it")], Plan)
    assert result.value.goal == "compare prices"
    (call,) = llm.calls
    assert call.messages[0].role == "system"
    assert "JSON Schema" in call.messages[0].text
    assert "response_format" not in call.opts  # ScriptedLLM declares no support
    assert result.usage == llm.total_usage


async def test_scripted_llm_re_ask_then_typed_error() -> None:
    llm = ScriptedLLM(["no idea", "still prose, sorry"])
    with pytest.raises(StructuredOutputError, match="no complete JSON") as info:
        await structured_call(llm, ASK, Plan)
    assert info.value.raw == "still prose, sorry"
    assert len(llm.calls) == 2


async def test_truncated_answer_mentions_the_output_limit() -> None:
    cut = LLMResult(message=ChatMessage.assistant('{"goal": "g", "st'),
                    usage=Usage(input_tokens=1, output_tokens=5, calls=1),
                    finish_reason="length")
    llm = ScriptedLLM([cut, PLAN_JSON])
    result = await structured_call(llm, ASK, Plan)
    assert "output token limit" in llm.calls[1].messages[-1].text
    assert result.attempts == 2


# --------------------------------------------------------------------------- helpers
@pytest.mark.parametrize("text", [
    PLAN_JSON,
    f"```json\n{PLAN_JSON}\n```",
    f"```\n{PLAN_JSON}\n```\nLet me know if you need more.",
    f"Here is the plan you asked for: {PLAN_JSON} Hope this helps [1].",
    f"Steps [1] and [2] below.\n{PLAN_JSON}",
    f"<thinking>maybe {{\"goal\": 1}}</thinking>{PLAN_JSON}",
])
def test_extract_json_finds_the_object(text: str) -> None:
    assert extract_json(text) == PLAN


@pytest.mark.parametrize(("text", "match"), [
    ("", "empty"),
    ("<think>only thoughts</think>", "empty"),
    ('{"goal": "g", "steps": [', "no complete JSON"),
])
def test_extract_json_says_why_it_failed(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        extract_json(text)


def test_instruction_merges_into_the_leading_system_message() -> None:
    original = [ChatMessage.system("Be brief.", pinned=True), ChatMessage.user("hi")]
    merged = with_instruction(original, "JSON please")
    assert [m.role for m in merged] == ["system", "user"]
    assert merged[0].text == "Be brief.\n\nJSON please"
    assert merged[0].pinned
    assert original[0].text == "Be brief."  # input untouched

    parts = [ChatMessage.system([TextPart(text="Be brief.")]), ChatMessage.user("hi")]
    assert with_instruction(parts, "JSON please")[0].text == "Be brief.\nJSON please"
    assert [m.role for m in with_instruction([ChatMessage.user("hi")], "J")] == ["system", "user"]


class Box(BaseModel, Generic[T]):
    item: T


def test_response_format_for_generic_names_is_wire_safe() -> None:
    fmt = response_format_for(Plan, "json_schema")
    assert fmt is not None
    assert fmt["json_schema"]["name"] == "Plan"
    fmt = response_format_for(Box[int], "json_schema")
    assert fmt is not None
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", fmt["json_schema"]["name"])
    assert response_format_for(Plan, None) is None
    assert response_format_for(Plan, "json_object") == {"type": "json_object"}
