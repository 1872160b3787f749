"""Language-model providers: the protocol, usage records and the offline fake.

The OpenAI-compatible client lives in :mod:`ctxstack.llm.openai` and is imported from
there (it pulls in the ``openai`` SDK, which the core layers do not need).
"""

from ctxstack.llm.base import LLM, ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.llm.scripted import ScriptedCall, ScriptedLLM

__all__ = ["LLM", "ChatStream", "LLMResult", "ScriptedCall", "ScriptedLLM", "ToolSpec", "Usage"]
