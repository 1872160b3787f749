"""Drop-in adapters for the agent frameworks people already use, one optional extra each.

- ``ctxstack.integrations.langchain`` — ``pip install 'ctxstack[langchain]'``
- ``ctxstack.integrations.pydantic_ai`` — ``pip install 'ctxstack[pydantic-ai]'``
- ``ctxstack.integrations.openai_agents`` — ``pip install 'ctxstack[openai-agents]'``
- ``ctxstack.integrations.llamaindex`` — ``pip install 'ctxstack[llamaindex]'``

This package imports no framework: import the adapter module you need.
"""
