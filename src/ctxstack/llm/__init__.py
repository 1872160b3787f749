"""Language-model providers: the OpenAI-compatible client and the offline fake.

The protocol they implement (``LLM``, ``LLMResult``, ``ChatStream``, ``Usage``,
``ToolSpec``) is core and lives in :mod:`ctxstack.protocol`; it is re-exported here for
convenience.

The OpenAI-compatible client lives in :mod:`ctxstack.llm.openai` and is imported from
there (it pulls in the ``openai`` SDK, which the core layers do not need).
"""

from ctxstack.protocol import LLM, ChatStream, LLMResult, ToolSpec, Usage
from ctxstack.testing import ScriptedCall, ScriptedLLM

__all__ = ["LLM", "ChatStream", "LLMResult", "ScriptedCall", "ScriptedLLM", "ToolSpec", "Usage"]
