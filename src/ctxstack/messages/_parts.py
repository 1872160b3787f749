"""Content parts: the elements of a multi-part message content, and their wire parsing.

Text, image, refusal, and the two *binary* kinds — audio (``input_audio``) and files
(``file``) — in the OpenAI chat-completions shape. What each is to ctxstack, and why
binary parts are opaque (counted by size, never cut, never read as text), is in
:mod:`ctxstack.messages._model`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ctxstack.errors import InputError, MessageError

_PART_CONFIG = ConfigDict(frozen=True, extra="allow")
"""Parts keep keys ctxstack does not model (``cache_control`` from OpenRouter / LiteLLM
prompt-caching requests, vendor annotations): they are sent back as they came."""


class TextPart(BaseModel):
    """A text content part: ``{"type": "text", "text": "..."}`` (other keys kept as-is)."""

    model_config = _PART_CONFIG
    type: Literal["text"] = "text"
    text: str


class ImageURL(BaseModel):
    """The ``image_url`` object of an image part (an http(s) URL or a ``data:`` URL)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    """An image content part: ``{"type": "image_url", "image_url": {"url": ...}}`` (other
    keys kept as-is)."""

    model_config = _PART_CONFIG
    type: Literal["image_url"] = "image_url"
    image_url: ImageURL


class RefusalPart(BaseModel):
    """An assistant's refusal content part: ``{"type": "refusal", "refusal": "..."}``.

    Text to every reader (counted, summarised, searched like a text part); kept as its own
    part so the conversation goes back to the provider as it came."""

    model_config = _PART_CONFIG
    type: Literal["refusal"] = "refusal"
    refusal: str


def _required_text(value: str, field: str) -> str:
    if not value:
        raise ValueError(f"{field}: must be a non-empty string")
    return value


class InputAudio(BaseModel):
    """The ``input_audio`` object of an audio part: base64 ``data`` and its ``format``.

    ``data`` is never decoded or scanned (it may be megabytes): its length is what the
    token estimate reads, plus the fixed-size header of a WAV file. ``format`` is any
    non-empty string: OpenAI takes ``"wav"`` and ``"mp3"``, other OpenAI-compatible
    servers more, and refusing those would break their clients (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    data: str
    format: str

    @field_validator("data")
    @classmethod
    def _data(cls, v: str) -> str:
        return _required_text(v, "input_audio.data")

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        return _required_text(v, "input_audio.format")


class AudioPart(BaseModel):
    """An audio content part: ``{"type": "input_audio", "input_audio": {"data", "format"}}``
    (a binary part: see the module doc)."""

    model_config = _PART_CONFIG
    type: Literal["input_audio"] = "input_audio"
    input_audio: InputAudio


class FileData(BaseModel):
    """The ``file`` object of a file part: inline ``file_data`` (a ``data:`` URL, e.g.
    ``data:application/pdf;base64,...``), or a reference — ``file_id`` (OpenAI Files API)
    or ``file_url`` (some gateways) — and an optional ``filename``. At least one of the
    three is required; each that is present must be a non-empty string."""

    model_config = ConfigDict(frozen=True, extra="allow")
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None
    file_url: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> Self:
        for name in ("file_data", "file_id", "file_url"):
            value = getattr(self, name)
            if value is not None:
                _required_text(value, f"file.{name}")
        if self.file_data is None and self.file_id is None and self.file_url is None:
            raise ValueError("file: needs file_data (inline), file_id or file_url")
        return self


class FilePart(BaseModel):
    """A file content part: ``{"type": "file", "file": {...}}`` (a binary part: see the
    module doc)."""

    model_config = _PART_CONFIG
    type: Literal["file"] = "file"
    file: FileData


BinaryPart = AudioPart | FilePart
"""The content parts ctxstack never reads as text, cuts or scans: audio and files."""

ContentPart = Annotated[
    TextPart | ImagePart | RefusalPart | AudioPart | FilePart, Field(discriminator="type")
]
"""One element of a multi-part message content: text, image, refusal, audio or file."""

PART_TYPES = (TextPart, ImagePart, RefusalPart, AudioPart, FilePart)
"""Every content part class (what :data:`ContentPart` may hold)."""


_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])


def coerce_content(content: object) -> str | list[ContentPart] | None:
    """A message content in any shape the message model accepts, as text or part objects.

    Accepts ``None``, a string, or a sequence whose items are content part objects
    (:data:`PART_TYPES`) or their OpenAI dicts (``{"type": "text", "text": ...}``,
    ``{"type": "image_url", "image_url": {"url": ...}}``, audio, file, refusal). Anything
    else is refused rather than silently miscounted.

    Raises:
        InputError: the content is another type, or a part is not a valid content part.
    """
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, Sequence) or isinstance(content, bytes | bytearray):
        raise InputError(
            f"content: expected a string, a list of content parts or None, "
            f"got {type(content).__name__}"
        )
    if all(isinstance(p, PART_TYPES) for p in content):
        return list(content)
    try:
        return list(_PARTS.validate_python(list(content)))
    except ValidationError as exc:
        raise InputError(f"content: not a list of content parts "
                         f"({describe_validation_error(exc)})") from None


_WIRE_PARTS: dict[str, type[BaseModel]] = {
    "text": TextPart, "refusal": RefusalPart, "input_audio": AudioPart, "file": FilePart,
}


def part_text(part: TextPart | RefusalPart) -> str:
    """The text a text or refusal part carries."""
    return part.text if isinstance(part, TextPart) else part.refusal


def parse_part(part: object, where: str = "content[]") -> ContentPart:
    """One wire content part as a part object (a bare image URL string normalised).

    Raises:
        MessageError: ``where`` and the field at fault (``content[2]: input_audio.data:
            Field required``), or the unsupported type.
    """
    if isinstance(part, PART_TYPES):
        return part
    if not isinstance(part, Mapping):
        raise MessageError(f"{where}: expected an object, got {type(part).__name__}")
    ptype = part.get("type")
    try:
        if ptype == "image_url":
            image_url = part.get("image_url")
            # Some clients send the bare URL string; normalise to the object form.
            if isinstance(image_url, str):
                part = {**part, "image_url": {"url": image_url}}
            return ImagePart.model_validate(part)
        model = _WIRE_PARTS.get(ptype) if isinstance(ptype, str) else None
        if model is not None:
            parsed: ContentPart = model.model_validate(part)  # type: ignore[assignment]
            return parsed
    except ValidationError as exc:
        raise MessageError(f"{where}: {describe_validation_error(exc)}") from None
    raise MessageError(f"{where}.type: unsupported content part type {ptype!r} "
                       "(expected text, image_url, input_audio, file or refusal)")


def describe_validation_error(exc: ValidationError) -> str:
    """Turn pydantic's report into one line per problem, each naming its field."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith("function-"))
        if err["type"] == "value_error":
            loc = ""  # our own validators already name the field
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        lines.append(f"{loc}: {msg}" if loc and not msg.startswith(f"{loc}:") else msg)
    return "; ".join(dict.fromkeys(lines))


def binary_note(part: AudioPart | FilePart) -> str:
    """A short bracketed note naming a binary part, for text renderings of a message
    (a summariser's transcript, a history block): ``[audio (wav)]``, ``[file: a.pdf]``."""
    if isinstance(part, AudioPart):
        return f"[audio ({part.input_audio.format})]"
    file = part.file
    name = file.filename or file.file_id or ("inline" if file.file_data else file.file_url)
    return f"[file: {name}]"
