"""ctxstack: keep an LLM conversation inside its context window without losing what matters.

A five-layer defence in depth (see DESIGN.md): budget (5) → DbMemory (4) → ContextGuard (3)
→ CompactUtils (2) → memories (1). The public API is re-exported here; engines live in
``ctxstack.agent`` and ``ctxstack.dag``, providers in ``ctxstack.llm``.
"""

from typing import TYPE_CHECKING, Any

from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.calibration import CalibratingCounter
from ctxstack.compact import CompactionResult, CompactUtils
from ctxstack.errors import (
    AgentError,
    ConfigError,
    ContextOverflowError,
    CtxstackError,
    InputError,
    LLMError,
    MessageError,
    NotFoundError,
    StorageError,
)
from ctxstack.guard import ContextGuard
from ctxstack.guard_events import CompactionEvent, GuardTotals
from ctxstack.llm import LLM, ChatStream, LLMResult, ScriptedLLM, Usage
from ctxstack.memory import BaseMemory, SummaryMemory, WindowMemory
from ctxstack.messages import ChatMessage, ContentPart, ImagePart, TextPart, ToolCall
from ctxstack.prompts import Hint
from ctxstack.tokens import TokenCounter

if TYPE_CHECKING:
    from ctxstack.memory.db import DbMemory

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "AgentError",
    "BaseMemory",
    "CalibratingCounter",
    "ChatMessage",
    "ChatStream",
    "CompactUtils",
    "CompactionEvent",
    "CompactionResult",
    "ConfigError",
    "ContentPart",
    "ContextGuard",
    "ContextOverflowError",
    "CtxstackError",
    "DbMemory",
    "GuardTotals",
    "Hint",
    "ImagePart",
    "InputError",
    "LLMError",
    "LLMResult",
    "MessageError",
    "ModelBudget",
    "NotFoundError",
    "ScriptedLLM",
    "StorageError",
    "SummaryMemory",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "Usage",
    "WindowMemory",
    "resolve_budget",
]


def __getattr__(name: str) -> Any:
    # DbMemory pulls in SQLAlchemy; load it on first use (see ctxstack.memory).
    if name == "DbMemory":
        from ctxstack.memory.db import DbMemory

        return DbMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
