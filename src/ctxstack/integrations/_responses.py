"""Responses-API input items ↔ :class:`~ctxstack.ChatMessage`, for the OpenAI Agents SDK.

Pure functions over plain dicts (the SDK's ``TResponseInputItem`` are TypedDicts), so this
module imports no framework and can be tested and benchmarked on its own.

**Grouping.** The guard keeps an assistant message with ``tool_calls`` and its tool
results together. A Responses-API turn is several items — ``reasoning``, an assistant
``message``, one ``function_call`` per call — so every run of assistant-side items
becomes ONE assistant :class:`ChatMessage` (its text, and a :class:`ToolCall` per item
with a ``call_id``), and every ``*_output`` item with a ``call_id`` becomes a ``tool``
message. User, system and developer messages map one to one (developer → system).

**Reasoning items** ride in their assistant group: kept, dropped or summarised with it,
never left behind alone. They are not counted against the budget (their encrypted content
is opaque and providers do not bill earlier turns' reasoning as prompt text).
Items the converter has no model for (hosted tool calls, ``item_reference``,
``compaction``, MCP items) also join the group and are counted by their JSON text.

**Audio and files.** An ``input_audio`` part becomes an
:class:`~ctxstack.messages.AudioPart`
and an ``input_file`` part (``file_data``, ``file_id`` or ``file_url``) a
:class:`~ctxstack.messages.FilePart`, so they are counted by size and never cut; a malformed one
(no data, no reference) raises :class:`~ctxstack.MessageError` naming it.

**Lossless back.** Each message records the keys of its items in ``metadata["items"]``
(their index, or a stored sequence number). :func:`messages_to_items` returns the original
items, untouched, for every message whose content and calls the guard did not change; a
changed message (cut head+tail) is rebuilt around the new text, dropping its reasoning
items and the server ``id`` of its calls (a call rebuilt without its reasoning must not
claim the original's identity); a new message (the summary) becomes a ``system`` message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack import ChatMessage, ContentPart, ImagePart, MessageError, TextPart, ToolCall
from ctxstack.messages import AudioPart, FilePart, ImageURL, RefusalPart
from ctxstack.messages._model import parse_arguments, parse_part, part_text

Item = dict[str, Any]
ITEMS_KEY = "items"
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def as_item(item: object) -> Item:
    """A plain dict for an input item (pydantic objects are dumped)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_unset=True))
    if isinstance(item, Mapping):
        return dict(item)
    raise MessageError(f"input item: expected a dict, got {type(item).__name__}")


def _kind(item: Item) -> str:
    itype = item.get("type")
    if itype in (None, "message") and "role" in item:
        return "assistant" if item["role"] == "assistant" else "message"
    if isinstance(itype, str) and "call_id" in item:
        return "output" if itype.endswith("_output") else "call"
    if itype == "reasoning":
        return "reasoning"
    return "other"


_FILE_KEYS = ("file_data", "file_id", "filename", "file_url")


def _parts(content: object) -> str | list[ContentPart] | None:
    """Message content → ChatMessage content (text, images, audio and files; image
    references by id as their JSON text)."""
    if content is None or isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for part in content if isinstance(content, list) else []:
        p = as_item(part)
        ptype = p.get("type")
        if ptype in ("input_text", "output_text", "text"):
            parts.append(TextPart(text=str(p.get("text", ""))))
        elif ptype == "refusal":
            parts.append(RefusalPart(refusal=str(p.get("refusal", ""))))
        elif ptype == "input_audio":
            parts.append(parse_part({"type": "input_audio", "input_audio": p.get("input_audio")},
                                    "input_audio"))
        elif ptype == "input_file":
            parts.append(parse_part({"type": "file", "file": {
                k: p[k] for k in _FILE_KEYS if p.get(k) is not None}}, "input_file"))
        elif ptype == "input_image" and isinstance(p.get("image_url"), str):
            detail = p.get("detail")
            parts.append(ImagePart(image_url=ImageURL(
                url=p["image_url"], detail=detail if detail in ("auto", "low", "high") else None
            )))
        else:  # image references by id: counted by their description
            parts.append(TextPart(text=json.dumps(p, ensure_ascii=False, default=str)))
    if all(isinstance(p, TextPart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return parts



def _text(content: object) -> str:
    converted = _parts(content)
    if isinstance(converted, list):
        return "\n".join(part_text(p) for p in converted
                         if isinstance(p, TextPart | RefusalPart))
    return converted or ""


def _tool_call(item: Item) -> ToolCall:
    raw = item.get("arguments", item.get("input", item.get("action")))
    try:
        arguments = parse_arguments(raw) if isinstance(raw, str | Mapping) or raw is None else {}
    except MessageError:
        arguments = {"arguments": raw}
    if not arguments and raw not in (None, "", {}):
        arguments = {"input": raw}
    name = item.get("name") or item.get("type") or "call"
    return ToolCall(id=str(item["call_id"]), name=str(name), arguments=arguments)


def _output_text(output: object) -> str | list[ContentPart] | None:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _parts(output)
    return json.dumps(output, ensure_ascii=False, default=str)


def items_to_messages(
    items: Sequence[object], keys: Sequence[object] | None = None, *, start: int = 0
) -> list[ChatMessage]:
    """Convert input items to guardable messages; ``keys[i]`` names item ``i`` (default
    its index plus ``start``) in ``metadata["items"]``."""
    out: list[ChatMessage] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    refs: list[object] = []

    def flush() -> None:
        if refs:
            out.append(ChatMessage(
                role="assistant", content="\n".join(texts) if texts else None,
                tool_calls=list(calls) or None, metadata={ITEMS_KEY: list(refs)},
            ))
            texts.clear()
            calls.clear()
            refs.clear()

    for i, raw in enumerate(items):
        item = as_item(raw)
        key = keys[i] if keys is not None else i + start
        kind = _kind(item)
        if kind == "message":
            flush()
            role = _ROLES.get(str(item["role"]), "user")
            out.append(ChatMessage(role=role, content=_parts(item.get("content")),
                                   metadata={ITEMS_KEY: [key]}))
        elif kind == "output":
            flush()
            out.append(ChatMessage(role="tool", tool_call_id=str(item["call_id"]),
                                   content=_output_text(item.get("output")),
                                   metadata={ITEMS_KEY: [key]}))
        else:
            refs.append(key)
            if kind == "assistant":
                texts.append(_text(item.get("content")))
            elif kind == "call":
                calls.append(_tool_call(item))
            elif kind == "other":
                texts.append(json.dumps(item, ensure_ascii=False, default=str))
    flush()
    return out


class PrefixCache:
    """Conversions of the previous call, reused while the input only grows.

    Within a run the SDK hands the filter a new list holding the *same* item objects plus
    the new ones, so the messages converted from an unchanged prefix are reused — with
    their cached token counts — and only the tail is converted: the per-call cost stays
    near the guard's own under-budget cost instead of growing with the history.
    """

    def __init__(self) -> None:
        self._items: list[Item] = []
        self._messages: list[ChatMessage] = []

    def convert(self, items: list[Item]) -> list[ChatMessage]:
        previous = self._items
        same = 0
        for old, new in zip(previous, items, strict=False):
            if old is not new:
                break
            same += 1
        reused: list[ChatMessage] = []
        for message in self._messages:
            refs = message.metadata[ITEMS_KEY]
            if refs[-1] >= same:
                break
            reused.append(message)
        if reused and reused[-1].role == "assistant" and (
            reused[-1].metadata[ITEMS_KEY][-1] == same - 1
        ):
            reused.pop()  # an assistant group ending at the prefix may continue past it
        start = reused[-1].metadata[ITEMS_KEY][-1] + 1 if reused else 0
        messages = reused + items_to_messages(items[start:], start=start)
        self._items, self._messages = list(items), messages
        return list(messages)


def message_to_items(message: ChatMessage) -> list[Item]:
    """A message the guard created (the summary) or a user/assistant message as items."""
    if message.role == "tool":
        return [{"type": "function_call_output", "call_id": message.tool_call_id,
                 "output": message.text}]
    role = "system" if message.role == "system" else message.role
    items: list[Item] = []
    if message.content is not None or not message.tool_calls:
        items.append({"type": "message", "role": role, "content": _content_out(message)})
    for call in message.tool_calls or []:
        items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                      "arguments": call.arguments_json})
    return items


def _content_out(message: ChatMessage) -> str | list[Item]:
    if not isinstance(message.content, list):
        return message.content or ""
    kind = "output_text" if message.role == "assistant" else "input_text"
    out: list[Item] = []
    for p in message.content:
        if isinstance(p, TextPart):
            out.append({"type": kind, "text": p.text})
        elif isinstance(p, RefusalPart):
            out.append({"type": "refusal", "refusal": p.refusal})
        elif isinstance(p, AudioPart):
            out.append({"type": "input_audio",
                        "input_audio": p.input_audio.model_dump(exclude_none=True)})
        elif isinstance(p, FilePart):
            out.append({"type": "input_file", **p.file.model_dump(exclude_none=True)})
        else:
            out.append({"type": "input_image", "image_url": p.image_url.url,
                        "detail": p.image_url.detail or "auto"})
    return out


def _rebuilt(message: ChatMessage, originals: list[Item]) -> list[Item]:
    """A changed (cut) message around its original items: new text, same calls."""
    if message.role == "tool" and len(originals) == 1:
        original = originals[0]
        if isinstance(original.get("output"), str):
            return [{**original, "output": message.text}]
        return [original]
    out: list[Item] = []
    placed = False
    for item in originals:
        kind = _kind(item)
        if kind in ("assistant", "message", "reasoning"):
            if not placed and kind != "reasoning" and message.content is not None:
                out.extend(message_to_items(message.replace(tool_calls=None)))
                placed = True
            continue
        out.append({k: v for k, v in item.items() if k != "id"} if kind == "call" else item)
    if not placed and message.text:
        out[:0] = message_to_items(message.replace(tool_calls=None))
    return out


def messages_to_items(
    result: Sequence[ChatMessage],
    originals: Mapping[object, Item],
    converted: Mapping[tuple[object, ...], ChatMessage],
) -> list[Item]:
    """Guarded messages back to items.

    Args:
        result: what the guard returned.
        originals: key → original item (the keys used by :func:`items_to_messages`).
        converted: tuple of a message's keys → the message as converted, to tell an
            untouched message from one the guard changed.
    """
    out: list[Item] = []
    for message in result:
        refs = message.metadata.get(ITEMS_KEY)
        if not isinstance(refs, list) or not refs:
            out.extend(message_to_items(message))
            continue
        before = converted.get(tuple(refs))
        items = [originals[r] for r in refs if r in originals]
        if before is not None and before.content == message.content and (
            before.tool_calls == message.tool_calls
        ):
            out.extend(items)
        else:
            out.extend(_rebuilt(message, items))
    return out
