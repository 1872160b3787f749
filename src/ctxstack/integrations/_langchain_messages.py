"""Lossless conversion between LangChain messages and :class:`ctxstack.ChatMessage`.

Mapping: ``SystemMessage`` ↔ role ``system``, ``HumanMessage`` ↔ ``user``, ``AIMessage``
(and its chunk) ↔ ``assistant`` with ``tool_calls`` ↔ :class:`ctxstack.ToolCall`,
``ToolMessage`` ↔ ``tool`` with ``tool_call_id``; a generic LangChain ``ChatMessage`` whose
role is one of those four maps the same way. Content blocks become ctxstack parts: text
blocks (and bare strings) → text, images in every LangChain form (OpenAI ``image_url``,
v1 ``{"type": "image", "url" | "base64"}``, the older ``source_type`` form) → an image part
(base64 as a ``data:`` URL), so the guard counts them as images; audio and file blocks
with their data inline (OpenAI ``input_audio`` / ``file``, v1 ``{"type": "audio" | "file",
"base64": ...}``, the older ``source_type="base64"`` form) and files by id or URL → an
audio or file part, counted by size and never cut; an audio block by URL or id, which
ctxstack cannot count, raises :class:`~ctxstack.errors.InputError` naming it; reasoning text is
counted as text; video counts as a short placeholder; ``tool_use`` blocks are carried by
``tool_calls``.

Nothing is lost: whatever ctxstack does not model — the message ``id``, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool message's
``artifact`` and ``status``, and the original block list — rides in
``ChatMessage.metadata["langchain"]`` (never sent to a provider), and converting back
restores it. The original blocks are restored only while the ctxstack content still equals
their conversion, so a message the guard cut comes back with its new content. ctxstack's own
``pinned`` and ``metadata`` (e.g. kind ``"summary"``) ride the other way in
``response_metadata["ctxstack"]``, so both round trips are exact.

Normalisation (the only one): empty assistant content is ``""`` in LangChain and ``None``
in ctxstack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages import ChatMessage as LCChatMessage

from ctxstack import ChatMessage, ContentPart, ImagePart, MessageError, TextPart, ToolCall
from ctxstack.errors import InputError
from ctxstack.messages import AudioPart, FilePart, RefusalPart
from ctxstack.messages._model import parse_part

LC_KEY = "langchain"
"""``ChatMessage.metadata`` key holding the LangChain-only fields of a converted message."""
CTX_KEY = "ctxstack"
"""``response_metadata`` key holding ctxstack's ``pinned`` / ``metadata`` on a LangChain message."""

_ROLE_OF_CLASS: tuple[tuple[type[BaseMessage], str], ...] = (
    (SystemMessage, "system"), (HumanMessage, "user"), (AIMessage, "assistant"),
    (ToolMessage, "tool"),
)
_GENERIC_ROLES = {"system": "system", "user": "user", "human": "user", "assistant": "assistant",
                  "ai": "assistant", "tool": "tool"}
_MEDIA = ("video",)
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav",
                  "audio/mpeg": "mp3", "audio/mp3": "mp3"}


# ---------------------------------------------------------------------- LangChain → ctxstack
def to_chat_message(message: BaseMessage) -> ChatMessage:
    """One LangChain message as a :class:`ChatMessage` (see the module docstring).

    Raises:
        InputError: not a LangChain message, or a kind ctxstack has no role for
            (``FunctionMessage``, a generic message with an unknown role).
    """
    if not isinstance(message, BaseMessage):
        raise InputError(f"expected a LangChain BaseMessage, got {type(message).__name__}")
    role = _role(message)
    extras: dict[str, Any] = {}
    if message.id is not None:
        extras["id"] = message.id
    if message.additional_kwargs:
        extras["additional_kwargs"] = message.additional_kwargs
    response_metadata = dict(message.response_metadata)
    own = response_metadata.pop(CTX_KEY, None)
    if response_metadata:
        extras["response_metadata"] = response_metadata
    raw = message.content
    if isinstance(raw, list):
        extras["content"] = raw
    content: str | list[ContentPart] | None = content_from_langchain(raw)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    if isinstance(message, AIMessage):
        tool_calls = [
            ToolCall(id=tc.get("id") or "", name=tc["name"], arguments=dict(tc.get("args") or {}))
            for tc in message.tool_calls
        ]
        if message.invalid_tool_calls:
            extras["invalid_tool_calls"] = message.invalid_tool_calls
        if message.usage_metadata is not None:
            extras["usage_metadata"] = message.usage_metadata
        if content == "" or content == []:
            content = None
    elif isinstance(message, ToolMessage):
        tool_call_id = message.tool_call_id
        if message.artifact is not None:
            extras["artifact"] = message.artifact
        if message.status != "success":
            extras["status"] = message.status
    elif isinstance(message, LCChatMessage):
        extras["generic_role"] = message.role
    metadata: dict[str, Any] = {}
    pinned = False
    if isinstance(own, Mapping):
        metadata.update(own.get("metadata") or {})
        pinned = bool(own.get("pinned", False))
    if extras:
        metadata[LC_KEY] = extras
    return ChatMessage(role=role, content=content, tool_calls=tool_calls or None,
                       tool_call_id=tool_call_id, name=message.name, pinned=pinned,
                       metadata=metadata)


def to_chat_messages(messages: Iterable[BaseMessage]) -> list[ChatMessage]:
    """Convert a list; an error names the index of the bad message."""
    out = []
    for i, m in enumerate(messages):
        try:
            out.append(to_chat_message(m))
        except InputError as exc:
            raise InputError(f"messages[{i}]: {exc}") from None
    return out


def _role(message: BaseMessage) -> str:
    if isinstance(message, LCChatMessage):
        role = _GENERIC_ROLES.get(message.role)
        if role is None:
            raise InputError(f"ChatMessage role {message.role!r} has no ctxstack equivalent")
        return role
    for cls, role in _ROLE_OF_CLASS:
        if isinstance(message, cls):
            return role
    raise InputError(f"{type(message).__name__} has no ctxstack equivalent "
                     "(expected a system, human, AI or tool message)")


def content_from_langchain(content: str | list[str | dict[Any, Any]]) -> str | list[ContentPart]:
    """LangChain content as ctxstack content: a string stays a string, blocks become parts."""
    if isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for block in content:
        part = _part(block)
        if part is not None:
            parts.append(part)
    return parts


def _part(block: str | Mapping[str, Any]) -> ContentPart | None:
    if isinstance(block, str):
        return TextPart(text=block)
    kind = block.get("type")
    if kind == "text":
        return TextPart(text=str(block.get("text", "")))
    if kind == "image_url":
        ref = block.get("image_url")
        if isinstance(ref, Mapping):
            detail = ref.get("detail")
            return ImagePart.model_validate(
                {"image_url": {"url": ref.get("url", ""),
                               **({"detail": detail} if detail else {})}})
        return ImagePart.model_validate({"image_url": {"url": str(ref)}})
    if kind == "image":
        url = _image_url(block)
        if url is not None:
            return ImagePart.model_validate({"image_url": {"url": url}})
        return TextPart(text="[image]")
    if kind in ("tool_use", "tool_call", "tool_call_chunk"):
        return None  # carried by AIMessage.tool_calls
    if kind in ("reasoning", "thinking"):
        return TextPart(text=str(block.get("reasoning") or block.get("thinking") or ""))
    if kind in ("input_audio", "file", "audio"):
        return _binary(block)
    if kind == "refusal" and isinstance(block.get("refusal"), str):
        return RefusalPart(refusal=block["refusal"])
    if kind in _MEDIA:
        return TextPart(text=f"[{kind}]")
    return TextPart(text=json.dumps(block, ensure_ascii=False, default=str))


def _binary(block: Mapping[str, Any]) -> AudioPart | FilePart:
    """An audio or file block as a part (see the module doc); InputError if it cannot be."""
    kind = block.get("type")
    if (kind == "file" and isinstance(block.get("file"), Mapping)) or kind == "input_audio":
        wire: Mapping[str, Any] = block  # already the OpenAI chat-completions shape
    else:
        data = block.get("base64") or (block.get("data") if block.get("source_type") == "base64"
                                       else None)
        mime = str(block.get("mime_type") or "")
        if kind == "audio":
            fmt = _AUDIO_FORMATS.get(mime.lower(), mime.rpartition("/")[2])
            if not data:
                raise InputError("LangChain audio block without inline base64 data (by url "
                                 "or id): ctxstack cannot count audio it does not hold; "
                                 "send it as base64")
            wire = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
        else:
            name = (block.get("filename") or (block.get("extras") or {}).get("filename")
                    or (block.get("metadata") or {}).get("filename"))
            ref: dict[str, Any] = {"filename": name} if name else {}
            if data:
                ref["file_data"] = f"data:{mime or 'application/pdf'};base64,{data}"
            elif block.get("file_id") or block.get("source_type") == "id":
                # v1 blocks name the file ``file_id`` (their ``id`` is the block's own);
                # the older form says ``source_type="id"`` and puts the file's in ``id``.
                ref["file_id"] = block.get("file_id") or block.get("id")
            elif block.get("url"):
                ref["file_url"] = block["url"]
            wire = {"type": "file", "file": ref}
    try:
        part = parse_part(wire, f"LangChain {kind} block")
    except MessageError as exc:
        raise InputError(str(exc)) from None
    assert isinstance(part, AudioPart | FilePart)
    return part


def _image_url(block: Mapping[str, Any]) -> str | None:
    if block.get("source_type") == "url" or ("url" in block and block.get("url")):
        return str(block["url"])
    data = block.get("base64") or (block.get("data") if block.get("source_type") == "base64"
                                   else None)
    if data:
        mime = block.get("mime_type") or "image/png"
        return f"data:{mime};base64,{data}"
    return None


# ---------------------------------------------------------------------- ctxstack → LangChain
def from_chat_message(message: ChatMessage) -> BaseMessage:
    """A :class:`ChatMessage` as the LangChain message it came from (or a new one)."""
    extras: Mapping[str, Any] = message.metadata.get(LC_KEY) or {}
    content = _content_to_langchain(message.content, extras.get("content"))
    response_metadata = dict(extras.get("response_metadata") or {})
    own = {k: v for k, v in message.metadata.items() if k != LC_KEY}
    if own or message.pinned:
        response_metadata[CTX_KEY] = {"metadata": own, "pinned": message.pinned}
    common: dict[str, Any] = {
        "content": content,
        "name": message.name,
        "id": extras.get("id"),
        "additional_kwargs": dict(extras.get("additional_kwargs") or {}),
        "response_metadata": response_metadata,
    }
    if "generic_role" in extras:
        return LCChatMessage(role=extras["generic_role"], **common)
    match message.role:
        case "system":
            return SystemMessage(**common)
        case "user":
            return HumanMessage(**common)
        case "assistant":
            calls = [{"name": c.name, "args": dict(c.arguments), "id": c.id or None,
                      "type": "tool_call"} for c in message.tool_calls or []]
            return AIMessage(**common, tool_calls=calls,
                             invalid_tool_calls=list(extras.get("invalid_tool_calls") or []),
                             usage_metadata=extras.get("usage_metadata"))
        case "tool":
            assert message.tool_call_id is not None  # ChatMessage guarantees it
            return ToolMessage(**common, tool_call_id=message.tool_call_id,
                               artifact=extras.get("artifact"),
                               status=extras.get("status", "success"))
    raise InputError(f"unknown role {message.role!r}")  # pragma: no cover - Literal


def from_chat_messages(messages: Iterable[ChatMessage]) -> list[BaseMessage]:
    """Convert a list back."""
    return [from_chat_message(m) for m in messages]


def _content_to_langchain(
    content: str | list[ContentPart] | None, original: Sequence[Any] | None
) -> str | list[str | dict[Any, Any]]:
    if original is not None and content_from_langchain(list(original)) == (content or []):
        return list(original)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    blocks: list[str | dict[Any, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append({"type": "image_url",
                           "image_url": part.image_url.model_dump(exclude_none=True)})
        else:  # refusal, audio, file: the OpenAI shape, which LangChain passes through
            blocks.append(part.model_dump(exclude_none=True))
    return blocks
