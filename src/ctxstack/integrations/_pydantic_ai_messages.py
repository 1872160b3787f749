"""Conversion between pydantic-ai ``ModelMessage`` lists and :class:`ctxstack.ChatMessage` lists.

pydantic-ai → ctxstack, part by part:

=====================================  =====================================================
``ModelRequest`` part                  ChatMessage
=====================================  =====================================================
``SystemPromptPart``                   ``system`` (kind ``"summary"`` if ctxstack wrote it)
``UserPromptPart``                     ``user``; text, images (URL or binary → ``data:``
                                       URL), binary audio → audio part, binary documents
                                       and ``DocumentUrl`` → file part (counted by size,
                                       never cut), video as a short placeholder;
                                       ``AudioUrl`` and ``UploadedFile`` (content not held,
                                       so not countable) raise ``InputError``
tool return parts (``ToolReturnPart``  ``tool`` with ``tool_call_id``; content is what the
and the other ``*-return`` kinds)      model is shown (``model_response_str()``)
``RetryPromptPart`` with a tool        ``tool`` (it answers that call); without: ``user``
``RetryFeedbackPart``                  ``user`` (the feedback text)
request-side ``CompactionPart``        ``system`` summary (folded into ctxstack's own)
=====================================  =====================================================

A ``ModelResponse`` is ONE ``assistant`` message: text and thinking parts as its content,
``ToolCallPart`` (and the other non-native ``*-call`` kinds) as ``tool_calls``. Parts
ctxstack has no notion of (instruction or tool-availability deltas, native tool parts,
files, …) ride along with a neighbouring message of the same request or response: kept,
dropped or summarised with it.

Nothing is lost: each ChatMessage carries its original parts and message in
``metadata["pydantic_ai"]`` (never sent to a model), and converting back returns those
very objects while the ChatMessage's content is unchanged (a message the guard cut gets its
part rebuilt with the new content). Consecutive request-side messages become one
``ModelRequest``, each assistant message one ``ModelResponse``, so the output alternates
request/response as pydantic-ai expects; a rebuilt request takes its fields
(``instructions``, ``run_id``, …) from the newest original request it holds parts of.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UploadedFile,
    UserPromptPart,
)

from ctxstack import ChatMessage, ContentPart, ImagePart, ToolCall
from ctxstack import TextPart as CtxTextPart
from ctxstack.compaction import SUMMARY_PREFIX
from ctxstack.errors import InputError
from ctxstack.messages import AudioPart, FilePart, RefusalPart

PAI_KEY = "pydantic_ai"
"""``ChatMessage.metadata`` key holding the original parts and message."""
SUMMARY_MARK = "ctxstack"
"""``SystemPromptPart.metadata`` key marking a summary ctxstack wrote (value ``"summary"``)."""
_SYSTEM_METADATA = "metadata" in {f.name for f in dataclasses.fields(SystemPromptPart)}
"""pydantic-ai before 2.5x has no ``SystemPromptPart.metadata``: the summary prefix marks it."""


# ---------------------------------------------------------------------- pydantic-ai → ctxstack
def to_chat_messages(messages: Sequence[ModelMessage]) -> list[ChatMessage]:
    """Convert a pydantic-ai history (see the module docstring).

    Raises:
        InputError: an element is neither a ``ModelRequest`` nor a ``ModelResponse``.
    """
    out: list[ChatMessage] = []
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            out.append(_from_response(message))
        elif isinstance(message, ModelRequest):
            out.extend(_from_request(message))
        else:
            raise InputError(f"messages[{i}]: expected a ModelRequest or ModelResponse, "
                             f"got {type(message).__name__}")
    return out


def _carrier(message: ModelMessage, parts: list[Any], cm: ChatMessage) -> ChatMessage:
    carrier = {"message": message, "parts": parts, "content": cm.content,
               "tool_calls": cm.tool_calls}
    # model_copy, not replace: only metadata changes, and revalidating would double the
    # cost of a cold conversion.
    return cm.model_copy(update={"metadata": {**cm.metadata, PAI_KEY: carrier}})


def _from_request(request: ModelRequest) -> list[ChatMessage]:
    made: list[tuple[ChatMessage, list[Any]]] = []
    loose: list[Any] = []  # parts ctxstack does not model, waiting for a carrier
    for part in request.parts:
        cm = request_part_message(part)
        if cm is None:
            if made:
                made[-1][1].append(part)
            else:
                loose.append(part)
            continue
        made.append((cm, [*loose, part]))
        loose = []
    if not made:
        # Only unmodelled parts: an empty system message keeps them in place.
        made.append((ChatMessage(role="system", content=""), []))
    if loose:
        made[-1][1].extend(loose)
    return [_carrier(request, parts, cm) for cm, parts in made]


def request_part_message(part: Any) -> ChatMessage | None:
    """The ChatMessage for one request part, or None for a part ctxstack does not model."""
    kind = getattr(part, "part_kind", "")
    if kind == "system-prompt":
        marked = (getattr(part, "metadata", None) or {}).get(SUMMARY_MARK) == "summary"
        summary = marked or part.content.startswith(SUMMARY_PREFIX)
        return ChatMessage(role="system", content=part.content,
                           metadata={"kind": "summary"} if summary else {})
    if kind == "user-prompt":
        return ChatMessage(role="user", content=_user_content(part.content))
    if kind == "compaction":
        return ChatMessage(role="system", content=part.content or "",
                           metadata={"kind": "summary"})
    if kind == "retry-prompt":
        if part.tool_name is not None:
            return ChatMessage(role="tool", tool_call_id=part.tool_call_id,
                               content=part.model_response())
        return ChatMessage(role="user", content=part.model_response())
    if kind == "retry-feedback":
        return ChatMessage(role="user", content=part.model_response())
    if kind.endswith("-return") and not kind.startswith("builtin") and getattr(
        part, "tool_call_id", None
    ):
        return ChatMessage(role="tool", tool_call_id=part.tool_call_id,
                           content=part.model_response_str())
    return None


def _user_content(content: str | Sequence[Any]) -> str | list[ContentPart]:
    if isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for item in content:
        if isinstance(item, str):
            parts.append(CtxTextPart(text=item))
        elif isinstance(item, ImageUrl):
            parts.append(ImagePart.model_validate({"image_url": {"url": item.url}}))
        elif isinstance(item, BinaryContent) and item.is_image:
            parts.append(ImagePart.model_validate({"image_url": {"url": item.data_uri}}))
        elif isinstance(item, BinaryContent) and item.is_audio:
            parts.append(AudioPart.model_validate({"input_audio": {
                "data": item.base64, "format": _audio_format(item.media_type)}}))
        elif isinstance(item, BinaryContent) and item.is_document:
            parts.append(FilePart.model_validate({"file": {"file_data": item.data_uri}}))
        elif isinstance(item, DocumentUrl):
            parts.append(FilePart.model_validate({"file": {"file_url": item.url}}))
        elif isinstance(item, AudioUrl | UploadedFile):
            raise InputError(f"pydantic-ai {type(item).__name__}: ctxstack cannot count "
                             "content it does not hold; send it as BinaryContent")
        elif isinstance(getattr(item, "content", None), str):  # TextContent
            parts.append(CtxTextPart(text=item.content))
        elif getattr(item, "kind", "") != "cache-point":
            parts.append(CtxTextPart(text=f"[{getattr(item, 'kind', type(item).__name__)}]"))
    return parts


def _from_response(response: ModelResponse) -> ChatMessage:
    texts: list[str] = []
    calls: list[ToolCall] = []
    part: Any
    for part in response.parts:
        kind = getattr(part, "part_kind", "")
        if kind in ("text", "thinking"):
            texts.append(part.content)
        elif kind.endswith("-call") and not kind.startswith("builtin"):
            calls.append(ToolCall(id=part.tool_call_id, name=part.tool_name,
                                  arguments=_arguments(part)))
    cm = ChatMessage(role="assistant", content="\n".join(texts) if texts else None,
                     tool_calls=calls or None)
    return _carrier(response, list(response.parts), cm)


def _arguments(part: Any) -> dict[str, Any]:
    try:
        args = part.args_as_dict()
    except Exception:  # unparsable JSON the model produced: count it as text
        return {"_raw": str(part.args)}
    return dict(args) if isinstance(args, Mapping) else {"_raw": str(args)}


# ---------------------------------------------------------------------- ctxstack → pydantic-ai
def from_chat_messages(messages: Iterable[ChatMessage]) -> list[ModelMessage]:
    """Convert back: originals where unchanged, alternating requests and responses."""
    out: list[ModelMessage] = []
    parts: list[Any] = []
    source: ModelRequest | None = None
    tool_names: dict[str, str] = {}

    def flush() -> None:
        nonlocal parts, source
        if parts:
            if source is not None and len(source.parts) == len(parts) and all(
                a is b for a, b in zip(source.parts, parts, strict=True)
            ):
                out.append(source)
            elif source is not None:
                out.append(dataclasses.replace(source, parts=parts))
            else:
                out.append(ModelRequest(parts=parts))
        parts, source = [], None

    for cm in messages:
        carrier = cm.metadata.get(PAI_KEY)
        if cm.role == "assistant":
            flush()
            response = _to_response(cm, carrier)
            for call in cm.tool_calls or []:
                tool_names[call.id] = call.name
            previous = out[-1] if out else None
            if isinstance(previous, ModelResponse):
                out.pop()
                response = _merge(previous, response)
            out.append(response)
            continue
        parts.extend(_to_request_parts(cm, carrier, tool_names))
        if carrier is not None and isinstance(carrier["message"], ModelRequest):
            source = carrier["message"]
    flush()
    return out


def _merge(first: ModelResponse, second: ModelResponse) -> ModelResponse:
    return dataclasses.replace(second, parts=[*first.parts, *second.parts])


def _unchanged(cm: ChatMessage, carrier: Mapping[str, Any]) -> bool:
    return bool(cm.content == carrier["content"] and cm.tool_calls == carrier["tool_calls"])


def _to_response(cm: ChatMessage, carrier: Mapping[str, Any] | None) -> ModelResponse:
    calls = [ToolCallPart(tool_name=c.name, args=dict(c.arguments), tool_call_id=c.id)
             for c in cm.tool_calls or []]
    if carrier is not None and isinstance(carrier["message"], ModelResponse):
        original: ModelResponse = carrier["message"]
        if _unchanged(cm, carrier):
            return original
        # Cut or edited: its text becomes one TextPart; parts ctxstack does not model stay.
        kept = [p for p in original.parts
                if getattr(p, "part_kind", "") not in ("text", "thinking")
                and not (getattr(p, "part_kind", "").endswith("-call")
                         and not getattr(p, "part_kind", "").startswith("builtin"))]
        text = [TextPart(content=cm.text)] if cm.text else []
        return dataclasses.replace(original, parts=[*text, *kept, *calls])
    text = [TextPart(content=cm.text)] if cm.text else []
    return ModelResponse(parts=[*text, *calls])


def _to_request_parts(
    cm: ChatMessage, carrier: Mapping[str, Any] | None, tool_names: Mapping[str, str]
) -> list[Any]:
    if carrier is not None and isinstance(carrier["message"], ModelRequest):
        original: list[Any] = carrier["parts"]
        if _unchanged(cm, carrier):
            return original
        return [_with_content(p, cm) if request_part_message(p) is not None else p
                for p in original]
    match cm.role:
        case "system":
            if cm.kind == "summary" and _SYSTEM_METADATA:
                return [SystemPromptPart(content=cm.text, metadata={SUMMARY_MARK: "summary"})]
            return [SystemPromptPart(content=cm.text)]
        case "user":
            return [UserPromptPart(content=_to_user_content(cm.content))]
        case "tool":
            assert cm.tool_call_id is not None  # ChatMessage guarantees it
            return [ToolReturnPart(tool_name=tool_names.get(cm.tool_call_id, cm.name or "tool"),
                                   content=cm.text, tool_call_id=cm.tool_call_id)]
    raise InputError(f"cannot place a {cm.role!r} message in a ModelRequest")


def _with_content(part: Any, cm: ChatMessage) -> Any:
    """The part with the guard's new content (a cut oversized message)."""
    if getattr(part, "part_kind", "") == "user-prompt":
        return dataclasses.replace(part, content=_to_user_content(cm.content))
    return dataclasses.replace(part, content=cm.text)


def _to_user_content(content: str | list[ContentPart] | None) -> str | list[Any]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    items: list[Any] = []
    for part in content:
        if isinstance(part, CtxTextPart):
            items.append(part.text)
        elif isinstance(part, RefusalPart):
            items.append(part.refusal)
        elif isinstance(part, AudioPart):
            audio = part.input_audio
            items.append(BinaryContent(data=base64.b64decode(audio.data),
                                       media_type=_AUDIO_MEDIA.get(audio.format,
                                                                   f"audio/{audio.format}")))
        elif isinstance(part, FilePart):
            items.append(_file_item(part))
        elif part.image_url.url.startswith("data:"):
            items.append(BinaryContent.from_data_uri(part.image_url.url))
        else:
            items.append(ImageUrl(url=part.image_url.url))
    return items


_AUDIO_MEDIA = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _audio_format(media_type: str) -> str:
    """The chat-completions audio ``format`` of a media type (``audio/mpeg`` → ``mp3``)."""
    for fmt, media in _AUDIO_MEDIA.items():
        if media == media_type:
            return fmt
    sub = media_type.rpartition("/")[2]
    return {"x-wav": "wav", "wave": "wav", "mp3": "mp3"}.get(sub, sub)


def _file_item(part: FilePart) -> Any:
    file = part.file
    if file.file_data is not None:
        if file.file_data.startswith("data:"):
            return BinaryContent.from_data_uri(file.file_data)
        return BinaryContent(data=base64.b64decode(file.file_data),
                             media_type="application/pdf")
    if file.file_url is not None:
        return DocumentUrl(url=file.file_url)
    raise InputError(f"file part {file.file_id!r}: a file uploaded by id has no pydantic-ai "
                     "form ctxstack can build; send the document as BinaryContent")
