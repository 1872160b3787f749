"""Audio, file and refusal content parts: validation naming the field, exact round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstack import ChatMessage
from ctxstack.errors import InputError, MessageError
from ctxstack.messages import (
    AudioPart,
    FilePart,
    RefusalPart,
    TextPart,
    from_openai_messages,
    to_openai_messages,
)
from ctxstack.messages._model import AUDIO_KEY, binary_note, coerce_content

B64 = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="
AUDIO = {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}}
PDF = {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQK",
                                "filename": "x.pdf"}}
BY_ID = {"type": "file", "file": {"file_id": "file-abc"}}
REFUSAL = {"type": "refusal", "refusal": "I can't help with that."}


def test_each_part_kind_round_trips_byte_exactly() -> None:
    wire = [
        {"role": "user", "content": [{"type": "text", "text": "listen and read"}, AUDIO, PDF,
                                     BY_ID]},
        {"role": "assistant", "content": [REFUSAL]},
        {"role": "assistant", "content": None, "audio": {"id": "audio_abc"}},
        {"role": "user", "content": [{"type": "file", "file": {"file_url": "https://x/a.pdf"}}]},
    ]
    messages = from_openai_messages(wire)
    assert to_openai_messages(messages) == wire
    assert json.dumps(to_openai_messages(messages)) == json.dumps(wire)
    user = messages[0]
    assert isinstance(user.content, list)
    assert [type(p) for p in user.content] == [TextPart, AudioPart, FilePart, FilePart]
    assert isinstance(messages[1].content, list)
    assert isinstance(messages[1].content[0], RefusalPart)
    assert messages[2].metadata[AUDIO_KEY] == {"id": "audio_abc"}


def test_the_payload_is_carried_not_copied() -> None:
    data = "QUFB" * 50_000
    message = ChatMessage.from_openai(
        {"role": "user", "content": [{"type": "input_audio",
                                      "input_audio": {"data": data, "format": "mp3"}}]})
    (part,) = message.binary_parts
    assert isinstance(part, AudioPart)
    assert part.input_audio.data is data
    assert message.to_openai()["content"][0]["input_audio"]["data"] is data


def test_binary_parts_are_not_text() -> None:
    message = ChatMessage.from_openai(
        {"role": "user", "content": [{"type": "text", "text": "hi"}, AUDIO, PDF]})
    assert message.text == "hi"
    assert B64 not in message.text
    assert [binary_note(p) for p in message.binary_parts] == ["[audio (wav)]", "[file: x.pdf]"]
    refusal = ChatMessage.from_openai({"role": "assistant", "content": [REFUSAL]})
    assert refusal.text == REFUSAL["refusal"]


def test_unknown_audio_formats_and_extra_keys_pass_through() -> None:
    wire = {"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "flac"},
         "cache_control": {"type": "ephemeral"}},
        {"type": "file", "file": {"file_id": "file-1", "vendor": {"pages": [1, 2]}}}]}
    assert ChatMessage.from_openai(wire).to_openai() == wire


@pytest.mark.parametrize(("part", "fragment"), [
    ({"type": "input_audio"}, "content[0]: input_audio: Field required"),
    ({"type": "input_audio", "input_audio": {"format": "wav"}},
     "content[0]: input_audio.data: Field required"),
    ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
     "input_audio.data: must be a non-empty string"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA"}}, "input_audio.format: Field"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": ""}},
     "input_audio.format: must be a non-empty string"),
    ({"type": "input_audio", "input_audio": {"data": 7, "format": "wav"}},
     "input_audio.data: Input should be a valid string"),
    ({"type": "input_audio", "input_audio": "AAAA"}, "input_audio"),
    ({"type": "file"}, "content[0]: file: Field required"),
    ({"type": "file", "file": {"filename": "a.pdf"}}, "file: needs file_data"),
    ({"type": "file", "file": {"file_id": ""}}, "file.file_id: must be a non-empty string"),
    ({"type": "file", "file": {"file_data": None, "file_id": 3}}, "file.file_id"),
    ({"type": "refusal"}, "content[0]: refusal: Field required"),
    ({"type": "video_url", "video_url": {"url": "x"}},
     "content[0].type: unsupported content part type 'video_url'"),
])
def test_malformed_parts_name_the_field(part: dict[str, Any], fragment: str) -> None:
    with pytest.raises(MessageError) as info:
        ChatMessage.from_openai({"role": "user", "content": [part]})
    assert fragment in str(info.value)
    with pytest.raises(MessageError, match=r"messages\[1\]\.content\[0\]"):
        from_openai_messages([{"role": "system", "content": "s"},
                              {"role": "user", "content": [part]}])


@pytest.mark.parametrize(("audio", "fragment"), [
    ("audio_abc", "audio: expected an object"),
    ({}, "audio.id: missing"),
    ({"id": 3}, "audio.id: missing or not a string"),
])
def test_malformed_assistant_audio_reference_names_the_field(audio: object, fragment: str
                                                             ) -> None:
    with pytest.raises(MessageError, match=fragment):
        ChatMessage.from_openai({"role": "assistant", "content": None, "audio": audio})


def test_audio_reference_is_an_assistant_field_only() -> None:
    user = ChatMessage.from_openai({"role": "user", "content": "x", "audio": {"id": "a"}})
    assert AUDIO_KEY not in user.metadata
    assert "audio" not in user.to_openai()


def test_constructors_and_coerce_content_take_the_new_parts() -> None:
    parts = coerce_content([{"type": "text", "text": "t"}, AUDIO, PDF, REFUSAL])
    assert isinstance(parts, list)
    assert [type(p).__name__ for p in parts] == ["TextPart", "AudioPart", "FilePart",
                                                 "RefusalPart"]
    assert ChatMessage.user(parts).content == parts
    assert ChatMessage.query(tuple(parts)).content == parts
    direct = ChatMessage(role="user", content=[AUDIO])
    assert direct.binary_parts[0].model_dump() == AUDIO
    with pytest.raises(InputError, match=r"input_audio\.data"):
        coerce_content([{"type": "input_audio", "input_audio": {"format": "wav"}}])


# --------------------------------------------------------------------------- property
_b64 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
               min_size=1, max_size=200).map(lambda s: s + "=" * (-len(s) % 4))
_name = st.text(min_size=1, max_size=20)
_extra = st.dictionaries(st.sampled_from(["cache_control", "x_vendor"]),
                         st.sampled_from([{"type": "ephemeral"}, "v", 3]), max_size=1)
_audio = st.builds(lambda d, f, x: {"type": "input_audio", "input_audio": {"data": d,
                                                                          "format": f}, **x},
                   _b64, st.sampled_from(["wav", "mp3", "flac", "pcm16"]), _extra)
_file_obj = st.one_of(
    st.builds(lambda d, n: {"file_data": f"data:application/pdf;base64,{d}", "filename": n},
              _b64, _name),
    st.builds(lambda d: {"file_data": d}, _b64),
    st.builds(lambda i: {"file_id": f"file-{i}"}, _name),
    st.builds(lambda u: {"file_url": f"https://example.com/{u}"}, _name),
)
_file = st.builds(lambda f, x: {"type": "file", "file": f, **x}, _file_obj, _extra)
_text = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=50))
_refusal = st.builds(lambda t: {"type": "refusal", "refusal": t}, st.text(max_size=50))


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.one_of(_audio, _file, _text, _refusal), min_size=1, max_size=6),
       role=st.sampled_from(["user", "assistant"]),
       audio_ref=st.one_of(st.none(), _name.map(lambda i: {"id": f"audio_{i}"})))
def test_any_mix_of_parts_round_trips_exactly(parts: list[dict[str, Any]], role: str,
                                              audio_ref: dict[str, str] | None) -> None:
    wire: dict[str, Any] = {"role": role, "content": parts}
    if audio_ref is not None and role == "assistant":
        wire["audio"] = audio_ref
    message = ChatMessage.from_openai(wire)
    out = message.to_openai()
    assert json.dumps(out, sort_keys=True) == json.dumps(wire, sort_keys=True)
    assert ChatMessage.from_openai(out) == message
    binaries = [p for p in parts if p["type"] in ("input_audio", "file")]
    assert len(message.binary_parts) == len(binaries)
    for part in binaries:
        payload = part.get("input_audio", part.get("file"))
        for value in payload.values():
            if isinstance(value, str) and len(value) > 8:
                assert value not in message.text or any(
                    value in p.get("text", p.get("refusal", "")) for p in parts
                    if p["type"] in ("text", "refusal"))
