"""An Anthropic conversation as the units the shared fitter works on, and back.

The fitter (:mod:`ctxstack.proxy.fitting`) fits a :class:`~ctxstack.proxy.request.
WireConversation`: a list of message dicts in the Chat Completions shape, each seen by the
guard as a :class:`~ctxstack.ChatMessage`. :func:`to_units` cuts an Anthropic request into
such units, each standing for a run of the client's own blocks:

* the ``system`` prompt → one ``system`` unit (counted, never compacted, never rendered:
  the client's ``system`` is forwarded byte-identical);
* a user message → one ``tool`` unit per ``tool_result`` block (its content as the text
  the guard may clear), then one ``user`` unit for the other blocks, if any;
* an assistant message → one ``assistant`` unit: its text (``thinking`` text and the JSON
  of blocks the proxy does not know included, so they are counted) and its ``tool_use``
  blocks as tool calls — which makes the guard keep or drop a call with its results.

Each unit carries its index under :data:`UNIT_KEY` (the guard ignores the field), so
:func:`render` can tell, for every unit of the fitted list, whether it is the client's own
(the same dict: its blocks go out byte-identical), one the guard changed (a cleared tool
output, a cut text), or one the guard made (a summary: a user text block, never
``system``). A changed unit holding ``thinking``, ``redacted_thinking`` or an unknown block
is never edited: it is dropped whole, with the results of its calls.

:func:`render` then makes the list valid by Anthropic's rules, whatever the guard did:
consecutive same-role messages merged, ``tool_result`` blocks first in a user message,
the first message the user's, every ``tool_use`` answered in the next message and no
``tool_result`` without its ``tool_use`` (an unanswered call's turn is dropped, an orphan
result removed), no empty text block, at most :data:`MAX_CACHE_MARKERS` ``cache_control``
markers in all (the client's on ``system`` and ``tools`` kept; the oldest on messages
removed first). It only ever drops or merges, so what it returns counts no more than the
fitted list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxstack import TokenCounter
from ctxstack.proxy.request import WireConversation, guard_view
from ctxstack.proxy.unit_memo import (
    HashKey,
    Hit,
    Remembered,
    UnitMemo,
    carried_hashes,
    equal_run,
)

UNIT_KEY = "_anthropic_unit"
MAX_CACHE_MARKERS = 4
KNOWN_ASSISTANT = frozenset({"text", "tool_use"})
"""Assistant blocks a changed turn may be rebuilt from; any other type makes it opaque."""
KNOWN_USER = frozenset({"text", "image", "document", "tool_result"})


@dataclass(slots=True)
class BlockRun:
    """What one unit stands for: message ``msg``'s ``blocks`` (the client's dicts)."""

    kind: str  # "system", "user", "tool", "assistant"
    msg: int
    blocks: list[Any]
    opaque: bool = False
    call_ids: list[str] = field(default_factory=list)


@dataclass
class RequestUnits:
    """The units of one request: their Chat-shaped dicts and what each stands for."""

    dicts: list[dict[str, Any]]
    units: list[BlockRun]
    messages: list[dict[str, Any]]
    per_message: list[int]
    """How many units each client message became."""
    opaque: set[int] = field(default_factory=set)
    """The indices of the opaque units (holding a block the proxy may not edit)."""

    def conversation(self, counts: CountCache | None = None) -> WireConversation:
        return OpaqueAwareConversation(self.dicts, self.opaque, counts)

    def calls_before(self, message: int) -> set[str]:
        """The ids of the ``tool_use`` blocks of the client messages before ``message``
        (a new set)."""
        return {c for u in self.units[:self.unit_start(message)] for c in u.call_ids}

    def unit_start(self, message: int) -> int:
        """The index of the first unit of client message ``message`` (the units before
        it: the system prompt's, then each earlier message's)."""
        return len(self.dicts) - sum(self.per_message[message:])


class CountCache:
    """Token counts of assistant units with tool calls, remembered across requests.

    Clients resend the whole history on every request, and a unit with tool calls can only
    be counted through its guard view (a pydantic model: most of the cost of a request
    that is within budget). Its count depends only on its text and calls, so it is
    remembered under those (per counter), and the next request of the conversation pays a
    dictionary lookup. Bounded by the characters of the texts it holds (cleared beyond).
    """

    def __init__(self, max_chars: int = 16_000_000) -> None:
        self.max_chars = max_chars
        self._counts: dict[tuple[object, ...], int] = {}
        self._chars = 0

    def get(self, key: tuple[object, ...]) -> int | None:
        return self._counts.get(key)

    def put(self, key: tuple[object, ...], count: int, chars: int) -> None:
        if self._chars + chars > self.max_chars:
            self._counts.clear()
            self._chars = 0
        self._counts[key] = count
        self._chars += chars


class OpaqueAwareConversation(WireConversation):
    """A :class:`WireConversation` whose opaque units are never cut by the guard.

    A turn holding ``thinking`` (tens of thousands of characters with a large thinking
    budget) or a web search result may be longer than the cut size; cut, it could only be
    dropped whole — and within budget, or in the middle of a tool loop, that would lose
    what the client sent for nothing. So opaque units do not count as "too long to forward
    unchanged", and the guard's cut size is raised above the longest of them, as it is
    for the system prompt and the last user message: they are kept, summarised or
    dropped whole, never cut.
    """

    __slots__ = ("cache", "opaque")

    def __init__(self, messages: list[dict[str, Any]], opaque: set[int],
                 cache: CountCache | None = None) -> None:
        super().__init__(messages)
        self.opaque = opaque
        self.cache = cache

    def tokens(self, counter: TokenCounter) -> int:
        """As :meth:`WireConversation.tokens`, with the counts of assistant units with
        tool calls taken from the :class:`CountCache` when one is given."""
        overhead = getattr(counter, "message_overhead", None)
        if self.cache is None or not isinstance(overhead, int):
            return super().tokens(counter)
        counts: list[int] = []
        count_text = counter.count_text
        for i, m in enumerate(self.messages):
            content = m.get("content")
            calls = m.get("tool_calls")
            if isinstance(content, str) and not calls:
                counts.append(overhead + count_text(content))
                continue
            key: tuple[object, ...] | None = None
            chars = 0
            if isinstance(content, str) and isinstance(calls, list):
                key = (counter.cache_key, m.get("role"), content, *(
                    (c["id"], c["function"]["name"], c["function"]["arguments"])
                    for c in calls))
                chars = len(content) + sum(len(c["function"]["arguments"]) for c in calls)
            found = self.cache.get(key) if key is not None else None
            if found is None:
                found = counter.count_message(self.view(i))
                if key is not None:
                    self.cache.put(key, found, chars)
            counts.append(found)
        self.counts = counts
        return sum(counts)

    def longest_protected(self) -> int:
        longest = max((len(self.view(i).text) for i in self.opaque), default=0)
        return max(super().longest_protected(), longest)

    def longest_text(self, start: int = 0) -> int:
        if not self.opaque:
            return super().longest_text(start)
        rest = [self.messages[i] for i in range(start, len(self.messages))
                if i not in self.opaque]
        return WireConversation(rest).longest_text() if rest else 0


def to_units(system: object, messages: Sequence[Mapping[str, Any]],
             previous: RequestUnits | None = None, same: int = 0) -> RequestUnits:
    """Cut a validated request into units (see the module doc).

    ``previous``: the units of an earlier request whose first ``same`` messages are equal
    to these (and whose system prompt is this one's): their units are reused — the same
    dicts — and only the messages after them converted
    (:class:`~ctxstack.proxy.unit_memo.UnitMemo`). Units depend only on their own
    message and on how many units come before it, so the result is the one a full
    conversion makes.

    Runs on every request over what is new (without ``previous``: the whole history,
    thousands of messages), so it walks each message's blocks once, with a shortcut for
    string content; each unit dict ends with its :data:`UNIT_KEY`."""
    dicts: list[dict[str, Any]]
    units: list[BlockRun]
    per_message: list[int]
    opaque_units: set[int]
    start = same if previous is not None and same > 0 else 0
    if start:
        assert previous is not None
        shared = previous.unit_start(start)
        dicts = previous.dicts[:shared]
        units = previous.units[:shared]
        per_message = previous.per_message[:start]
        opaque_units = {i for i in previous.opaque if i < shared}
    else:
        dicts, units, per_message, opaque_units = [], [], [], set()
        text = system_text(system)
        if text:
            dicts.append({"role": "system", "content": text, UNIT_KEY: 0})
            units.append(BlockRun("system", -1, []))
    for i in range(start, len(messages)):
        m = messages[i]
        before = len(units)
        content = m.get("content")
        role = "assistant" if m.get("role") == "assistant" else "user"
        if isinstance(content, str):  # one text block: the same unit, cheaply
            dicts.append({"role": role, "content": content, UNIT_KEY: before})
            units.append(BlockRun(role, i, [{"type": "text", "text": content}], False, []))
            per_message.append(1)
            continue
        blocks: list[Any] = list(content or [])
        if role == "assistant" and len(blocks) == 1 and blocks[0].get("type") == "text" and (
                isinstance(blocks[0].get("text"), str)):  # one text block, as below, cheaply
            dicts.append({"role": "assistant", "content": blocks[0]["text"], UNIT_KEY: before})
            units.append(BlockRun("assistant", i, blocks, False, []))
            per_message.append(1)
            continue
        if role == "assistant":
            calls: list[Any] = []
            parts: list[str] = []
            opaque = False
            for b in blocks:
                kind = b.get("type")
                if kind == "tool_use":
                    calls.append(b)
                    continue
                if kind == "text":
                    found = b.get("text")
                    if isinstance(found, str):
                        parts.append(found)
                        continue
                elif kind not in KNOWN_ASSISTANT:
                    opaque = True
                parts.append(_block_text(b))
            d: dict[str, Any] = {"role": "assistant", "content": "\n".join(parts)}
            if calls:
                d["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(
                         c.get("input", {}), ensure_ascii=False)}} for c in calls]
            d[UNIT_KEY] = before
            dicts.append(d)
            if opaque:
                opaque_units.add(before)
            units.append(BlockRun("assistant", i, blocks, opaque=opaque,
                                  call_ids=[c["id"] for c in calls]))
        else:
            rest: list[Any] = []
            texts: list[str] = []
            all_text = True
            opaque = False
            for b in blocks:
                kind = b.get("type")
                if kind == "tool_result":
                    dicts.append({"role": "tool", "tool_call_id": b["tool_use_id"],
                                  "content": _result_view(b.get("content")),
                                  UNIT_KEY: len(units)})
                    units.append(BlockRun("tool", i, [b]))
                    continue
                rest.append(b)
                opaque = opaque or kind not in KNOWN_USER
                found = b.get("text") if kind == "text" else None
                if isinstance(found, str):
                    texts.append(found)
                else:
                    all_text = False
            if rest:
                if opaque:
                    opaque_units.add(len(units))
                view: object = "\n".join(texts) if all_text else [_user_part(b) for b in rest]
                dicts.append({"role": "user", "content": view, UNIT_KEY: len(units)})
                units.append(BlockRun("user", i, rest, opaque=opaque))
        per_message.append(len(units) - before)
    return RequestUnits(dicts, units, [m if isinstance(m, dict) else dict(m) for m in messages],
                        per_message, opaque_units)


def remembered_units(memo: UnitMemo[RequestUnits], owner: str, system: object,
                     messages: list[dict[str, Any]], size: int, hit: Hit | None = None,
                     ) -> tuple[RequestUnits, dict[HashKey, str]]:
    """:func:`to_units` reusing the units of ``owner``'s earlier request sharing the most
    leading messages (``memo``; ``size``: the request's bytes, what the memo bounds), and
    the prefix hashes known over them — the dict the fitter adds its hashes to, kept for
    the next request (see :mod:`ctxstack.proxy.unit_memo`). ``hit``: what ``memo.find``
    answered for these messages, when already asked."""
    found, same = hit if hit is not None else memo.find(owner, system, messages)
    units = to_units(system, messages, found.units if found else None, same)
    shared = 0
    if found is not None:
        reused = found.units.unit_start(same) if same else 0
        shared = equal_run(found.units.dicts, units.dicts, reused) if reused else 0
    hashes = carried_hashes(found, shared)
    memo.remember(owner, Remembered(system, messages, units, hashes, size), replaces=found)
    return units, hashes


def system_text(system: object) -> str:
    """The text the ``system`` field puts in the prompt (blocks' text, else their JSON)."""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(_block_text(b) for b in system)
    return ""


def count_request(body: Mapping[str, Any], counter: TokenCounter) -> int:
    """Input tokens of a Messages body by ``counter``, as the proxy counts when it fits
    one: ``system``, messages and ``tools`` (what a test checks a forwarded request by)."""
    units = to_units(body.get("system"), list(body.get("messages") or []))
    views = [guard_view(d, i) for i, d in enumerate(units.dicts)]
    tools = body.get("tools")
    schema = (counter.count_text(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
              if tools else 0)
    return counter.count_messages(views) + schema


def _block_text(block: object) -> str:
    if isinstance(block, Mapping):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
        if kind == "thinking" and isinstance(block.get("thinking"), str):
            return str(block["thinking"])
    return json.dumps(block, ensure_ascii=False)


def _result_view(content: object) -> object:
    """A tool_result's content as the guard sees it: text, or text and image parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [_user_part(b) for b in content]
        if all(p.get("type") == "text" for p in parts):
            return "\n".join(str(p["text"]) for p in parts)
        return parts
    return json.dumps(content, ensure_ascii=False)


def _user_part(block: object) -> dict[str, Any]:
    """One user block as a Chat content part: text as text, an image as an image (counted
    as one), a base64 document as a file (counted by its pages), anything else as its
    JSON text."""
    if isinstance(block, Mapping):
        kind = block.get("type")
        source = block.get("source")
        if kind == "text" and isinstance(block.get("text"), str):
            return {"type": "text", "text": block["text"]}
        if kind == "image" and isinstance(source, Mapping):
            if source.get("type") == "base64" and isinstance(source.get("data"), str):
                url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
                return {"type": "image_url", "image_url": {"url": url}}
            if source.get("type") == "url" and isinstance(source.get("url"), str):
                return {"type": "image_url", "image_url": {"url": source["url"]}}
        if (kind == "document" and isinstance(source, Mapping)
                and source.get("type") == "base64" and isinstance(source.get("data"), str)):
            media = source.get("media_type", "application/pdf")
            return {"type": "file", "file": {"file_data": f"data:{media};base64,{source['data']}",
                                             "filename": "document.pdf"}}
        if (kind == "document" and isinstance(source, Mapping)
                and source.get("type") == "text" and isinstance(source.get("data"), str)):
            return {"type": "text", "text": source["data"]}
    return {"type": "text", "text": json.dumps(block, ensure_ascii=False)}


# --------------------------------------------------------------------------- render
@dataclass
class _Piece:
    role: str
    blocks: list[Any]
    unit: int | None  # the unit index when the client's own, unchanged


def render(units: RequestUnits, fitted: Iterable[Mapping[str, Any]],
           system: object = None, tools: object = None) -> list[dict[str, Any]]:
    """The Anthropic ``messages`` for the fitter's list (see the module doc)."""
    pieces: list[_Piece] = []
    dropped: set[str] = set()
    for d in fitted:
        index = d.get(UNIT_KEY)
        if not isinstance(index, int):
            text = _text_of(d.get("content"))
            if text.strip():
                pieces.append(_Piece("user", [{"type": "text", "text": text}], None))
            continue
        unit = units.units[index]
        if unit.kind == "system":
            continue
        role = "assistant" if unit.kind == "assistant" else "user"
        if d is units.dicts[index]:
            pieces.append(_Piece(role, unit.blocks, index))
            continue
        if unit.opaque:
            dropped.update(unit.call_ids)
            continue
        pieces.append(_Piece(role, _changed_blocks(unit, d), None))
    messages = _merge(units, pieces)
    messages = _valid(messages)
    _limit_cache_markers(messages, _markers(system) + _markers(tools))
    return messages


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def _changed_blocks(unit: BlockRun, d: Mapping[str, Any]) -> list[Any]:
    """The blocks of a unit the guard changed: a cleared or cut tool output keeps its
    ``tool_result`` block's other fields; a cut text becomes one text block, with the
    client's tool calls, images and documents kept as sent."""
    text = _text_of(d.get("content"))
    if unit.kind == "tool":
        block = dict(unit.blocks[0])
        block["content"] = text
        return [block]
    out: list[Any] = [{"type": "text", "text": text}] if text.strip() else []
    out.extend(b for b in unit.blocks if b.get("type") in ("tool_use", "image", "document"))
    return out


def _merge(units: RequestUnits, pieces: list[_Piece]) -> list[dict[str, Any]]:
    """Consecutive same-role pieces as one message: the client's own message dict when the
    group is exactly all of one message's units unchanged, else a new message with the
    blocks in order (``tool_result`` blocks first in a user message)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(pieces):
        j = i
        while j < len(pieces) and pieces[j].role == pieces[i].role:
            j += 1
        group = pieces[i:j]
        own = {units.units[p.unit].msg if p.unit is not None else None for p in group}
        if len(own) == 1 and None not in own:
            msg = next(iter(own))
            assert msg is not None
            if units.per_message[msg] == len(group):
                out.append(units.messages[msg])
                i = j
                continue
        out.append(_message(pieces[i].role, [b for p in group for b in p.blocks]))
        i = j
    return out


def _message(role: str, blocks: list[Any]) -> dict[str, Any]:
    blocks = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "text"
                                        and not str(b.get("text", "")).strip())]
    if role == "user":
        blocks = ([b for b in blocks if b.get("type") == "tool_result"]
                  + [b for b in blocks if b.get("type") != "tool_result"])
    return {"role": role, "content": blocks}


def _blocks(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _ids(message: Mapping[str, Any], kind: str, key: str) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):  # a string is one text block: no ids
        return []
    return [b[key] for b in content if isinstance(b, Mapping) and b.get("type") == kind]


def _valid(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop and merge until Anthropic's sequence rules hold (see the module doc)."""
    while True:
        changed = False
        out: list[dict[str, Any]] = []
        for m in messages:
            if out and out[-1]["role"] == m["role"]:
                out[-1] = _message(m["role"], _blocks(out[-1]) + _blocks(m))
                changed = True
            else:
                out.append(m)
        messages = out
        while messages and messages[0]["role"] != "user":
            messages = messages[1:]
            changed = True
        for k, m in enumerate(messages):
            if m["role"] == "assistant":
                calls = _ids(m, "tool_use", "id")
                if calls and k + 1 < len(messages):
                    answered = set(_ids(messages[k + 1], "tool_result", "tool_use_id"))
                    if not set(calls) <= answered:
                        messages = messages[:k] + messages[k + 1:]
                        changed = True
                        break
            else:
                results = _ids(m, "tool_result", "tool_use_id")
                if not results:
                    continue
                prev = messages[k - 1] if k else None
                allowed = set(_ids(prev, "tool_use", "id")) if prev is not None else set()
                if any(r not in allowed for r in results):
                    kept = [b for b in _blocks(m) if not (
                        b.get("type") == "tool_result" and b.get("tool_use_id") not in allowed)]
                    fixed = _message("user", kept)
                    messages = (messages[:k] + ([fixed] if fixed["content"] else [])
                                + messages[k + 1:])
                    changed = True
                    break
        if not changed:
            return messages


def _markers(value: object) -> int:
    """``cache_control`` markers in a JSON value (blocks, nested tool_result content)."""
    if isinstance(value, list):
        total = 0
        for v in value:
            if isinstance(v, Mapping):
                total += "cache_control" in v
                inner = v.get("content")
                if isinstance(inner, (list, Mapping)):
                    total += _markers(inner)
            elif isinstance(v, list):
                total += _markers(v)
        return total
    if isinstance(value, Mapping):
        return int("cache_control" in value) + _markers(value.get("content"))
    return 0


def _message_markers(message: Mapping[str, Any]) -> int:
    """``cache_control`` markers in one message's blocks (a string content has none)."""
    content = message.get("content")
    return _markers(content) if isinstance(content, list) else 0


def _limit_cache_markers(messages: list[dict[str, Any]], fixed: int) -> None:
    """Remove the oldest message markers until at most :data:`MAX_CACHE_MARKERS` remain
    in all (``fixed``: those on ``system`` and ``tools``, always kept)."""
    excess = fixed + sum(_message_markers(m) for m in messages) - MAX_CACHE_MARKERS
    k = 0
    while excess > 0 and k < len(messages):
        m = messages[k]
        if _message_markers(m):
            blocks: list[Any] = []
            for b in _blocks(m):
                if excess > 0 and isinstance(b, Mapping):
                    b, removed = _strip(b, excess)
                    excess -= removed
                blocks.append(b)
            messages[k] = {**m, "content": blocks}
        k += 1


def _strip(block: Mapping[str, Any], budget: int) -> tuple[dict[str, Any], int]:
    out = dict(block)
    removed = 0
    if "cache_control" in out and budget > 0:
        del out["cache_control"]
        removed += 1
    inner = out.get("content")
    if isinstance(inner, list) and budget - removed > 0:
        fresh = []
        for b in inner:
            if isinstance(b, Mapping) and budget - removed > 0:
                b, r = _strip(b, budget - removed)
                removed += r
            fresh.append(b)
        out["content"] = fresh
    return out, removed
