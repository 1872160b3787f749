"""ctxstack: keep an LLM conversation inside its context window without losing what matters.

A five-layer defence in depth (see docs/DESIGN.md): budget (5) → DbMemory (4) →
ContextGuard (3) → CompactUtils (2) → memories (1), used by the ReAct agent and the DAG
engine. The core lives in packages named after the layers — :mod:`ctxstack.messages`,
:mod:`ctxstack.tokens`, :mod:`ctxstack.compaction`, :mod:`ctxstack.guard`,
:mod:`ctxstack.budget`, :mod:`ctxstack.memory`, :mod:`ctxstack.agent`, :mod:`ctxstack.dag` —
each of whose ``__init__`` is its public surface; providers are in :mod:`ctxstack.llm`,
storage in :mod:`ctxstack.store`, test doubles in :mod:`ctxstack.testing`.

This module re-exports what a library user needs (``__all__``, pinned by a test). The names
load on first use (PEP 562), so ``import ctxstack.tokens`` stays as light as that package:
it does not import the guard, the engines or an LLM client.
"""

from __future__ import annotations

import typing

from ctxstack._lazy import lazy_exports

if typing.TYPE_CHECKING:
    from ctxstack.agent import ReActAgent, tool
    from ctxstack.budget import ModelBudget, resolve_budget
    from ctxstack.compaction import CompactionOptions, CompactUtils, Hint, HistoryArchive
    from ctxstack.dag import DAGEngine
    from ctxstack.errors import (
        ConfigError,
        ContextOverflowError,
        CtxstackError,
        LLMError,
        MessageError,
    )
    from ctxstack.guard import CompactionEvent, ContextGuard
    from ctxstack.memory import BaseMemory, SummaryMemory, WindowMemory
    from ctxstack.memory.db import DbMemory
    from ctxstack.messages import (
        ChatMessage,
        ContentPart,
        ImagePart,
        TextPart,
        ToolCall,
        from_openai_messages,
    )
    from ctxstack.protocol import LLM, LLMResult, Usage
    from ctxstack.tokens import CalibratingCounter, TokenCounter

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # messages
    "ChatMessage": "ctxstack.messages",
    "ContentPart": "ctxstack.messages",
    "ImagePart": "ctxstack.messages",
    "TextPart": "ctxstack.messages",
    "ToolCall": "ctxstack.messages",
    "from_openai_messages": "ctxstack.messages",
    # the model protocol
    "LLM": "ctxstack.protocol",
    "LLMResult": "ctxstack.protocol",
    "Usage": "ctxstack.protocol",
    # counting
    "CalibratingCounter": "ctxstack.tokens",
    "TokenCounter": "ctxstack.tokens",
    # layer 5
    "ModelBudget": "ctxstack.budget",
    "resolve_budget": "ctxstack.budget",
    # layer 2
    "CompactUtils": "ctxstack.compaction",
    "CompactionOptions": "ctxstack.compaction",
    "Hint": "ctxstack.compaction",
    "HistoryArchive": "ctxstack.compaction",
    # layer 3
    "CompactionEvent": "ctxstack.guard",
    "ContextGuard": "ctxstack.guard",
    # layers 1 and 4 (DbMemory needs the `server` extra: SQLAlchemy)
    "BaseMemory": "ctxstack.memory",
    "DbMemory": "ctxstack.memory.db",
    "SummaryMemory": "ctxstack.memory",
    "WindowMemory": "ctxstack.memory",
    # engines
    "DAGEngine": "ctxstack.dag",
    "ReActAgent": "ctxstack.agent",
    "tool": "ctxstack.agent",
    # the errors a library user catches (the rest of the tree: ctxstack.errors)
    "ConfigError": "ctxstack.errors",
    "ContextOverflowError": "ctxstack.errors",
    "CtxstackError": "ctxstack.errors",
    "LLMError": "ctxstack.errors",
    "MessageError": "ctxstack.errors",
}

__all__ = [
    "LLM",
    "BaseMemory",
    "CalibratingCounter",
    "ChatMessage",
    "CompactUtils",
    "CompactionEvent",
    "CompactionOptions",
    "ConfigError",
    "ContentPart",
    "ContextGuard",
    "ContextOverflowError",
    "CtxstackError",
    "DAGEngine",
    "DbMemory",
    "Hint",
    "HistoryArchive",
    "ImagePart",
    "LLMError",
    "LLMResult",
    "MessageError",
    "ModelBudget",
    "ReActAgent",
    "SummaryMemory",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "Usage",
    "WindowMemory",
    "from_openai_messages",
    "resolve_budget",
    "tool",
]


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
