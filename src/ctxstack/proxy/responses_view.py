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
from ctxstack.proxy.unit_memo import (
    HashKey,
    Hit,
    Remembered,
    UnitMemo,
    carried_hashes,
    equal_run,
)

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


Side = Literal["system", "user", "assistant", "tool", "other"]


def side(item: Mapping[str, Any]) -> Side:
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
    """The units of ``instructions`` + ``items`` and their chat views (see module doc).

    ``previous``: the conversation of an earlier request whose first ``same`` items are
    equal to these, with the same instructions (:class:`~ctxstack.proxy.unit_memo.
    UnitMemo`): its units are reused — the same objects, chat views included — up to the
    last one that cannot change (closed before the common items end, and whose view
    does not depend on items after it: a tool output whose call came earlier, a model
    turn without a hosted call that an output could answer later); the rest is read
    afresh. The result is the one a full reading makes."""

    conversation: WireConversation
    """The units' chat views, the instructions' first (what the fitter fits)."""

    def __init__(self, items: Sequence[dict[str, Any]], instructions: object,
                 previous: ResponsesConversation | None = None, same: int = 0) -> None:
        self.items = list(items)
        reused = previous.reusable(same) if previous is not None and same > 0 else 0
        self._sides: list[Side]
        if reused:
            assert previous is not None
            start = previous.units[reused - 1].items[-1] + 1
            self._sides = previous._sides[:start] + [side(it) for it in self.items[start:]]
        else:
            start = 0
            self._sides = [side(it) for it in self.items]
        # The call ids a unit's view depends on, over every item (from ``previous``'s when
        # these items only add to its items).
        self._answered: set[str] = set()
        self._first_call: dict[str, int] = {}
        self._functions: set[str] = set()
        if previous is not None and reused and same == len(previous.items):
            self._answered = set(previous._answered)
            self._first_call = dict(previous._first_call)
            self._functions = set(previous._functions)
            self._collect(same)
        else:
            self._collect(0)
        if not self._read(start, previous.units[:reused] if previous else []):
            self._read(0, [])  # pragma: no cover - see _read
        chat: list[dict[str, Any]] = []
        if isinstance(instructions, str) and instructions:
            chat.append({"role": "system", "content": instructions, UNIT_KEY: INSTRUCTIONS})
        elif isinstance(instructions, list) and instructions:
            chat.append({"role": "system", "content": _text_of(instructions),
                         UNIT_KEY: INSTRUCTIONS})
        answered = self._answered
        called = self._functions | (self._first_call.keys() & answered)
        items = self.items
        if self._reused:  # their views, as the earlier conversation lists them
            assert previous is not None
            before = len(previous.conversation.messages) - len(previous.units)
            chat.extend(previous.conversation.messages[before:before + self._reused])
        for k in range(self._reused, len(self.units)):
            unit = self.units[k]
            unit.chat = self._single(unit, k, items) or self._chat(unit, k, answered, called)
            chat.append(unit.chat)
        self.conversation = WireConversation(chat)

    def _collect(self, start: int) -> None:
        """Add the call ids of the items from ``start`` on: outputs (answered), calls
        (where each first appears), function / custom tool calls (always called; any
        other call is called only when answered)."""
        items, sides = self.items, self._sides
        answered, first, functions = self._answered, self._first_call, self._functions
        for i in range(start, len(items)):
            where = sides[i]
            if where != "tool" and where != "assistant":
                continue
            call_id = items[i].get("call_id")
            if call_id is None:
                continue
            if where == "tool":
                answered.add(str(call_id))
                continue
            first.setdefault(str(call_id), i)
            if item_kind(items[i]) in CALL_OUTPUTS:
                functions.add(str(call_id))

    def _read(self, start: int, reused: list[WireUnit]) -> bool:
        """Cut the items from ``start`` on into units after the ``reused`` ones; False if
        an item would join a reused unit (it cannot: ``start`` opens a unit in the
        conversation they came from, and the items before it are the same)."""
        self.units = list(reused)
        self._reused = len(reused)
        self._stable_until = -1
        sides = self._sides
        leading = not reused or reused[-1].kind == "system"
        run: WireUnit | None = None
        waiting: list[int] = []  # unknown items before the first unit
        for i in range(start, len(sides)):
            where = sides[i]
            if where == "other":
                if len(self.units) > self._reused:
                    self.units[-1].items.append(i)
                elif self.units:
                    return False
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
                item = self.items[i]
                if item.get("call_id") is not None and item_kind(item) not in CALL_OUTPUTS:
                    self._unstable(len(self.units) - 1)  # a hosted call: answered later?
                continue
            run = None
            kind: UnitKind = "system" if where == "system" and leading else (
                "user" if where == "system" else where)
            if where != "system":
                leading = False
            if where == "tool" and self._first_call.get(
                    str(self.items[i].get("call_id")), i) >= i:
                self._unstable(len(self.units))  # its call is not before it
            self.units.append(WireUnit(kind, [*waiting, i], main=i))
            waiting = []
        if waiting:  # only unknown items: one user unit of them
            self.units.append(WireUnit("user", waiting))
        if self._stable_until < 0:
            self._stable_until = len(self.units)
        return True

    def _unstable(self, k: int) -> None:
        """Unit ``k``'s view may change when items are added after it (see the class doc)."""
        if self._stable_until < 0 or k < self._stable_until:
            self._stable_until = k

    @property
    def reused_units(self) -> int:
        """How many leading units came from the earlier conversation."""
        return self._reused

    def reusable(self, same: int) -> int:
        """How many leading units a conversation whose first ``same`` items are these may
        reuse: those closed before item ``same - 1`` (the unit holding it may still grow)
        and before the first unit whose view may change."""
        units = self.units
        k = min(self._stable_until, len(units))
        while k > 0 and units[k - 1].items[-1] >= same - 1:
            k -= 1
        return k

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
                 counter: TokenCounter, memo: UnitMemo[ResponsesConversation] | None = None,
                 owner: str = "", size: int = 0) -> int:
    """What the proxy counts for a Responses request: its units' chat views (the
    instructions included) plus its tool definitions (``tools_tokens``). ``memo``: read
    ``items`` reusing ``owner``'s earlier conversations (:func:`remembered`; ``size``:
    what the memo bounds)."""
    conv = (ResponsesConversation(items, instructions) if memo is None
            else remembered(memo, owner, list(items), instructions, size)[0])
    return conv.conversation.tokens(counter) + tools_tokens


def remembered(memo: UnitMemo[ResponsesConversation], owner: str,
               items: list[dict[str, Any]], instructions: object, size: int,
               hit: Hit | None = None) -> tuple[ResponsesConversation, dict[HashKey, str]]:
    """The conversation of ``items``, reusing the units of ``owner``'s earlier one sharing
    the most leading items (``memo``; ``size``: the request's bytes, what the memo
    bounds) and the token counts of the units unchanged since; and the prefix hashes
    known over its chat messages — the dict the fitter adds its hashes to, kept for the
    next request (see :mod:`ctxstack.proxy.unit_memo`). ``hit``: what ``memo.find``
    answered for these items, when already asked."""
    found, same = hit if hit is not None else memo.find(owner, instructions, items)
    conv = ResponsesConversation(items, instructions, found.units if found else None, same)
    shared = 0
    if found is not None and conv.reused_units:
        prompt = len(conv.conversation) - len(conv.units)  # the instructions' message
        earlier = found.units.conversation
        shared = equal_run(earlier.messages, conv.conversation.messages,
                           prompt + conv.reused_units)
        if earlier.counted_by is not None and len(earlier.counts) == len(earlier.messages):
            conv.conversation.known_counts = (earlier.counted_by, earlier.counts[:shared])
    hashes = carried_hashes(found, shared)
    memo.remember(owner, Remembered(instructions, items, conv, hashes, size),
                  replaces=found)
    conv.conversation.hashes = hashes
    return conv, hashes


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
