"""ctxstack: keep an LLM conversation inside its context window without losing what matters.

A five-layer defence in depth (see DESIGN.md): budget (5) → DbMemory (4) → ContextGuard (3)
→ CompactUtils (2) → memories (1). The public API is re-exported here.
"""

from ctxstack.budget import ModelBudget, resolve_budget
from ctxstack.errors import (
    AgentError,
    ConfigError,
    ContextOverflowError,
    CtxstackError,
    LLMError,
    MessageError,
    StorageError,
)
from ctxstack.llm import LLM, LLMResult, ScriptedLLM, Usage
from ctxstack.memory.base import BaseMemory
from ctxstack.messages import ChatMessage, ContentPart, ImagePart, TextPart, ToolCall
from ctxstack.tokens import TokenCounter

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "AgentError",
    "BaseMemory",
    "ChatMessage",
    "ConfigError",
    "ContentPart",
    "ContextOverflowError",
    "CtxstackError",
    "ImagePart",
    "LLMError",
    "LLMResult",
    "MessageError",
    "ModelBudget",
    "ScriptedLLM",
    "StorageError",
    "TextPart",
    "TokenCounter",
    "ToolCall",
    "Usage",
    "resolve_budget",
]
