"""The chat message model every layer works on.

A :class:`ChatMessage` is the OpenAI chat-completions message plus two things the wire
format lacks: ``pinned`` (compaction must keep it) and ``metadata`` (what the message *is*
to ctxstack: ``{"kind": "query" | "inject" | "summary" | "warning" | "checklist"}``,
image attachment records, …). Neither is ever sent to a provider.

Messages are frozen: code that "changes" a message builds a new one with
:meth:`ChatMessage.replace`, so a caller's list is never altered behind its back and a
per-message token estimate cached on the object can never go stale.

Wire round-trip (:meth:`ChatMessage.from_openai` / :meth:`ChatMessage.to_openai`) is
lossless at the JSON-value level: tool-call arguments travel as a JSON *string* on the wire
and are a ``dict`` here; re-serialising may change insignificant whitespace, never values.

Real exports hold more than the four roles. What :meth:`ChatMessage.from_openai` does with
each shape it meets (decided so a user's logs load and go back out as a valid request):

* ``role: "developer"`` (the newer name of the system role) is a ``system`` message — it
  is part of the system prompt for compaction — remembered in ``metadata["openai_role"]``
  so :meth:`~ChatMessage.to_openai` sends it back as ``developer``.
* The legacy ``functions`` format: an assistant ``function_call`` becomes a
  :class:`ToolCall` and a ``role: "function"`` result a ``tool`` message answering it,
  and both go out in the current ``tool_calls`` / ``tool`` form (every provider that
  still reads the legacy form also reads the current one). A lone message has no
  context, so the call id is ``legacy_<name>``; :func:`from_openai_messages` numbers
  them per call (``legacy_<index>_<name>``) and gives each ``function`` result the id of
  the call it answers.
* Tool-call ``arguments`` that are not a JSON object (a run cut off mid-answer, a model
  that wrote broken JSON) are kept verbatim as ``{"_raw": text}`` — what the
  OpenAI-compatible client does with such an answer — and sent back verbatim.
* Lone UTF-16 surrogates (``"\ud83d"`` — what an exporter that cuts strings by UTF-16
  length leaves of an emoji, decoded by ``json.loads``) cannot be encoded as UTF-8, so no
  request holding one can be sent: each becomes U+FFFD (in content, text parts, refusals
  and tool-call arguments).
* An assistant ``refusal`` is kept in ``metadata["refusal"]`` and sent back (it is a
  short sentence; token counters read content and tool calls only); a
  ``{"type": "refusal"}`` content part is a :class:`RefusalPart`, counted and searched
  as text, sent back as a refusal part.
* An assistant ``audio`` reference (``{"id": "audio_abc"}``: how a client points back at
  a spoken answer in a multi-turn audio chat) is kept in ``metadata["audio"]`` as sent,
  and sent back; it is counted at a fixed cost (:mod:`ctxstack.tokens._parts`).

Content parts: ``text``, ``image_url``, ``refusal``, and the two *binary* kinds,
``input_audio`` (:class:`AudioPart`: base64 ``data`` and a ``format``) and ``file``
(:class:`FilePart`: inline ``file_data``, an uploaded ``file_id``, or a gateway's
``file_url``; an optional ``filename``). Binary parts are opaque to ctxstack: counted by
their size (never read as text), never cut, never scanned for facts or indexed; whatever
shortens a message keeps them byte-identical or drops the message whole. Their payload is
not decoded or checked at the boundary — an upstream that refuses the bytes says so —
but their *shape* is: a missing or empty ``data`` / ``format``, a file part with neither
data nor a reference, is a :class:`MessageError` naming the field. An audio ``format``
other than OpenAI's ``wav`` and ``mp3`` passes through (other OpenAI-compatible servers
take ``flac``, ``ogg``, ``pcm16``…) and is counted at the most conservative audio rate.
Any other part type is refused with a :class:`MessageError` naming it: ctxstack could
neither count nor cut it, and silently dropping it would be worse.

Whether a *list* of messages is a valid request (every tool result answers a call of
the assistant message before it, every call has its result) is a property of the list:
:mod:`ctxstack.messages._tool_turns` checks and repairs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from ctxstack.errors import MessageError
from ctxstack.messages._parts import (
    PART_TYPES,
    AudioPart,
    BinaryPart,
    ContentPart,
    FileData,
    FilePart,
    ImagePart,
    ImageURL,
    InputAudio,
    RefusalPart,
    TextPart,
    binary_note,
    coerce_content,
    describe_validation_error,
    parse_part,
    part_text,
)

__all__ = [
    "AUDIO_KEY",
    "OPENAI_ROLE_KEY",
    "PART_TYPES",
    "RAW_ARGUMENTS_KEY",
    "REFUSAL_KEY",
    "ROLES",
    "WIRE_ROLES",
    "AudioPart",
    "BinaryPart",
    "ChatMessage",
    "ContentPart",
    "FileData",
    "FilePart",
    "ImagePart",
    "ImageURL",
    "InputAudio",
    "MessageKind",
    "RefusalPart",
    "Role",
    "TextPart",
    "ToolCall",
    "binary_note",
    "coerce_content",
    "describe_validation_error",
    "from_openai_messages",
    "kind_metadata",
    "legacy_call_id",
    "lenient_arguments",
    "not_a_chat_message",
    "parse_arguments",
    "parse_part",
    "part_text",
    "require_chat_messages",
    "scrub_surrogates",
    "to_openai_messages",
]

Role = Literal["system", "user", "assistant", "tool"]
MessageKind = Literal["query", "inject", "summary", "warning", "checklist"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


def kind_metadata(kind: MessageKind, **extra: Any) -> dict[str, Any]:
    """``{"kind": kind, **extra}``: the metadata of a message (or stored row) of that kind."""
    return {"kind": kind, **extra}


class ToolCall(BaseModel):
    """A function call the assistant asked for. ``arguments`` is the decoded JSON object."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        """Parse ``{"id", "type": "function", "function": {"name", "arguments": "<json>"}}``."""
        if not isinstance(data, Mapping):
            raise MessageError(f"tool_calls[]: expected an object, got {type(data).__name__}")
        if data.get("type", "function") != "function":
            raise MessageError(f"tool_calls[].type: unsupported tool call type {data['type']!r}")
        fn = data.get("function")
        if not isinstance(fn, Mapping):
            raise MessageError("tool_calls[].function: missing or not an object")
        call_id = data.get("id")
        name = fn.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise MessageError("tool_calls[].id: missing or not a string")
        if not isinstance(name, str) or not name:
            raise MessageError("tool_calls[].function.name: missing or not a string")
        arguments = scrub_surrogates(lenient_arguments(fn.get("arguments")))
        return cls(id=call_id, name=name, arguments=arguments)

    def to_openai(self) -> dict[str, Any]:
        """The wire form, with ``arguments`` as a compact JSON string."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json},
        }

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON text sent on the wire (``{"_raw": text}`` → ``text``)."""
        raw = self.arguments.get(RAW_ARGUMENTS_KEY)
        if isinstance(raw, str) and len(self.arguments) == 1:
            return raw
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (nested in lists and dicts too)
    replaced by U+FFFD; the very object when there is none (the common case is one
    ``isascii`` test per string)."""
    if isinstance(value, str):
        if value.isascii() or not _SURROGATE.search(value):
            return value
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        items = [scrub_surrogates(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, Mapping):
        pairs = {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
        same = all(a is b for a, b in zip(pairs.values(), value.values(), strict=True))
        return value if same and pairs.keys() == value.keys() else pairs
    return value


RAW_ARGUMENTS_KEY = "_raw"
"""Key under which tool-call arguments that are not a JSON object are kept verbatim."""


def parse_arguments(raw: object) -> dict[str, Any]:
    """Decode tool-call arguments: a JSON object string, a dict, or empty (→ ``{}``)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str):
        raise MessageError(
            f"tool_calls[].function.arguments: expected a JSON string, got {type(raw).__name__}"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MessageError(
            f"tool_calls[].function.arguments: not valid JSON ({exc.msg} at {exc.pos})"
        ) from exc
    if not isinstance(value, dict):
        raise MessageError(
            "tool_calls[].function.arguments: must be a JSON object, "
            f"got {type(value).__name__}"
        )
    return value


def lenient_arguments(raw: object) -> dict[str, Any]:
    """:func:`parse_arguments`, but text that is not a JSON object is kept as ``{"_raw": text}``.

    Logged trajectories hold such arguments (a run cut off mid-answer); refusing the whole
    export for one of them would be worse than carrying the text along verbatim.
    """
    if isinstance(raw, str):
        try:
            return parse_arguments(raw)
        except MessageError:
            return {RAW_ARGUMENTS_KEY: raw}
    return parse_arguments(raw)


OPENAI_ROLE_KEY = "openai_role"
"""Metadata key remembering a wire role ctxstack maps onto its own (``developer``)."""
REFUSAL_KEY = "refusal"
"""Metadata key holding an assistant message's ``refusal`` text."""
AUDIO_KEY = "audio"
"""Metadata key holding an assistant message's ``audio`` reference (``{"id": ...}``)."""
WIRE_ROLES = ("developer", "function")
"""Wire roles accepted besides :data:`ROLES` (see the module doc)."""


def legacy_call_id(name: object, index: int | None = None) -> str:
    """The id given to a legacy ``function_call`` (and to the ``function`` result answering it)."""
    return f"legacy_{name}" if index is None else f"legacy_{index}_{name}"


class ChatMessage(BaseModel):
    """One chat turn. Frozen: use :meth:`replace` to derive a changed copy.

    Invariants checked on construction (each failure is a :class:`MessageError` naming
    the field): a known ``role``; ``tool`` messages carry ``tool_call_id``; only
    ``assistant`` messages carry ``tool_calls``; content is ``str``, a list of content
    parts (:data:`ContentPart`), or ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    pinned: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    # Token estimates cached per counter (see ctxstack.tokens._counter). Safe because the message
    # is frozen; reset by replace()/model_copy() which may change the content.
    _token_cache: dict[str, int] = PrivateAttr(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        # Value equality over the declared fields only: the private token cache is an
        # implementation detail and must not make equal messages compare unequal.
        if not isinstance(other, ChatMessage):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # metadata is a dict: not hashable

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise MessageError(describe_validation_error(exc)) from None

    @field_validator("content", mode="before")
    @classmethod
    def _content_type(cls, v: object) -> object:
        if v is not None and not isinstance(v, str | list):
            raise ValueError(
                f"content: expected a string, a list of content parts or null, "
                f"got {type(v).__name__}"
            )
        return v

    @field_validator("tool_calls")
    @classmethod
    def _empty_tool_calls_are_none(cls, v: list[ToolCall] | None) -> list[ToolCall] | None:
        return v or None

    @model_validator(mode="after")
    def _check_role_fields(self) -> Self:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("tool_call_id: a tool message must carry the id of its tool call")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"tool_calls: only assistant messages may carry tool calls, "
                             f"not {self.role!r}")
        return self

    # ------------------------------------------------------------------ constructors
    @classmethod
    def system(cls, content: str, **kw: Any) -> ChatMessage:
        return cls(role="system", content=content, **kw)

    @classmethod
    def user(cls, content: str | Sequence[ContentPart], **kw: Any) -> ChatMessage:
        return cls(role="user", content=content if isinstance(content, str) else list(content),
                   **kw)

    @classmethod
    def assistant(
        cls, content: str | None = None, tool_calls: list[ToolCall] | None = None, **kw: Any
    ) -> ChatMessage:
        return cls(role="assistant", content=content, tool_calls=tool_calls, **kw)

    @classmethod
    def tool(cls, tool_call_id: str, content: str, **kw: Any) -> ChatMessage:
        return cls(role="tool", content=content, tool_call_id=tool_call_id, **kw)

    # The ctxstack message kinds: a constructor each, so no caller spells the metadata.
    @classmethod
    def query(cls, content: str | Sequence[ContentPart], **metadata: Any) -> ChatMessage:
        """The current question: a pinned user message of kind "query"."""
        content = content if isinstance(content, str) else list(content)
        return cls(role="user", content=content, pinned=True,
                   metadata=kind_metadata("query", **metadata))

    @classmethod
    def inject(cls, content: str, **metadata: Any) -> ChatMessage:
        """A message the user sent while the agent ran: pinned, kind "inject"."""
        return cls(role="user", content=content, pinned=True,
                   metadata=kind_metadata("inject", **metadata))

    @classmethod
    def summary(cls, content: str, **metadata: Any) -> ChatMessage:
        """A conversation summary: a system message of kind "summary"."""
        return cls(role="system", content=content, metadata=kind_metadata("summary", **metadata))

    @classmethod
    def warning(cls, content: str, **metadata: Any) -> ChatMessage:
        """A note the agent loop adds for the model (e.g. a repeated tool call)."""
        return cls(role="user", content=content, metadata=kind_metadata("warning", **metadata))

    @classmethod
    def checklist(cls, content: str, **metadata: Any) -> ChatMessage:
        """The agent's final-answer checklist prompt."""
        return cls(role="user", content=content,
                   metadata=kind_metadata("checklist", **metadata))

    # ------------------------------------------------------------------ derived
    @property
    def kind(self) -> str | None:
        """``metadata["kind"]`` if set (query, inject, summary, warning, checklist)."""
        kind = self.metadata.get("kind")
        return kind if isinstance(kind, str) else None

    @property
    def text(self) -> str:
        """All text of the content (text and refusal parts joined by newlines); images,
        audio and files omitted — what is counted, cut, summarised and searched as text."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part_text(p) for p in self.content
                         if isinstance(p, TextPart | RefusalPart))

    @property
    def images(self) -> list[ImagePart]:
        """The image parts of the content, in order."""
        if isinstance(self.content, list):
            return [p for p in self.content if isinstance(p, ImagePart)]
        return []

    @property
    def binary_parts(self) -> list[AudioPart | FilePart]:
        """The audio and file parts of the content, in order (see the module doc)."""
        if isinstance(self.content, list):
            return [p for p in self.content if isinstance(p, AudioPart | FilePart)]
        return []

    def replace(self, **changes: Any) -> ChatMessage:
        """A validated copy with ``changes`` applied; the original is untouched."""
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(changes)
        return type(self)(**data)

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> ChatMessage:
        """As pydantic's, but never carries a cached token estimate into the copy."""
        copy = super().model_copy(update=update, deep=deep)
        copy._token_cache = {}
        return copy

    # ------------------------------------------------------------------ wire format
    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ChatMessage:
        """Build from an OpenAI chat-completions message dict.

        ``developer`` and ``function`` roles, ``function_call``, ``refusal``, an assistant
        ``audio`` reference and arguments that are not JSON are mapped as the module doc
        says. Other keys the wire format has but ctxstack does not model
        (``annotations``, …) are ignored; malformed known keys raise
        :class:`MessageError` naming the key.
        """
        if not isinstance(data, Mapping):
            raise MessageError(f"message: expected an object, got {type(data).__name__}")
        data = scrub_surrogates(data)
        role = data.get("role")
        metadata: dict[str, Any] = {}
        tool_call_id = data.get("tool_call_id")
        if role == "developer":
            role, metadata[OPENAI_ROLE_KEY] = "system", "developer"
        elif role == "function":
            name = data.get("name")
            if not isinstance(name, str) or not name:
                raise MessageError("name: a function message must name its function")
            role = "tool"
            tool_call_id = tool_call_id or legacy_call_id(name)
        if role is None:
            keys = ", ".join(sorted(map(str, data))) or "none"
            raise MessageError(f"role: missing (an OpenAI chat message needs a role; "
                               f"keys found: {keys})")
        if role not in ROLES:
            raise MessageError(f"role: unknown role {role!r} (expected one of "
                               f"{', '.join(ROLES + WIRE_ROLES)})")
        raw_calls = data.get("tool_calls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise MessageError("tool_calls: expected a list")
        calls = [ToolCall.from_openai(c) for c in raw_calls] if raw_calls else []
        legacy = data.get("function_call")
        if legacy is not None:
            if not isinstance(legacy, Mapping):
                raise MessageError("function_call: expected an object")
            fname = legacy.get("name")
            if not isinstance(fname, str) or not fname:
                raise MessageError("function_call.name: missing or not a string")
            arguments = scrub_surrogates(lenient_arguments(legacy.get("arguments")))
            # Some exports repeat the first tool call as a legacy function_call: one call.
            if not any(c.name == fname and c.arguments == arguments for c in calls):
                calls.append(ToolCall(id=legacy_call_id(fname), name=fname,
                                      arguments=arguments))
        refusal = data.get("refusal")
        if refusal is not None:
            if not isinstance(refusal, str):
                raise MessageError(f"refusal: expected a string, got {type(refusal).__name__}")
            metadata[REFUSAL_KEY] = refusal
        audio = data.get("audio")
        if audio is not None and role == "assistant":
            if not isinstance(audio, Mapping):
                raise MessageError(f"audio: expected an object, got {type(audio).__name__}")
            if not isinstance(audio.get("id"), str) or not audio["id"]:
                raise MessageError("audio.id: missing or not a string (an assistant audio "
                                   "reference is {\"id\": \"audio_...\"})")
            metadata[AUDIO_KEY] = dict(audio)
        content = data.get("content")
        if isinstance(content, list):
            content = [parse_part(p, f"content[{i}]") for i, p in enumerate(content)]
        return cls(
            role=role,
            content=content,
            tool_calls=calls or None,
            tool_call_id=tool_call_id,
            name=data.get("name"),
            metadata=metadata,
        )

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI wire dict (``pinned`` and ``metadata`` are never sent, except what
        :meth:`from_openai` recorded there from the wire: a ``developer`` role, a
        ``refusal``, an ``audio`` reference)."""
        role = self.metadata.get(OPENAI_ROLE_KEY) if self.role == "system" else None
        out: dict[str, Any] = {"role": role if role == "developer" else self.role}
        if isinstance(self.content, list):
            out["content"] = [p.model_dump(exclude_none=True) for p in self.content]
        else:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        refusal = self.metadata.get(REFUSAL_KEY)
        if self.role == "assistant" and isinstance(refusal, str):
            out["refusal"] = refusal
        audio = self.metadata.get(AUDIO_KEY)
        if self.role == "assistant" and isinstance(audio, Mapping):
            out["audio"] = dict(audio)
        return out


def to_openai_messages(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """The wire form of a message list."""
    return [m.to_openai() for m in messages]


def not_a_chat_message(index: int, item: object) -> MessageError:
    """The error for ``messages[index]`` that is not a :class:`ChatMessage` — naming the
    converter when it is an OpenAI-format dict (the form most callers hold)."""
    hint = (" (convert OpenAI-format dicts with ctxstack.messages.from_openai_messages; "
            "ContextGuard.check_and_compact and the memories take them as they are)"
            if isinstance(item, Mapping) else "")
    return MessageError(f"messages[{index}]: expected a ChatMessage, got "
                        f"{type(item).__name__}{hint}")


def require_chat_messages(messages: Sequence[object]) -> None:
    """Raise :func:`not_a_chat_message`'s error for the first item that is not a
    :class:`ChatMessage` (functions that return the messages they were given in another
    form cannot take dicts without guessing what to return)."""
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise not_a_chat_message(i, m)


def from_openai_messages(data: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """Parse a wire message list; errors name the index of the bad message.

    Legacy ``function_call`` ids are numbered by the index of their assistant message, and
    each ``function`` result takes the id of the oldest unanswered call of its name, so
    repeated calls of one function stay distinct (see the module doc).

    Exports from servers that give tool calls no id (Ollama's chat format, older
    llama.cpp builds) are paired by position, as those servers do: a call without an id
    gets ``call_<message index>_<call index>``, and a ``tool`` message without a
    ``tool_call_id`` answers the oldest such call of the assistant message before it.
    """
    out = []
    pending: dict[str, list[str]] = {}  # function name → legacy ids awaiting a result
    unnamed: list[str] = []  # ids given to id-less calls, awaiting a result
    for i, item in enumerate(data):
        if isinstance(item, Mapping):
            item, unnamed = _positional_ids(item, i, unnamed)
        try:
            message = ChatMessage.from_openai(item)
        except MessageError as exc:
            raise MessageError(f"messages[{i}].{exc}") from None
        if not isinstance(item, Mapping):  # pragma: no cover - from_openai refused it
            continue
        legacy = item.get("function_call")
        if (isinstance(legacy, Mapping) and message.tool_calls
                and message.tool_calls[-1].id == legacy_call_id(message.tool_calls[-1].name)):
            call = message.tool_calls[-1]
            numbered = call.model_copy(update={"id": legacy_call_id(call.name, i)})
            pending.setdefault(call.name, []).append(numbered.id)
            message = message.replace(tool_calls=[*message.tool_calls[:-1], numbered])
        elif item.get("role") == "function" and not item.get("tool_call_id"):
            waiting = pending.get(str(message.name))
            if waiting:
                message = message.replace(tool_call_id=waiting.pop(0))
        out.append(message)
    return out


def _positional_ids(
    item: Mapping[str, Any], index: int, unnamed: list[str]
) -> tuple[Mapping[str, Any], list[str]]:
    """``item`` with ids for id-less calls / results (see :func:`from_openai_messages`)."""
    role = item.get("role")
    calls = item.get("tool_calls")
    if role == "assistant" and isinstance(calls, list) and calls:
        fresh: list[str] = []
        named = []
        for j, call in enumerate(calls):
            if isinstance(call, Mapping) and not call.get("id"):
                call = {**call, "id": f"call_{index}_{j}"}
                fresh.append(call["id"])
            named.append(call)
        return ({**item, "tool_calls": named} if fresh else item), fresh
    if role == "tool" and not item.get("tool_call_id") and unnamed:
        return {**item, "tool_call_id": unnamed[0]}, unnamed[1:]
    if role == "tool":
        return item, unnamed
    return item, []
