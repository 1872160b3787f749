"""Reading a Responses conversation as the fitter's units, and rendering the fitted view
back: what the proxy forwards is the client's own items wherever it kept them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.responses_request import parse_responses, validate_pairs
from ctxstack.proxy.responses_view import UNIT_KEY, ResponsesConversation
from tests.proxy_support import assert_refused

REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA=="}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "lookup",
        "arguments": "{\"q\": 1}", "status": "completed"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "x" * 400}
ANSWER = {"type": "message", "role": "assistant", "id": "msg_1",
          "content": [{"type": "output_text", "text": "done", "annotations": []}]}


def _conversation() -> list[dict[str, Any]]:
    return [{"role": "developer", "content": "rules"},
            {"type": "additional_tools", "tools": []},
            {"role": "user", "content": "look it up"},
            REASONING, CALL, OUTPUT, REASONING | {"id": "rs_2"}, ANSWER,
            {"type": "item_reference", "id": "msg_0"},
            {"role": "user", "content": [{"type": "input_text", "text": "and now?"},
                                         {"type": "input_image", "image_url": "https://i/x.png"}]}]


def test_units_group_a_model_turn_and_carry_unknown_items() -> None:
    conv = ResponsesConversation(_conversation(), "Be brief.")
    kinds = [(u.kind, u.items) for u in conv.units]
    assert kinds == [("system", [0, 1]), ("user", [2]), ("assistant", [3, 4]),
                     ("tool", [5]), ("assistant", [6, 7, 8]), ("user", [9])]
    chat = conv.conversation.messages
    assert chat[0] == {"role": "system", "content": "Be brief.", UNIT_KEY: -1}
    assert chat[3]["tool_calls"][0]["id"] == "c1"
    assert chat[4]["role"] == "tool"
    assert chat[4]["tool_call_id"] == "c1"


def test_rendering_an_untouched_view_is_the_client_s_items() -> None:
    items = _conversation()
    conv = ResponsesConversation(items, "Be brief.")
    rendered = conv.render(conv.conversation.messages)
    assert rendered == items
    assert all(a is b for a, b in zip(rendered, items, strict=True))


def test_rendering_a_cut_tool_output_and_a_summary() -> None:
    items = _conversation()
    conv = ResponsesConversation(items, None)
    chat = conv.conversation.messages
    cleared = dict(chat[3], content="[cleared]")  # the guard's copy of the tool message
    summary = {"role": "system", "content": "Summary: the user looked up c1."}
    rendered = conv.render([chat[0], summary, chat[2], cleared, chat[4], chat[5]])
    assert rendered[2] == {"type": "message", "role": "developer",
                           "content": "Summary: the user looked up c1."}
    assert rendered[3:5] == [REASONING, CALL]
    assert rendered[5] == {**OUTPUT, "output": "[cleared]"}
    assert json.dumps(rendered[6:9]) == json.dumps(items[6:9])  # the turn, byte-identical


def test_pairing_is_checked_over_the_stored_chain_and_the_new_items() -> None:
    validate_pairs([REASONING, CALL], [OUTPUT])  # the call came in an earlier response
    with pytest.raises(ProxyError) as unanswered:
        validate_pairs([REASONING, CALL], [{"role": "user", "content": "hi"}])
    assert unanswered.value.param == "input"
    with pytest.raises(ProxyError) as orphan:
        validate_pairs([], [OUTPUT])
    assert orphan.value.param == "input[0].call_id"
    validate_pairs(None, [OUTPUT])  # unknown chain: the upstream judges


@pytest.mark.parametrize(("raw", "param", "says"), [
    (b'{"model": "m", "input": ', None, "not valid JSON"),
    (b"\xff\xfe{}", None, "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, None, "nested too deeply"),
    (b'["model", "m"]', None, "JSON object"),
    (b'{"input": "hi"}', "model", "'model' is required"),
    (b'{"model": "  ", "input": "hi"}', "model", "'model' is required"),
    (b'{"model": "m", "input": 5}', "input", "string or a list"),
    (b'{"model": "m", "input": "hi", "previous_response_id": 7}', "previous_response_id",
     "must be a string"),
    (b'{"model": "m", "input": "hi", "instructions": {"a": 1}}', "instructions",
     "must be a string"),
    (b'{"model": "m", "input": ["hi"]}', "input[0]", "expected an object, got str"),
    (b'{"model": "m", "input": [{"content": "hi"}]}', "input[0].type", "needs a 'type'"),
    (b'{"model": "m", "input": [{"type": 3, "content": "hi"}]}', "input[0].type",
     "expected a string"),
    (b'{"model": "m", "input": [{"role": "robot", "content": "hi"}]}', "input[0].role",
     "unknown role"),
    (b'{"model": "m", "input": [{"role": "user", "content": 5}]}', "input[0].content",
     "string or a list of parts"),
    (b'{"model": "m", "input": [{"role": "user", "content": ["hi"]}]}', "input[0].content",
     "every part must be an object"),
    (b'{"model": "m", "input": [{"type": "function_call", "call_id": "", "name": "f",'
     b' "arguments": "{}"}]}', "input[0].call_id", "non-empty string"),
    (b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": 1,'
     b' "arguments": "{}"}]}', "input[0].name", "expected a string"),
    (b'{"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f",'
     b' "arguments": {}}]}', "input[0].arguments", "expected a string"),
    (b'{"model": "m", "input": [{"type": "custom_tool_call", "call_id": "c", "name": "f",'
     b' "input": 1}]}', "input[0].input", "expected a string"),
    (b'{"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}',
     "input[0].call_id", "non-empty string"),
    (b'{"model": "m", "input": [{"type": "function_call_output", "call_id": "c",'
     b' "output": 5}]}', "input[0].output", "string or a list"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_every_refusal_is_a_400_naming_the_field(raw: bytes, param: str | None,
                                                 says: str) -> None:
    """Bad input gets a clear error before any upstream call: the status, the field's
    path (as the SDKs read ``param``) and what was expected — for the body itself, the
    request's fields and each kind of input item."""
    assert_refused(parse_responses, raw, param, says)


def test_a_string_input_is_one_user_message() -> None:
    request = parse_responses(b'{"model": "m", "input": "hi", "store": false}')
    assert request.input == [{"role": "user", "content": "hi"}]
    assert not request.store
    assert request.previous_id is None
    assert json.loads(request.with_input([{"role": "user", "content": "x"}])) == {
        "model": "m", "input": [{"role": "user", "content": "x"}], "store": False}
