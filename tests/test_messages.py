"""ChatMessage: validation naming the field, OpenAI round-trip, immutability."""

from __future__ import annotations

import json

import pytest

from ctxstack.errors import MessageError
from ctxstack.messages import (
    ChatMessage,
    ImagePart,
    TextPart,
    ToolCall,
    from_openai_messages,
    to_openai_messages,
)

WIRE = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "東京", "n": 3}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"hits": 3}', "name": "lookup"},
    {"role": "assistant", "content": "Three hits."},
]


def test_round_trip_is_lossless_at_json_level() -> None:
    messages = from_openai_messages(WIRE)
    back = to_openai_messages(messages)
    for original, again in zip(WIRE, back, strict=True):
        if "tool_calls" in original:
            assert json.loads(again["tool_calls"][0]["function"]["arguments"]) == json.loads(
                original["tool_calls"][0]["function"]["arguments"]
            )
            again = {**again, "tool_calls": None}
            original = {**original, "tool_calls": None}
        assert again == original


def test_parsed_fields() -> None:
    user, assistant, tool = from_openai_messages(WIRE)[1:4]
    assert isinstance(user.content, list)
    assert isinstance(user.content[0], TextPart)
    assert isinstance(user.content[1], ImagePart)
    assert user.text == "What is in this picture?"
    assert len(user.images) == 1
    assert assistant.tool_calls == [ToolCall(id="call_1", name="lookup", arguments={"q": "東京", "n": 3})]
    assert tool.tool_call_id == "call_1"


def test_pinned_and_metadata_never_go_on_the_wire() -> None:
    m = ChatMessage.user("hi", pinned=True, metadata={"kind": "query"})
    assert m.to_openai() == {"role": "user", "content": "hi"}
    assert m.kind == "query"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"role": "bogus", "content": "x"}, "role"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": 5}, "content"),
        ({"role": "user", "content": [{"type": "audio"}]}, "content[0].type"),
        ({"role": "user", "content": ["plain"]}, "content[0]"),
        (
            {"role": "assistant", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": 5}}
            ]},
            "arguments",
        ),
        ({"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}, "function"),
        ({"role": "user", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]}, "tool_calls"),
    ],
)
def test_invalid_input_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(MessageError) as info:
        ChatMessage.from_openai(data)
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)


def test_list_errors_name_the_index() -> None:
    with pytest.raises(MessageError, match=r"messages\[1\]"):
        from_openai_messages([{"role": "user", "content": "ok"}, {"role": "nope"}])


def test_empty_arguments_mean_no_arguments() -> None:
    call = ToolCall.from_openai({"id": "x", "type": "function", "function": {"name": "now", "arguments": ""}})
    assert call.arguments == {}


def test_messages_are_frozen_and_replace_returns_a_new_one() -> None:
    m = ChatMessage.user("a")
    with pytest.raises(ValueError, match="frozen"):
        m.content = "b"  # type: ignore[misc]
    n = m.replace(content="b", pinned=True)
    assert (m.content, m.pinned) == ("a", False)
    assert (n.content, n.pinned) == ("b", True)


def test_replace_validates() -> None:
    with pytest.raises(MessageError, match="tool_call_id"):
        ChatMessage.user("a").replace(role="tool")


def test_model_copy_drops_cached_estimate() -> None:
    m = ChatMessage.user("x" * 400)
    m._token_cache["k"] = 1
    assert m.model_copy(update={"content": "y"})._token_cache == {}


def test_equality_ignores_cached_estimates() -> None:
    a, b = ChatMessage.user("same"), ChatMessage.user("same")
    a._token_cache["heuristic"] = 5
    assert a == b
    assert a != ChatMessage.user("other")


def test_kind_constructors_set_role_pin_and_kind() -> None:
    cases = [
        (ChatMessage.query("q?"), "user", True, "query"),
        (ChatMessage.inject("also this"), "user", True, "inject"),
        (ChatMessage.summary("[Conversation summary]\nx"), "system", False, "summary"),
        (ChatMessage.warning("stop repeating"), "user", False, "warning"),
        (ChatMessage.checklist("check"), "user", False, "checklist"),
    ]
    for message, role, pinned, kind in cases:
        assert (message.role, message.pinned, message.kind) == (role, pinned, kind)
    extra = ChatMessage.summary("s", checkpoint_seq=7)
    assert extra.metadata == {"kind": "summary", "checkpoint_seq": 7}
