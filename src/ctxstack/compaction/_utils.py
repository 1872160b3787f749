"""``CompactUtils``: the layer-2 toolbox as one stateless class (docs/DESIGN.md §3, layer 2).

Every method is a static/class method over plain message lists: no instance, no state,
inputs never mutated. The functions also exist at module level
(:func:`ctxstack.compaction.smart_truncate`, :func:`ctxstack.compaction.compact_detailed`, …);
the class is the documented, import-stable entry point used by the guard and the memories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxstack.compaction import _llm_compact as _llm
from ctxstack.compaction import _truncate
from ctxstack.messages import ChatMessage, ContentPart
from ctxstack.tokens import TokenCounter
from ctxstack.tokens import estimate_messages_tokens as _estimate_messages
from ctxstack.tokens import estimate_tokens as _estimate


class CompactUtils:
    """Estimate, smart-truncate and LLM-compact message lists. Never instantiated."""

    def __init__(self) -> None:
        raise TypeError("CompactUtils is a namespace of static methods; do not instantiate it")

    @staticmethod
    def estimate_tokens(
        text_or_parts: str | Sequence[ContentPart | Mapping[str, Any]] | None,
    ) -> int:
        """Tokens of a text or content-part list (no per-message overhead).

        Parts may be objects or OpenAI dicts; any other shape raises ``InputError``.
        """
        return _estimate(text_or_parts)

    @staticmethod
    def estimate_messages_tokens(
        messages: Iterable[ChatMessage], counter: TokenCounter | None = None
    ) -> int:
        """Tokens of a message list, 4 per message overhead included; cached per message."""
        return _estimate_messages(messages, counter)

    @staticmethod
    def smart_truncate(
        messages: Sequence[ChatMessage], max_tokens: int, *, counter: TokenCounter | None = None,
        fill: float = 1.0, stride: int | None = None,
    ) -> list[ChatMessage]:
        """Fit ``messages`` into ``max_tokens`` without an LLM.

        See :mod:`ctxstack.compaction._truncate` for the rules (``fill``: how much of the
        budget the boundary turn's fill may use, 0 to 1; ``stride``: a stable window for
        a caller that truncates its whole history afresh at every call).
        """
        return _truncate.smart_truncate(messages, max_tokens, counter=counter, fill=fill,
                                        stride=stride)

    llm_compact = staticmethod(_llm.llm_compact)
    """Summarise the oldest history into one rolling summary to fit ``max_tokens``; falls
    back to :meth:`smart_truncate` (logged) on any summariser failure. See
    :mod:`ctxstack.compaction._llm_compact` for the rules."""

    compact_detailed = staticmethod(_llm.compact_detailed)
    """As :meth:`llm_compact`, returning the full :class:`CompactionResult`."""
