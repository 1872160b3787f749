"""Drop-in adapters that put ctxstack's guard inside the agent frameworks people already use.

Each adapter is its own module with its own extra, and nothing here imports a framework:
``import ctxstack.integrations`` is free, and a module whose extra is missing raises an
``ImportError`` naming the ``pip install`` line to run.

================================================  ==========================================
adapter                                           extra
================================================  ==========================================
``ctxstack.integrations.langchain``               ``pip install 'ctxstack[langchain]'``
  ``ContextGuardMiddleware``, ``LangChainSummarizer`` (LangChain v1 ``create_agent``)
``ctxstack.integrations.pydantic_ai``             ``pip install 'ctxstack[pydantic-ai]'``
  ``history_processor``, ``PydanticAISummarizer``
``ctxstack.integrations.openai_agents``           ``pip install 'ctxstack[openai-agents]'``
  ``CtxstackSession``, ``input_filter``
``ctxstack.integrations.llamaindex``              ``pip install 'ctxstack[llamaindex]'``
  ``GuardedMemory``
================================================  ==========================================

Every adapter takes a :class:`ctxstack.ContextGuard` (its ``compact_llm``, ``counter`` — a
:class:`ctxstack.CalibratingCounter` works — and ``on_compact`` all apply), fits the
framework's history to a budget before each model call, keeps tool calls and their results
together, and keeps a summary as a system-level message in the framework's own form.
"""
