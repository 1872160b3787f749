"""Reading a ``/v1/chat/completions`` request: validate the wire messages, parse lazily.

The proxy must refuse what an upstream would refuse anyway *before* calling it (not JSON,
no messages, unknown roles, a tool result without its call → 400), and must be cheap on
the common path: a client resending a 2,000-message history should not pay for 2,000
pydantic models when a checkpoint covers most of them. So validation runs over the raw
dicts (a few dictionary reads per message) and :class:`WireConversation` builds the
guard's :class:`~ctxstack.ChatMessage` views only for the messages that are looked at.

A message's guard view differs from its wire form only where the guard needs it to:
``developer`` becomes ``system``, content parts the guard does not model (a vendor's
own part types) count as their JSON text, tool-call arguments that are not a JSON object
are kept as ``{"_raw": text}``, and the last user message is pinned (never compacted).
Audio (``input_audio``) and file parts are modelled: counted by size, never by their
base64 (:mod:`ctxstack.tokens._parts`), never cut; a malformed one is a 400 naming the
field. Each view records its wire index in ``metadata["wire"]``; what is forwarded for an
unchanged message is always the client's own dict, unknown fields included, and a message
the guard cut forwards the client's own audio and file part dicts, byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack import ChatMessage, TokenCounter
from ctxstack.errors import MessageError
from ctxstack.messages._model import AUDIO_KEY
from ctxstack.proxy.errors import bad_request

WIRE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
"""Roles OpenAI accepts (``function``: the legacy answer to an assistant ``function_call``)."""
_BINARY_PARTS = frozenset({"input_audio", "file"})
_KNOWN_PARTS = frozenset({"text", "image_url", "refusal"}) | _BINARY_PARTS
WIRE_KEY = "wire"


class CompletionRequest:
    """A validated chat-completions request.

    ``body`` is the decoded JSON object (field order kept), ``raw`` the bytes as received
    (forwarded unchanged when nothing is compacted), ``messages`` the wire message dicts.
    """

    __slots__ = ("body", "conversation", "model", "raw", "stream")

    def __init__(self, raw: bytes, body: dict[str, Any], model: str,
                 conversation: WireConversation) -> None:
        self.raw = raw
        self.body = body
        self.model = model
        self.stream = bool(body.get("stream"))
        self.conversation = conversation

    def with_messages(self, messages: list[dict[str, Any]]) -> bytes:
        """The body with ``messages`` replaced (every other field, and its order, kept)."""
        body = dict(self.body)
        body["messages"] = messages
        try:
            return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate the client sent escaped ("\\ud800") is valid JSON but has
            # no UTF-8 form: escape everything, as the client did, rather than fail.
            return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")

    def tools_tokens(self, counter: TokenCounter) -> int:
        """What the request's schemas cost in the prompt (:func:`schema_tokens`)."""
        return schema_tokens(self.body, counter)


def schema_tokens(body: Mapping[str, Any], counter: TokenCounter) -> int:
    """What a body's schemas cost in the prompt (they share the input budget): ``tools``,
    the legacy ``functions``, and a ``response_format`` JSON schema, which providers also
    render into the prompt."""
    schemas = [body.get(key) for key in ("tools", "functions")]
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        schemas.append(response_format.get("json_schema"))
    return sum(counter.count_text(json.dumps(s, ensure_ascii=False, separators=(",", ":")))
               for s in schemas if s)


def parse_request(raw: bytes) -> CompletionRequest:
    """Validate a chat-completions body.

    Raises:
        ProxyError: 400 naming what is wrong (not JSON, no model, no messages, a message
            that is not an object, an unknown role, a tool result without its call, a
            malformed message).
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:
        # A body nested thousands of levels deep: no chat request looks like that, and the
        # decoder's stack overflow must not surface as a 500.
        raise bad_request("the request body is nested too deeply to be a chat request"
                          ) from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' is required (a model name string)", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' is required: a non-empty list of messages",
                          param="messages")
    validate_messages(messages)
    return CompletionRequest(raw, body, model, WireConversation(messages))


def validate_messages(messages: Sequence[object]) -> None:
    """Roles known, tool results answering an earlier call (raw dicts; no models built)."""
    calls: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"messages[{i}]: expected an object, got {type(m).__name__}",
                              param=f"messages[{i}]")
        role = m.get("role")
        if role not in WIRE_ROLES:
            raise bad_request(
                f"messages[{i}].role: unknown role {role!r} (expected one of "
                f"{', '.join(sorted(WIRE_ROLES))})", param=f"messages[{i}].role")
        if role == "assistant":
            tool_calls = m.get("tool_calls")
            if tool_calls:
                if not isinstance(tool_calls, list):
                    raise bad_request(f"messages[{i}].tool_calls: expected a list",
                                      param=f"messages[{i}].tool_calls")
                for call in tool_calls:
                    if isinstance(call, dict) and isinstance(call.get("id"), str):
                        calls.add(call["id"])
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise bad_request(f"messages[{i}].tool_call_id: a tool message must carry "
                                  "the id of its tool call", param=f"messages[{i}].tool_call_id")
            if call_id not in calls:
                raise bad_request(
                    f"messages[{i}]: tool result for call {call_id!r} has no preceding "
                    "assistant message with that tool call", param=f"messages[{i}]")


class WireConversation:
    """The wire messages plus lazily built guard views and token counts."""

    __slots__ = ("_views", "counted_by", "counts", "hashes", "known_counts", "last_user",
                 "messages", "prompt_end")

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self._views: list[ChatMessage | None] = [None] * len(messages)
        self.last_user = next((i for i in range(len(messages) - 1, -1, -1)
                               if messages[i].get("role") == "user"), -1)
        end = 0
        while end < len(messages) and messages[end].get("role") in ("system", "developer"):
            end += 1
        self.prompt_end = end
        """Leading system (and developer) messages: the system prompt, never compacted."""
        self.counts: list[int] = []
        """Tokens per message, filled by :meth:`tokens`."""
        self.counted_by: object = None
        """The ``cache_key`` of the counter :attr:`counts` were made by."""
        self.known_counts: tuple[object, list[int]] | None = None
        """``(counter cache_key, tokens)`` of leading messages already counted, equal to
        an earlier conversation's (a wire's :class:`~ctxstack.proxy.unit_memo.UnitMemo`
        sets it): :meth:`tokens` by that counter counts only the rest."""
        self.hashes: dict[tuple[str, int], str] | None = None
        """Prefix hashes of :attr:`messages` already known, by ``(salt, covered)`` (a
        wire's :class:`~ctxstack.proxy.unit_memo.UnitMemo` fills it from an earlier
        request sharing these units; :func:`~ctxstack.proxy.sessions.conversation_hash`
        reads and adds to it). None: none kept."""

    def __len__(self) -> int:
        return len(self.messages)

    def view(self, i: int) -> ChatMessage:
        """The guard's view of message ``i`` (built once).

        Raises:
            ProxyError: 400 when the message is malformed (the error names it).
        """
        found = self._views[i]
        if found is None:
            wire = self.messages[i]
            if wire.get("role") == "function":
                wire = self._function_result(i)
            try:
                found = guard_view(wire, i, pinned=i == self.last_user)
            except MessageError as exc:
                raise bad_request(f"messages[{i}].{exc}", param=f"messages[{i}]") from None
            self._views[i] = found
        return found

    def _function_result(self, i: int) -> dict[str, Any]:
        """A legacy ``function`` message as the tool result of the ``function_call`` of the
        assistant message before it, so the guard keeps or drops the two together."""
        wire = self.messages[i]
        call_id = f"legacy-function-{i}"
        for j in range(i - 1, -1, -1):
            role = self.messages[j].get("role")
            if role == "assistant":
                if isinstance(self.messages[j].get("function_call"), Mapping):
                    call_id = legacy_call_id(j)
                break
            if role != "function":
                break
        return {"role": "tool", "tool_call_id": call_id, "content": wire.get("content"),
                "name": wire.get("name")}

    def views(self, start: int = 0, stop: int | None = None) -> list[ChatMessage]:
        """Views of ``messages[start:stop]``."""
        stop = len(self.messages) if stop is None else stop
        return [self.view(i) for i in range(start, stop)]

    def tokens(self, counter: TokenCounter) -> int:
        """Tokens of every message by ``counter`` (kept per message in :attr:`counts`).

        A plain-text message without tool calls or an audio reference is counted straight
        from its string (what ``counter.count_message`` computes for it: overhead + text);
        anything else through its view. Counts in :attr:`known_counts` by this counter
        are taken as they are.
        """
        key = getattr(counter, "cache_key", None)
        known = self.known_counts
        head = known[1][:len(self.messages)] if known is not None and known[0] == key else []
        self.counts = head + self._counts(counter, len(head))
        self.counted_by = key
        return sum(self.counts)

    def tail_tokens(self, counter: TokenCounter, start: int) -> int:
        """Tokens of the messages from ``start`` on (:attr:`counts` left as it is)."""
        if len(self.counts) == len(self.messages):
            return sum(self.counts[start:])
        return sum(self._counts(counter, start))

    def _counts(self, counter: TokenCounter, start: int) -> list[int]:
        overhead = getattr(counter, "message_overhead", None)
        if not isinstance(overhead, int):
            return [counter.count_message(self.view(i))
                    for i in range(start, len(self.messages))]
        counts: list[int] = []
        count_text = counter.count_text
        for i in range(start, len(self.messages)):
            m = self.messages[i]
            content = m.get("content")
            if (isinstance(content, str) and not m.get("tool_calls")
                    and AUDIO_KEY not in m and self._views[i] is None):
                counts.append(overhead + count_text(content))
            else:
                counts.append(counter.count_message(self.view(i)))
        return counts

    def longest_protected(self) -> int:
        """Characters of the longest message that must never be cut (prompt, last user)."""
        protected = [*range(self.prompt_end)]
        if self.last_user >= 0:
            protected.append(self.last_user)
        return max((len(self.view(i).text) for i in protected), default=0)

    def wire_form(self, message: ChatMessage) -> dict[str, Any]:
        """What to forward for one message of the guard's result.

        An unchanged view forwards the client's dict itself; a view the guard cut
        forwards the client's dict with the cut content (and tool calls); anything the
        guard made (a summary) forwards its own wire form.
        """
        index = message.metadata.get(WIRE_KEY)
        if not isinstance(index, int):
            return message.to_openai()
        original = self.messages[index]
        if self._views[index] is message:
            return original
        out = dict(original)
        fresh = message.to_openai()
        out["content"] = fresh.get("content")
        if _has_unmodelled_parts(original.get("content")) and out["content"] != original.get(
                "content"):
            out["content"] = _cut_unmodelled(original["content"], message)
        elif isinstance(out["content"], list) and isinstance(original.get("content"), list):
            out["content"] = _own_binary_parts(out["content"], original["content"])
        # Tool calls are never cut (a shortened argument would be another call): the
        # client's own calls go (in ``out`` already), not their view, which may hold
        # {"_raw": ...} arguments, a custom call seen as a function, or a legacy
        # function_call seen as a tool call.
        return out

    def longest_text(self, start: int = 0) -> int:
        """Characters of the longest content from ``start`` on (cheap: no views built)."""
        best = 0
        for m in self.messages[start:]:
            content = m.get("content")
            if isinstance(content, str):
                best = max(best, len(content))
            elif isinstance(content, list):
                best = max(best, sum(_text_chars(p) for p in content))
            elif content is not None:
                best = max(best, len(json.dumps(content)))
        return best


def _text_chars(part: object) -> int:
    """Characters of a wire part the cut size applies to: a text part's text, an unknown
    part's JSON; images, audio and files none (never read: a base64 payload may be
    megabytes, and it is exempt from cutting anyway)."""
    if isinstance(part, Mapping):
        kind = part.get("type")
        if kind in _BINARY_PARTS or kind == "image_url":
            return 0
        text = part.get("text") if kind == "text" else part.get("refusal")
        if kind in ("text", "refusal") and isinstance(text, str):
            return len(text)
    return len(json.dumps(part, ensure_ascii=False))


def _own_binary_parts(content: list[Any], original: list[Any]) -> list[Any]:
    """``content`` (a cut message's parts) with each audio / file part replaced by the
    client's own dict, byte-identical. The guard never drops or reorders a binary part
    within a message (it drops the message instead), so the k-th of each matches."""
    own = iter([p for p in original if isinstance(p, Mapping)
                and p.get("type") in _BINARY_PARTS])
    return [next(own, p) if isinstance(p, Mapping) and p.get("type") in _BINARY_PARTS
            else p for p in content]


def legacy_call_id(index: int) -> str:
    """The tool-call id the guard's view gives the legacy ``function_call`` of message
    ``index`` (its ``function`` answer gets it as ``tool_call_id``); never forwarded."""
    return f"legacy-function-call-{index}"


def guard_view(wire: Mapping[str, Any], index: int, *, pinned: bool = False) -> ChatMessage:
    """The :class:`ChatMessage` the guard works on for one wire message."""
    data: dict[str, Any] = dict(wire)
    if data.get("role") == "developer":
        data["role"] = "system"
    content = data.get("content")
    if isinstance(content, list):
        data["content"] = [_view_part(p) for p in content]
    legacy = data.pop("function_call", None)
    if isinstance(legacy, Mapping) and not data.get("tool_calls"):
        data["tool_calls"] = [{"id": legacy_call_id(index), "type": "function",
                               "function": legacy}]
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        data["tool_calls"] = [_safe_call(c) for c in calls]
    message = ChatMessage.from_openai(data)
    # An assistant's audio reference is counted (the upstream replays the audio): keep it.
    audio = message.metadata.get(AUDIO_KEY)
    return message.replace(pinned=pinned, metadata={
        WIRE_KEY: index, **({AUDIO_KEY: audio} if audio is not None else {})})


_DETAILS = frozenset({"auto", "low", "high"})


def _view_part(part: object) -> object:
    """One content part as the guard models it: text and images reduced to what is
    counted, so fields a provider adds (``cache_control``, an image ``uuid``, a newer
    ``detail``) are forwarded untouched instead of refused; other parts as their JSON
    text. A text or image part that is malformed stays as sent, for a clear 400."""
    if not isinstance(part, Mapping):
        return {"type": "text", "text": json.dumps(part, ensure_ascii=False)}
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        return {"type": "text", "text": text} if isinstance(text, str) else part
    if kind in _BINARY_PARTS or kind == "refusal":
        return part  # modelled: validated (a 400 names a malformed field), extras kept
    if kind == "image_url":
        image = part.get("image_url")
        if isinstance(image, str):
            return {"type": "image_url", "image_url": {"url": image}}
        if isinstance(image, Mapping) and isinstance(image.get("url"), str):
            detail = image.get("detail")
            return {"type": "image_url", "image_url": {
                "url": image["url"], **({"detail": detail} if detail in _DETAILS else {})}}
        return part
    return {"type": "text", "text": json.dumps(part, ensure_ascii=False)}


def _has_unmodelled_parts(content: object) -> bool:
    return isinstance(content, list) and any(
        not (isinstance(p, Mapping) and p.get("type") in _KNOWN_PARTS) for p in content)


def _cut_unmodelled(original: list[Any], cut: ChatMessage) -> list[Any]:
    """The wire content of a cut message whose original carried parts of a type the guard
    does not model (a vendor's own).

    The guard counted each such part as its JSON text and cut that text with the rest; a
    head and tail of such JSON forwarded as a text part would be noise to the model. So
    the parts go whole, replaced by a note naming them, and the text kept is the original
    text parts cut to no more characters than the guard kept (note included), images as
    the guard left them, audio and file parts as the client sent them.
    """
    dropped = [p.get("type") if isinstance(p, Mapping) else type(p).__name__
               for p in original
               if not (isinstance(p, Mapping) and p.get("type") in _KNOWN_PARTS)]
    note = f"[{len(dropped)} {'/'.join(sorted({str(t) for t in dropped}))} part(s) omitted]"
    text = "\n".join(p["text"] for p in original if isinstance(p, Mapping)
                     and p.get("type") == "text" and isinstance(p.get("text"), str))
    room = max(0, len(cut.text) - len(note) - 1)
    kept = text if len(text) <= room else text[:room // 2] + text[len(text) - room // 2:]
    parts: list[Any] = [{"type": "text", "text": f"{note}\n{kept}" if kept else note}]
    parts.extend(p.model_dump(exclude_none=True) for p in cut.images)
    parts.extend(p for p in original
                 if isinstance(p, Mapping) and p.get("type") in _BINARY_PARTS)
    return parts


def _safe_call(call: object) -> object:
    """A tool call whose arguments are not a JSON object keeps them as ``{"_raw": text}``;
    a call of another type (``custom`` tools' free-form ``input``) is counted as a
    function call of that name with its input raw. Only the guard's view: what is
    forwarded is always the client's own call."""
    if not isinstance(call, Mapping):
        return call
    kind = call.get("type", "function")
    if kind != "function" and isinstance(kind, str):
        inner = call.get(kind)
        inner = inner if isinstance(inner, Mapping) else {}
        name = inner.get("name") if isinstance(inner.get("name"), str) else kind
        raw = inner.get("input")
        text = raw if isinstance(raw, str) else json.dumps(inner, ensure_ascii=False)
        return {"id": call.get("id"), "type": "function",
                "function": {"name": name or kind, "arguments": json.dumps({"_raw": text})}}
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        return call
    args = fn.get("arguments")
    if not isinstance(args, str) or not args:
        return call
    try:
        ok = isinstance(json.loads(args), dict)
    except json.JSONDecodeError:
        ok = False
    if ok:
        return call
    return {**call, "function": {**fn, "arguments": json.dumps({"_raw": args})}}
