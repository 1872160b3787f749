"""Layer 2: compaction — the seed's ``CompactUtils`` (estimate, smart-truncate,
LLM-compact), the compaction options and hints, and the archive that keeps what was
compacted away reachable.

Public entry point: :class:`CompactUtils`. The pieces live in small private modules:

* :mod:`~ctxstack.compaction._groups` — system prompt / tool groups / units, fold boundary;
* :mod:`~ctxstack.compaction._cut` — head+tail cutting of texts, messages, tool groups;
* :mod:`~ctxstack.compaction._truncate` — ``smart_truncate``;
* :mod:`~ctxstack.compaction._facts` — exact values re-attached to summaries;
* :mod:`~ctxstack.compaction._summarize` — the one summariser call path;
* :mod:`~ctxstack.compaction._prefix_request` — the cache-aligned summary request (the
  conversation's previous call, the instruction last) and when it cannot be used;
* :mod:`~ctxstack.compaction._llm_compact` — ``llm_compact`` / ``compact_detailed``;
* :mod:`~ctxstack.compaction._summaries` — summaries that keep their sources: ranges,
  two-level condensation, expansion.
"""

from ctxstack.compaction._archive import Archive, ArchiveHit, HistoryArchive
from ctxstack.compaction._compactor import CompactionContext, Compactor
from ctxstack.compaction._cut import cut_message, cut_text, cut_text_tokens
from ctxstack.compaction._facts import FACTS_HEADING
from ctxstack.compaction._llm_compact import RollingSummary, compact_detailed, llm_compact
from ctxstack.compaction._mask import MaskToolOutputs
from ctxstack.compaction._options import CompactionOptions
from ctxstack.compaction._prompts import SUMMARY_PREFIX, Hint
from ctxstack.compaction._result import CompactionResult
from ctxstack.compaction._stages import DEFAULT_STRATEGIES
from ctxstack.compaction._summaries import Expansion, SummaryNode, SummaryStore, expand
from ctxstack.compaction._truncate import Truncate, smart_truncate
from ctxstack.compaction._utils import CompactUtils

__all__ = [
    "DEFAULT_STRATEGIES",
    "FACTS_HEADING",
    "SUMMARY_PREFIX",
    "Archive",
    "ArchiveHit",
    "CompactUtils",
    "CompactionContext",
    "CompactionOptions",
    "CompactionResult",
    "Compactor",
    "Expansion",
    "Hint",
    "HistoryArchive",
    "MaskToolOutputs",
    "RollingSummary",
    "SummaryNode",
    "SummaryStore",
    "Truncate",
    "compact_detailed",
    "cut_message",
    "cut_text",
    "cut_text_tokens",
    "expand",
    "llm_compact",
    "smart_truncate",
]
