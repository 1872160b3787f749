"""ctxstack: keep an LLM conversation inside its context window without losing what matters.

A five-layer defence in depth (see docs/DESIGN.md): budget (5) → DbMemory (4) → ContextGuard (3)
→ CompactUtils (2) → memories (1). The public API is re-exported here; engines live in
``ctxstack.agent`` and ``ctxstack.dag``, providers in ``ctxstack.llm``, storage in
``ctxstack.store``.
"""

import typing

from ctxstack.archive import Archive, ArchiveHit, HistoryArchive
from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.calibration import CalibratingCounter
from ctxstack.compact import CompactionResult, CompactUtils
from ctxstack.compact.options import CompactionOptions
from ctxstack.errors import (
    AgentError,
    AuthenticationError,
    BadRequestError,
    ConfigError,
    ContextOverflowError,
    CtxstackError,
    FileRejectedError,
    InputError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    MessageError,
    NoRunningTurnError,
    NotFoundError,
    PlanError,
    RateLimitError,
    ServerError,
    StorageError,
    StructuredOutputError,
    TokenizerUnavailableError,
    ToolArgumentsError,
    ToolError,
    TurnBusyError,
)
from ctxstack.guard import ContextGuard
from ctxstack.guard_events import CompactionEvent, GuardTotals
from ctxstack.llm.scripted import ScriptedLLM
from ctxstack.memory import BaseMemory, SummaryMemory, WindowMemory
from ctxstack.messages import (
    AudioPart,
    ChatMessage,
    ContentPart,
    FilePart,
    ImagePart,
    RefusalPart,
    TextPart,
    ToolCall,
)
from ctxstack.prompts import Hint
from ctxstack.protocol import LLM, ChatStream, FinishReason, LLMResult, ToolSpec, Usage
from ctxstack.tokens import TokenCounter

if typing.TYPE_CHECKING:
    from ctxstack.memory.db import DbMemory

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "AgentError",
    "Archive",
    "ArchiveHit",
    "AudioPart",
    "AuthenticationError",
    "BadRequestError",
    "BaseMemory",
    "CalibratingCounter",
    "ChatMessage",
    "ChatStream",
    "CompactUtils",
    "CompactionEvent",
    "CompactionOptions",
    "CompactionResult",
    "ConfigError",
    "ContentPart",
    "ContextGuard",
    "ContextOverflowError",
    "CtxstackError",
    "DbMemory",
    "FilePart",
    "FileRejectedError",
    "FinishReason",
    "GuardTotals",
    "Hint",
    "HistoryArchive",
    "ImagePart",
    "InputError",
    "LLMConnectionError",
    "LLMError",
    "LLMResult",
    "LLMTimeoutError",
    "MessageError",
    "ModelBudget",
    "NoRunningTurnError",
    "NotFoundError",
    "PlanError",
    "RateLimitError",
    "RefusalPart",
    "ScriptedLLM",
    "ServerError",
    "StorageError",
    "StructuredOutputError",
    "SummaryMemory",
    "TextPart",
    "TokenCounter",
    "TokenizerUnavailableError",
    "ToolArgumentsError",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "TurnBusyError",
    "Usage",
    "WindowMemory",
    "resolve_budget",
]


def __getattr__(name: str) -> typing.Any:
    # DbMemory pulls in SQLAlchemy; load it on first use (see ctxstack.memory).
    if name == "DbMemory":
        from ctxstack.memory.db import DbMemory

        return DbMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
