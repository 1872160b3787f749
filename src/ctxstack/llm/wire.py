"""Reading OpenAI chat-completions responses: JSON answers, SSE streams, usage.

Pure functions over decoded JSON (no HTTP), shared by the client and its tests. They are
lenient where servers differ in harmless ways (missing tool-call ids, content as a list
of parts, usage absent, comment lines in SSE) and strict where a difference would lose
information (no choices, a stream without ``finish_reason``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack.errors import LLMConnectionError, LLMError, MessageError
from ctxstack.llm.classify import classify_status
from ctxstack.messages import ChatMessage, ToolCall
from ctxstack.messages._model import RAW_ARGUMENTS_KEY, parse_arguments
from ctxstack.protocol import FinishReason, Usage
from ctxstack.protocol._llm import finish_reason_of
from ctxstack.tokens import HEURISTIC

_call_ids = itertools.count(1)


def parse_completion(
    data: object, where: str
) -> tuple[ChatMessage, Usage | None, FinishReason | None, str | None]:
    """``(message, usage or None, finish_reason, model)`` of a non-streaming answer.

    Raises:
        LLMError: the body is not a completion (no choices, an error object, not a dict).
    """
    if not isinstance(data, Mapping):
        raise LLMError(f"{where}: malformed response: expected a JSON object")
    error = payload_error(data, where)
    if error is not None:
        raise error
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise LLMError(f"{where}: malformed response: the response has no choices")
    choice = choices[0]
    raw = choice.get("message")
    raw = raw if isinstance(raw, Mapping) else {}
    calls = [parse_tool_call(c, where) for c in (raw.get("tool_calls") or [])]
    message = ChatMessage.assistant(content_text(raw.get("content")), tool_calls=calls or None)
    finish = choice.get("finish_reason")
    model = data.get("model")
    return (message, parse_usage(data.get("usage")), finish_reason_of(finish),
            model if isinstance(model, str) else None)


def content_text(content: object) -> str | None:
    """Assistant content as text (some servers answer with a list of text parts)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content
                 if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(texts) if texts else None
    return str(content)


def parse_tool_call(raw: object, where: str) -> ToolCall:
    """A wire tool call as a :class:`ToolCall`; unparseable arguments kept under ``_raw``.

    Models do emit broken JSON arguments; failing the whole answer would crash the agent's
    turn, while ``{"_raw": text}`` lets it hand the model a readable tool error instead.
    """
    if not isinstance(raw, Mapping) or not isinstance(fn := raw.get("function"), Mapping):
        raise LLMError(f"{where}: malformed response: a tool call without a function")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise LLMError(f"{where}: malformed response: a tool call without a function name")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Some servers (older Ollama and llama.cpp builds) omit ids; tool results need one.
        call_id = f"call_{next(_call_ids)}"
    arguments = fn.get("arguments")
    try:
        parsed = parse_arguments(arguments)
    except MessageError:
        parsed = {RAW_ARGUMENTS_KEY: arguments if isinstance(arguments, str) else repr(arguments)}
    return ToolCall(id=call_id, name=name, arguments=parsed)


MAX_REPORTED_TOKENS = 10**12
"""The largest usage figure taken from a provider's answer (no call bills more)."""


def reported_count(value: object) -> int | None:
    """A usage figure as the provider wrote it, if it is one: an integer (not a bool)
    from 0 to :data:`MAX_REPORTED_TOKENS`; else ``None``. Bounded because usage is summed
    into 64-bit database counters (the service's conversation totals, the proxy's stats):
    an endpoint reporting 10**30 tokens would make those writes fail."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED_TOKENS:
        return value
    return None


def parse_usage(raw: object) -> Usage | None:
    """Provider usage, or ``None`` when absent, incomplete or absurd (a figure that is not
    a count, :func:`reported_count`: the caller then estimates it).

    Cached prompt tokens come from ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM)
    or ``prompt_cache_hit_tokens`` (DeepSeek).
    """
    if not isinstance(raw, Mapping):
        return None
    prompt = reported_count(raw.get("prompt_tokens"))
    completion = reported_count(raw.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    details = raw.get("prompt_tokens_details")
    cached = reported_count(details.get("cached_tokens") if isinstance(details, Mapping)
                            else None)
    if cached is None:
        cached = reported_count(raw.get("prompt_cache_hit_tokens"))
    return Usage(input_tokens=prompt, output_tokens=completion, cached_tokens=cached or 0,
                 calls=1)


def estimate_usage(messages: Sequence[ChatMessage], output_tokens: int) -> Usage:
    """Heuristic usage for a call the server did not count (flagged ``estimated``)."""
    return Usage(input_tokens=HEURISTIC.count_messages(messages),
                 output_tokens=max(0, output_tokens), calls=1, estimated=True)


def payload_error(data: Mapping[str, Any], where: str) -> LLMError | None:
    """The error a 200 body or a stream event carries (``{"error": …}``), if any.

    Without an HTTP status the code in the body decides; failing that it counts as a
    server error (retryable before any text was shown).
    """
    error = data.get("error")
    if not error:
        return None
    code = error.get("code") if isinstance(error, Mapping) else None
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    return classify_status(status, error, where=where)


class StreamAccumulator:
    """What one streamed answer has produced so far (text, finish, usage)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.reset()

    def reset(self) -> None:
        self.parts: list[str] = []
        self.pending: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chars = 0
        self.done = False

    def feed(self, data: str) -> bool:
        """Take one event's data; True when it carried text or ended the answer.

        Raises:
            LLMError: the event is an error, or not JSON.
        """
        if data == "[DONE]":
            self.done = True
            return True
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise LLMConnectionError(
                f"{self.where}: malformed stream event after {self.chars} characters: "
                f"{data[:120]!r}") from None
        if not isinstance(chunk, Mapping):
            return False
        error = payload_error(chunk, self.where)
        if error is not None:
            raise error
        usage = parse_usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        got_text = False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, Mapping) else None
            if isinstance(text, str) and text:
                self.pending.append(text)
                self.parts.append(text)
                self.chars += len(text)
                got_text = True
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
        return got_text or self.finish_reason is not None

    def take_pending(self) -> list[str]:
        out, self.pending = self.pending, []
        return out

    def check_complete(self) -> None:
        """Raise unless the model's ``finish_reason`` arrived."""
        if self.finish_reason is None:
            raise LLMConnectionError(
                f"{self.where}: the stream ended before the model finished (no finish_reason) "
                f"after {self.chars} characters; the answer is incomplete"
            )

    def final_usage(self, messages: Sequence[ChatMessage]) -> Usage:
        if self.usage is not None:
            return self.usage
        return estimate_usage(messages, HEURISTIC.count_text("".join(self.parts)))
