"""Layer 2: token estimation, smart truncation and LLM compaction.

Public entry point: :class:`CompactUtils`. The pieces live in small modules:

* :mod:`~ctxstack.compact.groups` — system prompt / tool groups / units, fold boundary;
* :mod:`~ctxstack.compact.cut` — head+tail cutting of texts, messages, tool groups;
* :mod:`~ctxstack.compact.truncate` — ``smart_truncate``;
* :mod:`~ctxstack.compact.facts` — exact values re-attached to summaries;
* :mod:`~ctxstack.compact.summarize` — the one summariser call path;
* :mod:`~ctxstack.compact.compaction` — ``llm_compact`` / ``compact_detailed``.
"""

from ctxstack.compact.compaction import CompactionResult, compact_detailed, llm_compact
from ctxstack.compact.cut import cut_message, cut_text, cut_text_tokens
from ctxstack.compact.truncate import smart_truncate
from ctxstack.compact.utils import CompactUtils

__all__ = [
    "CompactUtils",
    "CompactionResult",
    "compact_detailed",
    "cut_message",
    "cut_text",
    "cut_text_tokens",
    "llm_compact",
    "smart_truncate",
]
