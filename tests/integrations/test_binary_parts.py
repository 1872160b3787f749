"""Audio and file content in the four framework adapters, with the frameworks' real types.

Each adapter maps the framework's audio / file / document block to ctxstack's audio or
file part (counted by size, never cut), gives it back unchanged, and raises an
:class:`~ctxstack.errors.InputError` naming a block whose content it does not hold.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import AudioBlock, DocumentBlock, TextBlock
from llama_index.core.base.llms.types import ChatMessage as LIMessage
from pydantic_ai.messages import AudioUrl, BinaryContent, DocumentUrl, ModelRequest, UserPromptPart

from ctxstack import ChatMessage, MessageError
from ctxstack.errors import InputError
from ctxstack.guard._rules import cut_message
from ctxstack.integrations import langchain as lc
from ctxstack.integrations import pydantic_ai as pai
from ctxstack.integrations._responses import items_to_messages, messages_to_items
from ctxstack.integrations.llamaindex import from_ctx, to_ctx
from ctxstack.messages import AudioPart, FilePart
from ctxstack.tokens._parts import binary_part_tokens

WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 200
WAV_B64 = base64.b64encode(WAV).decode()
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 40
PDF_B64 = base64.b64encode(PDF).decode()
PDF_URL = f"data:application/pdf;base64,{PDF_B64}"


def only_binary(message: ChatMessage) -> list[AudioPart | FilePart]:
    parts = message.binary_parts
    assert parts
    assert all(binary_part_tokens(p) > 0 for p in parts)
    return parts


# --------------------------------------------------------------------------- LangChain
@pytest.mark.parametrize(("block", "kind"), [
    ({"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}}, "audio"),
    ({"type": "audio", "base64": WAV_B64, "mime_type": "audio/wav"}, "audio"),
    ({"type": "audio", "source_type": "base64", "data": WAV_B64, "mime_type": "audio/mpeg"},
     "audio"),
    ({"type": "file", "file": {"file_data": PDF_URL, "filename": "a.pdf"}}, "file"),
    ({"type": "file", "base64": PDF_B64, "mime_type": "application/pdf",
      "extras": {"filename": "a.pdf"}}, "file"),
    ({"type": "file", "file_id": "file-abc", "id": "block-1"}, "file"),
    ({"type": "file", "source_type": "id", "id": "file-abc"}, "file"),
    ({"type": "file", "url": "https://example.com/a.pdf"}, "file"),
])
def test_langchain_audio_and_file_blocks_become_parts(block: dict[str, Any], kind: str
                                                      ) -> None:
    original = HumanMessage(content=[{"type": "text", "text": "look"}, block])
    (message,) = lc.to_chat_messages([original])
    (part,) = only_binary(message)
    assert isinstance(part, AudioPart if kind == "audio" else FilePart)
    if isinstance(part, FilePart) and part.file.file_id is not None:
        assert part.file.file_id == "file-abc"
    if kind == "audio":
        assert isinstance(part, AudioPart)
        assert part.input_audio.data == WAV_B64
        assert part.input_audio.format == ("mp3" if "mpeg" in str(block) else "wav")
    (back,) = lc.from_chat_messages([message])
    assert back.content == original.content  # the very blocks, while unchanged
    cut = cut_message(message.replace(content=[{"type": "text", "text": "x" * 2_000},
                                               *message.binary_parts]), 1_000)
    (rebuilt,) = lc.from_chat_messages([cut])
    assert isinstance(rebuilt.content, list)
    assert rebuilt.content[1] == part.model_dump(exclude_none=True)


@pytest.mark.parametrize("block", [
    {"type": "audio", "url": "https://example.com/a.wav"},
    {"type": "audio", "file_id": "file-1"},
    {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
])
def test_langchain_audio_it_cannot_count_is_an_input_error_naming_it(block: dict[str, Any]
                                                                      ) -> None:
    with pytest.raises(InputError, match="audio"):
        lc.to_chat_messages([HumanMessage(content=[block])])


# --------------------------------------------------------------------------- pydantic-ai
def test_pydantic_ai_binary_audio_and_documents_become_parts() -> None:
    request = ModelRequest(parts=[UserPromptPart(content=[
        "listen and read",
        BinaryContent(data=WAV, media_type="audio/wav"),
        BinaryContent(data=PDF, media_type="application/pdf"),
        DocumentUrl(url="https://example.com/b.pdf"),
    ])])
    (message,) = pai.to_chat_messages([request])
    audio, pdf, by_url = only_binary(message)
    assert isinstance(audio, AudioPart)
    assert audio.input_audio.data == WAV_B64
    assert audio.input_audio.format == "wav"
    assert isinstance(pdf, FilePart)
    assert pdf.file.file_data == PDF_URL
    assert isinstance(by_url, FilePart)
    assert by_url.file.file_url == "https://example.com/b.pdf"
    (back,) = pai.from_chat_messages([message])
    assert back is request
    cut = cut_message(message.replace(content=[{"type": "text", "text": "x" * 2_000},
                                               *message.binary_parts]), 1_000)
    (rebuilt,) = pai.from_chat_messages([cut])
    assert isinstance(rebuilt, ModelRequest)
    items = rebuilt.parts[0].content
    assert isinstance(items, list)
    assert isinstance(items[1], BinaryContent)
    assert items[1].data == WAV
    assert items[1].media_type == "audio/wav"
    assert isinstance(items[2], BinaryContent)
    assert items[2].data == PDF
    assert isinstance(items[3], DocumentUrl)


def test_pydantic_ai_audio_by_url_is_an_input_error_naming_it() -> None:
    request = ModelRequest(parts=[UserPromptPart(content=[
        "x", AudioUrl(url="https://example.com/a.mp3")])])
    with pytest.raises(InputError, match="AudioUrl"):
        pai.to_chat_messages([request])


# --------------------------------------------------------------------------- LlamaIndex
def test_llamaindex_audio_and_document_blocks_become_parts() -> None:
    original = LIMessage(role="user", blocks=[
        TextBlock(text="listen and read " * 400),
        AudioBlock(audio=WAV, format="wav"),
        DocumentBlock(data=PDF, title="c.pdf"),
    ])
    message = to_ctx(original, 0)
    audio, pdf = only_binary(message)
    assert isinstance(audio, AudioPart)
    assert base64.b64decode(audio.input_audio.data) == WAV
    assert isinstance(pdf, FilePart)
    assert pdf.file.filename == "c.pdf"
    assert pdf.file.file_data == PDF_URL
    back = from_ctx(cut_message(message, 1_000), original)
    assert back.blocks[1] is original.blocks[1]
    assert back.blocks[2] is original.blocks[2]
    assert len(back.blocks[0].text) <= 1_000  # type: ignore[union-attr]


@pytest.mark.parametrize("block", [
    AudioBlock(url="https://example.com/a.wav", format="wav"),
    DocumentBlock(path="/tmp/not-read.pdf"),
])
def test_llamaindex_media_it_does_not_hold_is_an_input_error_naming_it(block: Any) -> None:
    with pytest.raises(InputError, match=type(block).__name__):
        to_ctx(LIMessage(role="user", blocks=[TextBlock(text="x"), block]), 0)


# --------------------------------------------------------------------------- Agents SDK
def test_responses_input_audio_and_files_become_parts_and_come_back() -> None:
    items: list[Any] = [{"role": "user", "content": [
        {"type": "input_text", "text": "listen and read"},
        {"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}},
        {"type": "input_file", "file_data": PDF_URL, "filename": "c.pdf"},
        {"type": "input_file", "file_id": "file-abc"},
    ]}]
    (message,) = items_to_messages(items)
    audio, pdf, ref = only_binary(message)
    assert isinstance(audio, AudioPart)
    assert isinstance(pdf, FilePart)
    assert pdf.file.filename == "c.pdf"
    assert isinstance(ref, FilePart)
    assert ref.file.file_id == "file-abc"
    originals = dict(enumerate(items))
    converted = {(0,): message}
    assert messages_to_items([message], originals, converted) == items
    cut = cut_message(message.replace(content=[{"type": "text", "text": "x" * 2_000},
                                               *message.binary_parts]), 1_000)
    (rebuilt,) = messages_to_items([cut], originals, converted)
    assert rebuilt["content"][1:] == items[0]["content"][1:]


def test_responses_malformed_audio_names_the_field() -> None:
    with pytest.raises(MessageError, match=r"input_audio: input_audio\.data"):
        items_to_messages([{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"format": "wav"}}]}])
