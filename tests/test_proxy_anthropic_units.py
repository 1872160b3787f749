"""The Anthropic wire's units and rendering: what the fitter's list becomes on the wire.

Pure (no HTTP): a request is cut into units, the fitted list is simulated as the guard
would leave it (units dropped, one changed, a summary added), and the rendered messages
are checked against Anthropic's rules with the stub's own checker.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxstack.llm.stub.anthropic import count_markers, sequence_problems
from ctxstack.proxy.anthropic import parse_messages_request, render, to_units
from ctxstack.proxy.anthropic.units import UNIT_KEY
from ctxstack.proxy.errors import ProxyError
from tests.proxy_support import assert_refused

THINK = {"type": "thinking", "thinking": "Let me check the order.", "signature": "sig-AAA"}
REDACTED = {"type": "redacted_thinking", "data": "opaque-bytes"}
SERVER = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
          "input": {"query": "x"}}


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Find order A-1042."},
        {"role": "assistant", "content": [
            THINK, {"type": "text", "text": "Looking it up."},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "A-1042"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped " * 50},
            {"type": "text", "text": "And the date?"}]},
        {"role": "assistant", "content": [REDACTED, {"type": "text", "text": "May 3."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks.",
                                      "cache_control": {"type": "ephemeral"}}]},
    ]


def test_an_unchanged_fit_renders_the_clients_own_messages() -> None:
    messages = conversation()
    units = to_units("You are helpful.", messages)
    out = render(units, units.dicts)
    assert out == messages
    assert all(a is b for a, b in zip(out, units.messages, strict=True))
    assert sequence_problems({"messages": out}) == []


def test_units_split_tool_results_from_the_rest_of_a_user_message() -> None:
    units = to_units(None, conversation())
    roles = [d["role"] for d in units.dicts]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "user"]
    assert units.dicts[1]["tool_calls"][0]["id"] == "toolu_1"
    assert "Let me check the order." in units.dicts[1]["content"]  # thinking is counted


def test_a_summary_goes_into_the_messages_and_orphans_are_removed() -> None:
    messages = conversation()
    units = to_units("You are helpful.", messages)
    # The guard summarised everything before the answer "May 3." except the tool result
    # (an orphan once its call is summarised) and the question after it.
    fitted = [units.dicts[0], {"role": "system", "content": "[Summary] order A-1042."},
              units.dicts[3], units.dicts[4], units.dicts[5], units.dicts[6]]
    out = render(units, fitted)
    assert out[0]["role"] == "user"
    assert out[0]["content"][0] == {"type": "text", "text": "[Summary] order A-1042."}
    assert out[0]["content"][1]["text"] == "And the date?"
    assert out[1] is messages[3]  # the redacted-thinking turn, byte-identical
    assert sequence_problems({"messages": out}) == []
    assert "tool_result" not in json.dumps(out)


def test_a_changed_thinking_turn_is_dropped_whole_with_its_results() -> None:
    messages = conversation()
    units = to_units(None, messages)
    cut = dict(units.dicts[1])
    cut["content"] = "Looking…"  # what a cut by the guard would leave
    fitted = [units.dicts[0], cut, *units.dicts[2:]]
    out = render(units, fitted)
    text = json.dumps(out)
    assert "sig-AAA" not in text
    assert "toolu_1" not in text
    assert sequence_problems({"messages": out}) == []
    assert out[-1] is messages[-1]


def test_a_cleared_tool_output_keeps_its_block_and_the_results_come_first() -> None:
    messages = conversation()
    units = to_units(None, messages)
    masked = dict(units.dicts[2])
    masked["content"] = "[output cleared]"
    fitted = [*units.dicts[:2], masked, *units.dicts[3:]]
    out = render(units, fitted)
    assert out[1] is messages[1]  # the thinking turn is untouched
    assert out[2]["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_1",
                                    "content": "[output cleared]"}
    assert out[2]["content"][1] == {"type": "text", "text": "And the date?"}
    assert sequence_problems({"messages": out}) == []


def test_unknown_blocks_make_a_turn_opaque_never_edited() -> None:
    messages = [
        {"role": "user", "content": "search"},
        {"role": "assistant", "content": [SERVER, {"type": "web_search_tool_result",
                                                   "tool_use_id": "srvtoolu_1", "content": []},
                                          {"type": "text", "text": "found " * 30}]},
        {"role": "user", "content": "ok"},
    ]
    units = to_units(None, messages)
    kept = render(units, units.dicts)
    assert kept[1] is messages[1]
    cut = dict(units.dicts[1])
    cut["content"] = "found"
    out = render(units, [units.dicts[0], cut, units.dicts[2]])
    assert "server_tool_use" not in json.dumps(out)
    assert out == [{"role": "user", "content": [{"type": "text", "text": "search"},
                                                {"type": "text", "text": "ok"}]}]


def test_a_leading_assistant_turn_is_dropped_with_its_results() -> None:
    messages = conversation()
    units = to_units(None, messages)
    out = render(units, units.dicts[1:])  # the guard dropped the first user message
    assert out[0]["role"] == "user"
    assert sequence_problems({"messages": out}) == []


def test_cache_markers_are_limited_to_four_keeping_system_and_tools() -> None:
    marker = {"type": "ephemeral"}
    system = [{"type": "text", "text": "sys", "cache_control": marker}]
    tools = [{"name": "t", "input_schema": {"type": "object"}, "cache_control": marker}]
    messages = []
    for i in range(4):
        messages += [{"role": "user", "content": [{"type": "text", "text": f"q{i}",
                                                   "cache_control": marker}]},
                     {"role": "assistant", "content": f"a{i}"}]
    messages.append({"role": "user", "content": "last"})
    units = to_units(system, messages)
    summary = {"role": "system", "content": "[Summary]"}
    out = render(units, [units.dicts[0], summary, *units.dicts[1:]], system, tools)
    total = count_markers(system) + count_markers(tools) + count_markers(out)
    assert total == 4
    # The newest markers stay (the oldest are removed first).
    assert "cache_control" in out[-3]["content"][0]


@pytest.mark.parametrize(("body", "field"), [
    (b"not json", "JSON"),
    (b'{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}', "model"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', "max_tokens"),
    (b'{"model": "m", "max_tokens": 5, "messages": []}', "messages"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]}',
     "messages.0.role"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 5}]}',
     "messages.0.content"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [5]}]}',
     "messages.0.content.0"),
    (b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": '
     b'"tool_result", "tool_use_id": "nope"}]}]}', "messages.0.content.0.tool_use_id"),
    (b'{"model": "m", "max_tokens": 5, "system": 5, "messages": [{"role": "user", '
     b'"content": "x"}]}', "system"),
])
def test_bad_requests_name_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ProxyError) as info:
        parse_messages_request(body)
    assert info.value.status == 400
    assert field in info.value.message


_HEAD = b'{"model": "m", "max_tokens": 5, "messages": '
_CALL = b'{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}'


@pytest.mark.parametrize(("body", "param", "says"), [
    (b"\xff\xfe{}", None, "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, None, "nested too deeply"),
    (b'["model"]', None, "JSON object"),
    (b'{"model": "m", "max_tokens": true, "messages": [{"role": "user", "content": "x"}]}',
     "max_tokens", "positive integer"),
    (b'{"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}',
     "max_tokens", "positive integer"),
    (_HEAD + b'[{"role": "user", "content": "x"}], "tools": {"name": "f"}}', "tools",
     "list of tool definitions"),
    (_HEAD + b'["hi"]}', "messages.0", "expected an object, got str"),
    (_HEAD + b'[{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
     "messages.0.content.0.text", "expected a string"),
    (_HEAD + b'[{"role": "user", "content": [{"type": "tool_use", "id": "t1", "name": "f"}]}]}',
     "messages.0.content.0", "belong in assistant messages"),
    (_HEAD + b'[{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]}',
     "messages.0.content.0.id", "tool call's id"),
    (_HEAD + b'[{"role": "assistant", "content": [{"type": "tool_use", "id": "t1"}]}]}',
     "messages.0.content.0.name", "tool's name"),
    (_HEAD + b'[' + _CALL + b', {"role": "assistant", "content": [{"type": "tool_result", '
     b'"tool_use_id": "t1"}]}]}', "messages.1.content.0", "belong in user messages"),
    (_HEAD + b'[' + _CALL + b', {"role": "user", "content": [{"type": "tool_result"}]}]}',
     "messages.1.content.0.tool_use_id", "id of the tool_use"),
])
def test_every_refusal_is_a_400_naming_the_field_by_its_path(body: bytes, param: str | None,
                                                             says: str) -> None:
    """Each check of the body, the request's fields and the content blocks answers 400
    with the field's path in ``param`` (what the SDKs read) and what was expected."""
    assert_refused(parse_messages_request, body, param, says)


def test_unknown_fields_and_blocks_are_accepted() -> None:
    body = {"model": "m", "max_tokens": 5, "context_management": {"edits": []},
            "messages": [{"role": "user", "content": [{"type": "brand_new", "x": 1}]}]}
    request = parse_messages_request(json.dumps(body).encode())
    assert request.body == body
    units = to_units(None, request.messages)
    assert UNIT_KEY in units.dicts[0]


async def test_a_long_thinking_turn_within_budget_is_forwarded_unchanged() -> None:
    from ctxstack.proxy.fitting import Fitter
    from ctxstack.proxy.request import CompletionRequest
    from ctxstack.tokens import DEFAULT_COUNTER

    long_thought = {"type": "thinking", "thinking": "step " * 15_000, "signature": "sig-L"}
    messages = [
        {"role": "user", "content": "Plan it."},
        {"role": "assistant", "content": [long_thought, {
            "type": "tool_use", "id": "toolu_9", "name": "run", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                      "content": "done"}]},
    ]
    units = to_units(None, messages)
    request = CompletionRequest(b"{}", {"messages": messages}, "m", units.conversation())
    fit = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 100_000, salt="s", summarizer=None)
    assert fit.messages is None  # 75,000 characters of thinking, within budget: as sent
    # Over budget it is kept whole or dropped whole, never cut.
    small = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 2_000, salt="s", summarizer=None)
    out = render(units, small.messages or [])
    assert all(m is messages[1] for m in out if m["role"] == "assistant")
    assert sequence_problems({"messages": out}) == []


def test_counts_with_the_cache_equal_the_counts_without() -> None:
    from ctxstack.proxy.anthropic.units import CountCache
    from ctxstack.tokens import DEFAULT_COUNTER

    messages = conversation()
    cache = CountCache()
    plain = to_units("sys", messages).conversation().tokens(DEFAULT_COUNTER)
    first = to_units("sys", messages).conversation(cache).tokens(DEFAULT_COUNTER)
    again = to_units("sys", messages).conversation(cache)
    assert plain == first == again.tokens(DEFAULT_COUNTER)
    assert again.messages[2].get("tool_calls")
    assert again._views[2] is None  # the assistant unit with a call: no view built


async def test_images_and_documents_are_counted_and_forwarded_as_sent() -> None:
    import base64

    from ctxstack.proxy.fitting import Fitter
    from ctxstack.proxy.request import CompletionRequest
    from ctxstack.tokens import DEFAULT_COUNTER

    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
    pdf = base64.b64encode(b"%PDF-1.4 " + b"x" * 4000).decode()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": png}}
    document = {"type": "document", "source": {"type": "base64",
                                               "media_type": "application/pdf", "data": pdf}}
    messages: list[dict[str, Any]] = []
    for i in range(30):
        messages += [{"role": "user", "content": [image, {"type": "text",
                                                          "text": f"q{i} " + "word " * 200}]},
                     {"role": "assistant", "content": f"a{i} " + "word " * 200}]
    messages.append({"role": "user", "content": [document, {"type": "text", "text": "Read."}]})
    units = to_units(None, messages)
    request = CompletionRequest(b"{}", {"messages": messages}, "m", units.conversation())
    fit = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 4_000, salt="s", summarizer=None)
    out = render(units, fit.messages or [])
    assert out[-1] is messages[-1]  # the document, as sent
    assert sequence_problems({"messages": out}) == []
    for m in out:
        for block in m["content"] if isinstance(m["content"], list) else []:
            if block.get("type") == "image":
                assert block is image
