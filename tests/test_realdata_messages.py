"""Real-shape exports through the message model (fixtures: ``tests/realdata``).

What a user loading their own logs relies on: every shape an OpenAI chat-completions
export holds parses, goes back out as an equivalent request, and a broken log is made a
valid one instead of being sent as it is.
"""

from __future__ import annotations

import json

import pytest

from ctxstack import ChatMessage, ToolCall
from ctxstack.errors import MessageError
from ctxstack.messages import from_openai_messages, repair_tool_turns, to_openai_messages
from ctxstack.messages._tool_turns import INTERRUPTED_RESULT, REPAIRED_KEY, tool_turn_problems
from tests import realdata


def _normalised(wire: dict[str, object]) -> dict[str, object]:
    """A wire message with tool-call arguments decoded (whitespace is insignificant)."""
    out = dict(wire)
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
            for c in calls
        ]
    return out


def test_openai_export_round_trips_value_for_value() -> None:
    export = realdata.openai_export()
    messages = from_openai_messages(export)
    assert len(messages) == len(export)
    again = to_openai_messages(messages)
    for sent, original in zip(again, export, strict=True):
        assert _normalised(sent) == _normalised(original)
    assert tool_turn_problems(messages) == []


def test_developer_role_is_system_prompt_and_goes_back_as_developer() -> None:
    message = ChatMessage.from_openai({"role": "developer", "content": "Be terse."})
    assert message.role == "system"
    assert message.to_openai() == {"role": "developer", "content": "Be terse."}
    # a message derived from it keeps the wire role
    assert message.replace(content="Be brief.").to_openai()["role"] == "developer"
    assert ChatMessage.system("x").to_openai()["role"] == "system"


def test_refusal_is_kept_and_sent_back() -> None:
    wire = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    message = ChatMessage.from_openai(wire)
    assert message.to_openai() == wire
    part = ChatMessage.from_openai(
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]})
    assert part.text == "No."
    with pytest.raises(MessageError, match="refusal"):
        ChatMessage.from_openai({"role": "assistant", "refusal": 3})


def test_legacy_function_call_format_becomes_tool_calls_with_distinct_ids() -> None:
    messages = from_openai_messages(realdata.legacy_function_export())
    calls = [m.tool_calls[0] for m in messages if m.tool_calls]
    results = [m for m in messages if m.role == "tool"]
    assert [c.arguments for c in calls] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert len({c.id for c in calls}) == 2
    assert [r.tool_call_id for r in results] == [c.id for c in calls]
    assert [r.text for r in results] == ['{"temp_c": 11}', '{"temp_c": -3}']
    assert tool_turn_problems(messages) == []
    wire = to_openai_messages(messages)
    assert all("function_call" not in w and w["role"] != "function" for w in wire)
    # a lone message still parses, with a name-derived id
    lone = ChatMessage.from_openai({"role": "function", "name": "f", "content": "1"})
    assert lone.role == "tool"
    assert lone.tool_call_id == "legacy_f"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"role": "function", "content": "1"}, "name"),
        ({"role": "assistant", "function_call": "f()"}, "function_call"),
        ({"role": "assistant", "function_call": {"arguments": "{}"}}, "function_call.name"),
        ({"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"format": "wav"}}]},
         "content[0]: input_audio.data: Field required"),
        ({"role": "user", "content": [{"type": "text", "text": "see file"}, {
            "type": "file", "file": {"filename": "a.pdf"}}]},
         "content[1]: file: needs file_data (inline), file_id or file_url"),
        ({"role": "user", "content": [{"type": "video_url", "video_url": {"url": "x"}}]},
         "content[0].type: unsupported content part type 'video_url'"),
        ({"role": "critic", "content": "x"}, "role"),
    ],
)
def test_bad_legacy_or_unknown_shapes_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(MessageError) as info:
        ChatMessage.from_openai(data)
    assert field in str(info.value)


@pytest.mark.parametrize("raw", ['{"cmd": "sed -n 1,40p utils/da', "[1, 2]", "null", "{oops"])
def test_arguments_that_are_not_a_json_object_are_carried_verbatim(raw: str) -> None:
    wire = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_D", "type": "function", "function": {"name": "bash", "arguments": raw}}]}
    message = ChatMessage.from_openai(wire)
    assert message.tool_calls == [ToolCall(id="call_D", name="bash", arguments={"_raw": raw})]
    assert message.to_openai() == wire


def test_broken_export_problems_are_reported_one_per_defect() -> None:
    messages = from_openai_messages(realdata.broken_export())
    problems = tool_turn_problems(messages)
    assert len(problems) == 4
    assert any("'call_ZZZ_orphan'" in p and "answers no call" in p for p in problems)
    assert any("'call_B'" in p and "no result" in p for p in problems)
    assert sum("'call_C'" in p for p in problems) == 2


def test_repair_makes_broken_export_a_valid_request_and_keeps_what_the_model_can_use() -> None:
    messages = from_openai_messages(realdata.broken_export())
    before = [m.model_dump() for m in messages]
    repaired = repair_tool_turns(messages)
    assert [m.model_dump() for m in messages] == before  # input untouched
    assert tool_turn_problems(repaired) == []
    shape = [(m.role, m.tool_call_id or "") for m in repaired]
    assert shape == [
        ("system", ""), ("user", ""), ("assistant", ""), ("tool", "call_A"), ("tool", "call_B"),
        ("user", ""), ("assistant", ""), ("tool", "call_C"), ("user", ""),
        ("assistant", ""), ("tool", "call_D"), ("assistant", ""), ("tool", "call_A"),
        ("assistant", ""), ("user", ""),
    ]
    filler = repaired[4]
    assert filler.text == INTERRUPTED_RESULT
    assert filler.metadata[REPAIRED_KEY] == "interrupted"
    assert "stale result" not in [m.text for m in repaired]  # the orphan is gone
    assert repaired[7].text == "1 failed"  # the late result rejoined its call


def test_repair_leaves_valid_lists_alone() -> None:
    messages = from_openai_messages(realdata.openai_export())
    repaired = repair_tool_turns(messages)
    assert repaired == messages
    assert all(a is b for a, b in zip(repaired, messages, strict=True))


def test_result_after_the_model_moved_on_is_an_orphan() -> None:
    messages = [
        ChatMessage.user("go"),
        ChatMessage.assistant(tool_calls=[ToolCall(id="c1", name="f")]),
        ChatMessage.assistant("never mind"),
        ChatMessage.tool("c1", "late"),
    ]
    repaired = repair_tool_turns(messages)
    assert [m.text for m in repaired] == ["go", "", INTERRUPTED_RESULT, "never mind"]


@pytest.mark.parametrize("key", sorted(set(realdata.MULTILINGUAL) - {"surrogate"}))
def test_every_script_survives_a_round_trip(key: str) -> None:
    text = realdata.MULTILINGUAL[key]
    wire = {"role": "user", "content": text, "name": "u1"}
    assert ChatMessage.from_openai(wire).to_openai() == wire
    big = {"role": "tool", "tool_call_id": "t", "content": text * (100_000 // len(text) + 1)}
    assert ChatMessage.from_openai(big).to_openai() == big


def test_lone_surrogates_become_replacement_characters_so_the_request_can_be_sent() -> None:
    text = realdata.MULTILINGUAL["surrogate"]
    wire = {"role": "assistant", "content": text, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "say", "arguments": json.dumps({"text": text, "n": [text]})}}]}
    message = ChatMessage.from_openai(wire)
    assert message.text == text.replace("\ud83d", "\ufffd").replace("\udc00", "\ufffd")
    assert message.tool_calls is not None
    assert message.tool_calls[0].arguments == {"text": message.text, "n": [message.text]}
    body = json.dumps(message.to_openai(), ensure_ascii=False).encode("utf-8")  # no error
    assert "\ufffd".encode() in body
    part = ChatMessage.from_openai({"role": "user", "content": [{"type": "text", "text": text}]})
    assert "\ufffd" in part.text
    assert "\ud83d" not in part.text


def test_a_call_id_reused_within_one_message_keeps_a_result_per_call() -> None:
    """Some local servers give every parallel call the same id: both results are kept."""
    messages = [
        ChatMessage.user("list and read"),
        ChatMessage.assistant(tool_calls=[ToolCall(id="call_0", name="ls"),
                                          ToolCall(id="call_0", name="cat")]),
        ChatMessage.tool("call_0", "a.py b.py"),
        ChatMessage.tool("call_0", "print('hi')"),
        ChatMessage.assistant("done"),
    ]
    assert tool_turn_problems(messages) == []
    assert repair_tool_turns(messages) == messages
    one_result = [*messages[:3], messages[4]]
    assert len(tool_turn_problems(one_result)) == 1
    assert [m.text for m in repair_tool_turns(one_result)] == [
        "list and read", "", "a.py b.py", INTERRUPTED_RESULT, "done"]


def test_prompt_caching_keys_on_parts_are_kept_and_sent_back() -> None:
    """OpenRouter / LiteLLM requests mark parts with ``cache_control``: not an error."""
    wire = {"role": "user", "content": [
        {"type": "text", "text": realdata.MULTILINGUAL["ja"], "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": realdata.PNG_DATA_URL},
         "cache_control": {"type": "ephemeral"}},
    ]}
    message = ChatMessage.from_openai(wire)
    assert message.to_openai() == wire
    assert message.text == realdata.MULTILINGUAL["ja"]
    assert len(message.images) == 1


def test_an_export_without_tool_call_ids_is_paired_by_position() -> None:
    """Ollama's chat format: calls without ids, arguments as an object, results without
    ``tool_call_id`` in call order."""
    export = [
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_weather", "arguments": {"city": "東京"}}},
        ]},
        {"role": "tool", "content": "11 °C", "tool_name": "get_weather"},
        {"role": "tool", "content": "7 °C", "tool_name": "get_weather"},
        {"role": "assistant", "content": "Paris 11 °C, 東京 7 °C."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"function": {"name": "now", "arguments": {}}}]},
        {"role": "tool", "content": "12:00"},
    ]
    messages = from_openai_messages(export)
    assert tool_turn_problems(messages) == []
    calls = messages[1].tool_calls
    assert calls is not None
    assert [c.id for c in calls] == ["call_1_0", "call_1_1"]
    assert [calls[0].arguments, calls[1].arguments] == [{"city": "Paris"}, {"city": "東京"}]
    assert [m.tool_call_id for m in messages if m.role == "tool"] == [
        "call_1_0", "call_1_1", "call_5_0"]
    # a lone id-less tool message still says what is missing
    with pytest.raises(MessageError, match="tool_call_id"):
        from_openai_messages([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}])


def test_a_sharegpt_record_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(MessageError, match=r"messages\[0\]\.role: missing .*keys found: from, value"):
        from_openai_messages([{"from": "human", "value": "hi"}])


def test_a_function_call_repeating_a_tool_call_is_one_call() -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
    export = [
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call],
         "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3"},
    ]
    messages = from_openai_messages(export)
    assert messages[1].tool_calls == [ToolCall(id="call_1", name="get_weather",
                                               arguments={"city": "Oslo"})]
    assert tool_turn_problems(messages) == []
