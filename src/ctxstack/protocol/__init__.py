"""The model protocol every engine talks to: :class:`LLM` (``chat`` and ``stream_chat``),
:class:`LLMResult`, :class:`ChatStream`, typed :class:`ToolSpec` and :class:`Usage`.

Providers (:mod:`ctxstack.llm`) implement it; the core never imports them.
"""

from ctxstack.protocol._llm import LLM, ChatStream, FinishReason, LLMResult, ToolSpec
from ctxstack.protocol._usage import Usage

__all__ = ["LLM", "ChatStream", "FinishReason", "LLMResult", "ToolSpec", "Usage"]
