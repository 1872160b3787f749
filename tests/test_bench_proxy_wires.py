"""The proxy benchmark's wire adapters (:mod:`benchmarks.proxy_wires`) build requests the
proxy accepts on each wire, split them into the prompt units in the provider's order, and
tell the proxy's summary calls from the conversation's requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.proxy_wires import (
    SYSTEM,
    WIRES,
    AnthropicWire,
    ChatWire,
    ResponsesWire,
    Wire,
    is_summary,
)
from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION
from ctxstack.proxy.anthropic import parse_messages_request
from ctxstack.proxy.request import parse_request
from ctxstack.proxy.responses_request import parse_responses, validate_pairs
from ctxstack.tokens import DEFAULT_COUNTER


def _history(wire: Wire) -> list[dict[str, Any]]:
    return [wire.text("user", "Check the log of day 1."),
            *wire.tool_exchange("call_1", "d1.log", "12:00 shipped order #A-1001 ok\n"),
            wire.text("assistant", "Day 1: all ok."),
            wire.text("user", "Anything unusual?")]


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
def test_a_built_request_is_accepted_by_the_proxy_on_its_wire(wire: Wire) -> None:
    raw = json.dumps(wire.body("gpt-4o", _history(wire))).encode()
    if isinstance(wire, ChatWire):
        parse_request(raw)
    elif isinstance(wire, AnthropicWire):
        parse_messages_request(raw)
    else:
        request = parse_responses(raw)
        validate_pairs([], request.input)


def test_units_follow_each_providers_render_order() -> None:
    chat, anthropic, responses = ChatWire(), AnthropicWire(), ResponsesWire()
    chat_units = chat.units(chat.body("m", _history(chat)))
    assert chat_units[0] == chat.body("m", [])["tools"]
    assert chat_units[1] == {"role": "system", "content": SYSTEM}
    body = anthropic.body("m", _history(anthropic))
    assert anthropic.units(body)[:2] == [body["tools"], SYSTEM]
    assert anthropic.units(body)[2:] == body["messages"]
    body = responses.body("m", _history(responses))
    assert responses.units(body)[:2] == [SYSTEM, body["tools"]]
    assert responses.units(body)[2:] == body["input"]


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
def test_the_recall_tool_adds_tokens_to_the_proxys_count(wire: Wire) -> None:
    body = wire.body("m", _history(wire))
    assert wire.proxy_tokens(wire.with_recall(body), DEFAULT_COUNTER) > wire.proxy_tokens(
        body, DEFAULT_COUNTER)


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
def test_a_summary_call_is_told_from_a_request_carrying_a_summary(wire: Wire) -> None:
    history = _history(wire)
    asking = wire.body("m", [*history, wire.text("user", f"Summarise.\n\n{LANGUAGE_INSTRUCTION}")])
    assert is_summary(asking)
    carrying = wire.body("m", [wire.text("user", "Summary: all days were ok."), *history])
    assert not is_summary(carrying)
    transcript = {"model": "m", "messages": [
        {"role": "system", "content": f"Summarise.\n{LANGUAGE_INSTRUCTION}"},
        {"role": "user", "content": "the transcript"}]}
    assert is_summary(transcript)
