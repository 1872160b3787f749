"""The proxy's pure parts: request validation, guard views, fitting without a database,
settings from the environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxstack.errors import ConfigError
from ctxstack.proxy.errors import ProxyError
from ctxstack.proxy.fitting import Fitter
from ctxstack.proxy.request import parse_request
from ctxstack.proxy.settings import ProxySettings
from ctxstack.testing import ScriptedLLM
from ctxstack.tokens import DEFAULT_COUNTER


def _request(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **extra}).encode()


def test_valid_wire_shapes_the_guard_does_not_model_are_accepted() -> None:
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "listen"},
                                     {"type": "input_audio",
                                      "input_audio": {"data": "AAAA", "format": "wav"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": '{"broken": '}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "error: bad arguments"},
        {"role": "user", "content": "again"},
    ]
    request = parse_request(_request(messages))
    conv = request.conversation
    assert conv.prompt_end == 1
    assert conv.view(0).role == "system"
    assert conv.view(2).tool_calls[0].arguments == {"_raw": '{"broken": '}
    assert conv.view(4).pinned  # the last user message
    assert not conv.view(1).pinned
    # Unchanged views forward the client's own dicts, unknown fields included.
    assert conv.wire_form(conv.view(1)) is request.body["messages"][1]
    assert conv.tokens(DEFAULT_COUNTER) == DEFAULT_COUNTER.count_messages(conv.views())


def test_legacy_function_role_is_accepted_and_forwarded_as_sent() -> None:
    """OpenAI still accepts ``role: "function"`` answering a ``function_call``: the proxy
    does not refuse what the upstream would take."""
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": None,
                 "function_call": {"name": "f", "arguments": "{}"}},
                {"role": "function", "name": "f", "content": "y"}]
    request = parse_request(_request(messages))
    assert request.conversation.messages == messages


@pytest.mark.parametrize(("messages", "fragment"), [
    ([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}], "tool_call_id"),
    ([{"role": "tool", "tool_call_id": "c", "content": "y"}], "no preceding"),
    ([{"role": "wizard", "content": "y"}], "unknown role"),
    (["just a string"], "expected an object"),
    ([{"role": "assistant", "tool_calls": "nope"}], "tool_calls: expected a list"),
])
def test_invalid_messages_are_refused_with_the_index(messages: list[Any], fragment: str) -> None:
    with pytest.raises(ProxyError) as info:
        parse_request(_request(messages))
    assert info.value.status == 400
    assert fragment in info.value.message
    assert "messages[" in info.value.message


async def test_fit_within_budget_forwards_the_request_unchanged() -> None:
    request = parse_request(_request([{"role": "user", "content": "hi"}], temperature=0))
    fit = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 4_000, salt="s", summarizer=None)
    assert fit.messages is None
    assert fit.method == "none"
    assert (fit.original, fit.kept, fit.summarized) == (1, 1, 0)


async def test_fit_over_budget_keeps_system_prompt_last_user_and_tool_pairs() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "S" * 400}]
    for i in range(40):
        messages += [{"role": "user", "content": f"q{i} " + "words " * 60},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": f"c{i}", "type": "function",
                          "function": {"name": "look", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "r " * 100},
                     {"role": "assistant", "content": "done " * 30}]
    last = {"role": "user", "content": "final question " * 300}
    messages.append(last)
    request = parse_request(_request(messages))
    summarizer = ScriptedLLM(["Summary of the earlier work."])
    fit = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 4_000, salt="s", summarizer=summarizer)
    assert fit.method == "llm"
    assert fit.messages is not None
    assert fit.messages[0] == messages[0]
    assert fit.messages[-1] == last
    assert fit.tokens <= 4_000
    ids = set()
    for m in fit.messages:
        if m["role"] == "assistant":
            ids = {c["id"] for c in m.get("tool_calls") or ()}
        if m["role"] == "tool":
            assert m["tool_call_id"] in ids


def test_settings_from_env() -> None:
    base = {"CTXSTACK_PROXY_UPSTREAM": "http://127.0.0.1:9/v1/", "LLM_API_KEY": "secret"}
    settings = ProxySettings.from_env(base)
    assert settings.upstream == "http://127.0.0.1:9/v1"
    assert settings.auth == "none"
    assert "secret" not in repr(settings)
    assert ProxySettings.from_env({**base, "CTXSTACK_PROXY_HOST": "0.0.0.0"}).auth == "token"
    with pytest.raises(ConfigError, match="CTXSTACK_PROXY_UPSTREAM"):
        ProxySettings.from_env({})
    with pytest.raises(ConfigError, match="not a loopback"):
        ProxySettings.from_env({**base, "CTXSTACK_PROXY_HOST": "10.1.2.3",
                                "CTXSTACK_PROXY_AUTH": "none"})
    with pytest.raises(ConfigError, match="CTXSTACK_PROXY_TIMEOUT"):
        ProxySettings.from_env({**base, "CTXSTACK_PROXY_TIMEOUT": "soon"})
    with pytest.raises(ConfigError, match="http"):
        ProxySettings.from_env({"CTXSTACK_PROXY_UPSTREAM": "ftp://x"})


def test_images_count_as_image_tokens_and_are_forwarded_as_sent() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png",
                                                "detail": "low"}}
    request = parse_request(_request([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, image]}]))
    conv = request.conversation
    assert conv.tokens(DEFAULT_COUNTER) >= 765
    assert conv.wire_form(conv.view(0))["content"][1] == image


def test_binary_parts_are_modelled_never_read_and_forwarded_as_the_clients_own() -> None:
    from ctxstack.guard._rules import cut_message

    data = "QUFB" * 2_500_000  # 10 MB of base64
    audio = {"type": "input_audio", "input_audio": {"data": data, "format": "mp3"},
             "x_vendor": 1}
    pdf = {"type": "file", "file": {"file_data": "data:application/pdf;base64," + data}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "t" * 80_000}, audio,
                                             pdf]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "next"}]
    request = parse_request(_request(messages))
    conv = request.conversation
    assert conv.longest_text() == 80_000  # the text, not the payloads
    view = conv.view(0)
    assert [p.type for p in view.binary_parts] == ["input_audio", "file"]
    cut = cut_message(view, 50_000)
    wire = conv.wire_form(cut)
    assert wire["content"][1] is request.body["messages"][0]["content"][1]
    assert wire["content"][2] is request.body["messages"][0]["content"][2]
    assert len(wire["content"][0]["text"]) <= 50_000


@pytest.mark.parametrize("content", [None, "Here is my answer."])
def test_an_assistant_audio_reference_is_counted(content: str | None) -> None:
    from ctxstack.tokens._parts import AUDIO_REFERENCE_TOKENS

    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content},
             {"role": "user", "content": "again"}]
    spoken = [dict(m) for m in plain]
    spoken[1]["audio"] = {"id": "audio_abc"}
    before = parse_request(_request(plain)).conversation.tokens(DEFAULT_COUNTER)
    conv = parse_request(_request(spoken)).conversation
    assert conv.tokens(DEFAULT_COUNTER) == before + AUDIO_REFERENCE_TOKENS
    assert conv.wire_form(conv.view(1)) is conv.messages[1]


async def test_a_cut_message_with_a_vendor_part_forwards_a_note_not_its_json() -> None:
    """An old user message past the cut length holding a part of a type the guard does not
    model (a vendor's ``document``) and an audio part: the guard counted the unknown part
    as its JSON text; what goes upstream is a note naming the omitted part, the message's
    own text cut head and tail, and the audio part as sent — never a slice of the JSON."""
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    document = {"type": "document", "source": {"type": "text", "data": "SECRET-JSON " * 50}}
    big = "HEAD-OF-TEXT " + "line of a pasted log\n" * 4_000 + "TAIL-OF-TEXT"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": big}, document, audio]},
        {"role": "assistant", "content": "Read it."},
        {"role": "user", "content": "What failed?"},
    ]
    request = parse_request(_request(messages))
    fit = await Fitter(DEFAULT_COUNTER, None, summary_timeout=5).fit(
        request, 60_000, salt="s", summarizer=None)
    assert fit.messages is not None
    cut = next(m for m in fit.messages if isinstance(m.get("content"), list))
    text_parts = [p for p in cut["content"] if p.get("type") == "text"]
    assert len(text_parts) == 1
    text = text_parts[0]["text"]
    assert text.startswith("[1 document part(s) omitted]\n")
    assert "HEAD-OF-TEXT" in text
    assert "TAIL-OF-TEXT" in text
    assert len(text) < len(big)
    assert "SECRET-JSON" not in json.dumps(cut)
    assert audio in cut["content"]
    assert fit.messages[-1] == messages[-1]
    assert fit.messages[0] == messages[0]
