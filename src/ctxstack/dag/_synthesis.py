"""The final answer: streamed from the query and the step results through ``stream_chat()``.

The tool work is done by then; the answer is streamed so the user sees it as it is
written. Step results enter within :data:`~ctxstack.dag._context.SYNTHESIS_MAX_CHARS`
(50,000) shared fairly, which keeps the synthesis prompt bounded however verbose the steps
were; failed and skipped steps are named so the answer can say what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxstack.dag._context import SYNTHESIS_MAX_CHARS, format_for_synthesis
from ctxstack.dag._prompts import SYNTHESIS_SYSTEM_PROMPT
from ctxstack.dag._results import StepResult
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ChatStream


def synthesis_messages(
    query: str,
    results: Sequence[StepResult],
    *,
    system_prompt: str = SYNTHESIS_SYSTEM_PROMPT,
    max_chars: int = SYNTHESIS_MAX_CHARS,
) -> list[ChatMessage]:
    """The synthesis prompt (pure): system prompt, then the request and the results."""
    body = format_for_synthesis(results, max_chars) or "(no step produced a result)"
    return [
        ChatMessage.system(system_prompt),
        ChatMessage.user(f"User request:\n{query}\n\nStep results:\n\n{body}"),
    ]


def stream_synthesize(
    llm: LLM,
    query: str,
    results: Sequence[StepResult],
    *,
    system_prompt: str = SYNTHESIS_SYSTEM_PROMPT,
    max_chars: int = SYNTHESIS_MAX_CHARS,
    **opts: Any,
) -> ChatStream:
    """Stream the final answer; the stream's ``usage`` is final once it is exhausted."""
    messages = synthesis_messages(
        query, results, system_prompt=system_prompt, max_chars=max_chars
    )
    return llm.stream_chat(messages, **opts)
