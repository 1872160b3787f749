"""A Responses conversation as the fitter sees it, and the fitted view rendered back.

The proxy fits every wire with one machinery (:mod:`ctxstack.proxy.fitting`: the budget
check, checkpoints, the guard), which works on chat messages. So a Responses
conversation — ``instructions`` plus its input items — is read as **units**, each one
chat message the fitter can count, mask, summarise or drop:

* ``instructions`` → a leading system message: the prompt, never compacted, and never
  rendered into ``input`` (the body's own ``instructions`` goes out byte-identical);
* leading ``system`` / ``developer`` messages → system messages (the prompt as well);
* a user message → a user message; a function / custom tool call's output → a tool
  message answering its call (so the guard keeps or drops the two together);
* a **turn of the model** — a maximal run of assistant-side items (``reasoning``,
  provider ``compaction``, assistant ``message``, ``function_call``,
  ``custom_tool_call``, hosted ``*_call`` items): the whole output of one upstream
  response — → one assistant message whose tool calls are the turn's calls and whose
  text counts everything else (opaque items as their JSON). A turn is kept entirely,
  contiguous and in order, byte for byte, or dropped entirely: never summarised across,
  never edited (a kept turn holding a ``reasoning`` item is never cut);
* an item of a type this proxy does not know (``additional_tools``, ``item_reference``,
  anything new) travels with the unit before it (the first unit when it leads), so it
  passes through wherever that unit is kept.

Rendering back (:meth:`ResponsesConversation.render`): a unit the fitter left alone
forwards the client's own items (the very dicts: same keys, same order); a tool output
the guard cleared or cut forwards its item with ``output`` replaced; a user message it
cut forwards its item with the text cut (images and files as sent); a summary becomes
one ``developer`` message in ``input`` (not in ``instructions``, whose cached prefix
survives).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxstack import TokenCounter
from ctxstack.proxy.request import WireConversation
from ctxstack.proxy.responses_request import CALL_OUTPUTS

UNIT_KEY = "_ctxstack_unit"
"""The unit index each chat view carries (the chat reader ignores unknown keys; a cut
copy keeps it). -1 marks the ``instructions`` message."""
INSTRUCTIONS = -1
UnitKind = Literal["system", "user", "assistant", "tool"]
_ASSISTANT_TYPES = frozenset({"reasoning", "compaction", "function_call", "custom_tool_call",
                              "mcp_list_tools", "mcp_approval_request"})


def item_kind(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else ""


def side(item: Mapping[str, Any]) -> Literal["system", "user", "assistant", "tool", "other"]:
    """Which side of the conversation produced ``item`` (``other``: not known)."""
    kind = item.get("type")  # item_kind, inline: this runs for every item of every request
    if kind is None and "role" in item:
        kind = "message"
    elif not isinstance(kind, str):
        kind = ""
    if kind == "message":
        role = item.get("role")
        return ("assistant" if role == "assistant" else "user" if role == "user"
                else "system")
    if kind in _ASSISTANT_TYPES or (kind.endswith("_call") and kind != "item_reference"):
        return "assistant"
    if kind.endswith("_call_output"):
        return "tool"
    return "other"


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out: list[str] = []
        for part in content:
            # dict first: a decoded JSON part, without the ABC check (every request)
            mapping = isinstance(part, (dict, Mapping))
            if mapping and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif mapping and isinstance(part.get("refusal"), str):
                out.append(part["refusal"])
            else:
                out.append(_json(part))
        return "\n".join(out)
    return "" if content is None else _json(content)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _user_parts(content: list[Any]) -> list[dict[str, Any]]:
    """Input parts as the chat parts the guard counts: text as text, an image by its URL
    (counted as an image), a file's data as a file part (counted by size), others as
    their JSON text."""
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            detail = part.get("detail")
            image = {"url": part["image_url"], **(
                {"detail": detail} if detail in ("auto", "low", "high") else {})}
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and isinstance(part.get("file_data"), str):
            parts.append({"type": "file", "file": {
                "file_data": part["file_data"],
                **({"filename": part["filename"]} if isinstance(part.get("filename"), str)
                   else {})}})
        else:
            parts.append({"type": "text", "text": _json(part)})
    return parts


@dataclass(slots=True)
class WireUnit:
    kind: UnitKind
    items: list[int] = field(default_factory=list)
    """Indices of its items in the conversation, in order."""
    main: int = -1
    """The item a cut rewrites (a user message, a tool output), -1 for a model turn."""
    chat: dict[str, Any] = field(default_factory=dict)


class ResponsesConversation:
    """The units of ``instructions`` + ``items`` and their chat views (see module doc)."""

    def __init__(self, items: Sequence[dict[str, Any]], instructions: object) -> None:
        self.items = list(items)
        self.units: list[WireUnit] = []
        # Each item's side, once: this runs on every request over the whole input.
        self._sides = sides = [side(it) for it in self.items]
        answered = {str(it.get("call_id")) for it, where in zip(self.items, sides, strict=True)
                    if where == "tool" and it.get("call_id") is not None}
        called = {str(it.get("call_id")) for it, where in zip(self.items, sides, strict=True)
                  if where == "assistant" and it.get("call_id") is not None
                  and (item_kind(it) in CALL_OUTPUTS or str(it.get("call_id")) in answered)}
        leading = True
        run: WireUnit | None = None
        waiting: list[int] = []  # unknown items before the first unit
        for i, where in enumerate(sides):
            if where == "other":
                if self.units:
                    self.units[-1].items.append(i)
                else:
                    waiting.append(i)
                continue
            if where == "assistant":
                leading = False
                if run is None:
                    run = WireUnit("assistant", [*waiting])
                    waiting = []
                    self.units.append(run)
                run.items.append(i)
                continue
            run = None
            kind: UnitKind = "system" if where == "system" and leading else (
                "user" if where == "system" else where)
            if where != "system":
                leading = False
            self.units.append(WireUnit(kind, [*waiting, i], main=i))
            waiting = []
        if waiting:  # only unknown items: one user unit of them
            self.units.append(WireUnit("user", waiting))
        chat: list[dict[str, Any]] = []
        if isinstance(instructions, str) and instructions:
            chat.append({"role": "system", "content": instructions, UNIT_KEY: INSTRUCTIONS})
        elif isinstance(instructions, list) and instructions:
            chat.append({"role": "system", "content": _text_of(instructions),
                         UNIT_KEY: INSTRUCTIONS})
        items = self.items
        for k, unit in enumerate(self.units):
            unit.chat = self._single(unit, k, items) or self._chat(unit, k, answered, called)
            chat.append(unit.chat)
        self.conversation = WireConversation(chat)

    @staticmethod
    def _single(unit: WireUnit, k: int, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The chat view of a unit of one text message — most units of a long input —
        as :meth:`_chat` makes it, without its general case; None for any other unit."""
        if len(unit.items) != 1:
            return None
        item = items[unit.items[0]]
        content = item.get("content")
        if unit.kind == "user" or unit.kind == "system":
            if unit.main == unit.items[0] and isinstance(content, str):
                return {"role": unit.kind, "content": content.strip("\n"), UNIT_KEY: k}
            return None
        kind = item.get("type")
        if unit.kind == "assistant" and (kind == "message" or (kind is None and "role" in item)):
            return {"role": "assistant", "content": _text_of(content) or None, UNIT_KEY: k}
        return None

    def _extras(self, unit: WireUnit) -> list[str]:
        if len(unit.items) == 1 and self._sides[unit.items[0]] != "other":
            return []  # the common case, without a scan
        return [_json(self.items[j]) for j in unit.items if j != unit.main
                and self._sides[j] == "other"]

    def _chat(self, unit: WireUnit, k: int, answered: set[str], called: set[str],
              ) -> dict[str, Any]:
        extras = [] if len(unit.items) == 1 and unit.items[0] == unit.main else (
            self._extras(unit))
        if unit.kind == "assistant":
            texts: list[str] = []
            calls: list[dict[str, Any]] = []
            for j in unit.items:
                item = self.items[j]
                kind = item_kind(item)
                call_id = item.get("call_id")
                if kind == "message":
                    texts.append(_text_of(item.get("content")))
                elif kind == "function_call":
                    calls.append({"id": call_id, "type": "function", "function": {
                        "name": item.get("name"), "arguments": item.get("arguments")}})
                elif kind == "custom_tool_call":
                    calls.append({"id": call_id, "type": "custom", "custom": {
                        "name": item.get("name"), "input": item.get("input")}})
                elif isinstance(call_id, str) and call_id in answered:
                    calls.append({"id": call_id, "type": "function", "function": {
                        "name": kind, "arguments": _json(item)}})
                else:
                    texts.append(_json(item))
            out: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                out["tool_calls"] = calls
            out[UNIT_KEY] = k
            return out
        item = self.items[unit.main] if unit.main >= 0 else {}
        if unit.kind == "tool":
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output)
            if str(item.get("call_id")) in called:
                return {"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": "\n".join([text, *extras]), UNIT_KEY: k}
            return {"role": "user", "content": "\n".join([_json(item), *extras]), UNIT_KEY: k}
        role = "system" if unit.kind == "system" else "user"
        content = item.get("content") if unit.main >= 0 else None
        if isinstance(content, list):
            parts = _user_parts(content)
            parts += [{"type": "text", "text": e} for e in extras]
            return {"role": role, "content": parts, UNIT_KEY: k}
        text = "\n".join([content if isinstance(content, str) else "", *extras]).strip("\n")
        return {"role": role, "content": text, UNIT_KEY: k}

    def render(self, fitted: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The input items for the fitter's chat messages (see the module doc)."""
        out: list[dict[str, Any]] = []
        for message in fitted:
            k = message.get(UNIT_KEY)
            if k == INSTRUCTIONS:
                continue
            if not isinstance(k, int):
                out.append(_generated(message))
                continue
            unit = self.units[k]
            # Equal counts as untouched too: a view the fitter kept from an earlier
            # request of this conversation is the same dict, not the same object.
            if (message is unit.chat or unit.kind == "assistant" or unit.main < 0
                    or message == unit.chat):
                out.extend(self.items[j] for j in unit.items)
                continue
            for j in unit.items:
                out.append(self._cut(unit, message) if j == unit.main else self.items[j])
        return out

    def _cut(self, unit: WireUnit, message: Mapping[str, Any]) -> dict[str, Any]:
        item = dict(self.items[unit.main])
        text = _text_of(_chat_text_parts(message.get("content")))
        if unit.kind == "tool":
            item["output"] = text
            return item
        original = item.get("content")
        if isinstance(original, list):
            kept = [p for p in original if isinstance(p, Mapping)
                    and p.get("type") in ("input_image", "input_file")]
            item["content"] = [{"type": "input_text", "text": text}, *kept]
        else:
            item["content"] = text
        return item


def _chat_text_parts(content: object) -> object:
    """Chat content with only its text (a cut message's images/files go as the client
    sent them)."""
    if isinstance(content, list):
        return [p for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
    return content


def _generated(message: Mapping[str, Any]) -> dict[str, Any]:
    """An item for a message the guard made (a summary)."""
    role = message.get("role")
    role = "developer" if role == "system" else role if role in ("user", "assistant") \
        else "developer"
    return {"type": "message", "role": role, "content": _text_of(message.get("content"))}


def count_tokens(items: Sequence[dict[str, Any]], instructions: object, tools_tokens: int,
                 counter: TokenCounter) -> int:
    """What the proxy counts for a Responses request: its units' chat views (the
    instructions included) plus its tool definitions (``tools_tokens``)."""
    return ResponsesConversation(items, instructions).conversation.tokens(counter) + tools_tokens


def schema_tokens(body: Mapping[str, Any], counter: TokenCounter) -> int:
    """What the request's schemas cost in the prompt: ``tools`` and a ``text.format``
    JSON schema."""
    schemas: list[object] = [body.get("tools")]
    text = body.get("text")
    if isinstance(text, Mapping):
        fmt = text.get("format")
        if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
            schemas.append(fmt.get("schema"))
    return sum(counter.count_text(_json(s)) for s in schemas if s)


__all__ = ["CALL_OUTPUTS", "ResponsesConversation", "count_tokens", "schema_tokens", "side"]
