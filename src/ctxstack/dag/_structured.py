"""Structured output: ask any :class:`~ctxstack.llm.LLM` for JSON matching a pydantic model.

:func:`structured_call` works with every LLM, not only those with a native JSON mode:

1. the schema always goes into a system instruction (so ScriptedLLM and servers that
   ignore ``response_format`` still know what to produce);
2. ``response_format`` is sent too when the LLM declares it supports it
   (``response_format_support`` = "json_schema" or "json_object", as
   :class:`~ctxstack.llm.openai.OpenAICompatibleLLM` does) or the caller passes one;
3. the answer is parsed forgivingly — scratchpad blocks (``<think>…</think>``) removed,
   code fences and leading/trailing prose skipped — then validated with pydantic;
4. invalid output gets exactly one re-ask that quotes the validation error; invalid
   again → :class:`~ctxstack.errors.StructuredOutputError` carrying the last raw text
   and the usage of every attempt (so a turn's token total stays complete).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ctxstack.compaction._prompts import strip_scratchpad
from ctxstack.errors import StructuredOutputError
from ctxstack.messages import ChatMessage, TextPart
from ctxstack.protocol import LLM, Usage

T = TypeVar("T", bound=BaseModel)

# Possessive: a fence never closed made the greedy language name give back one
# character at a time, each followed by a scan to the end (quadratic).
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*+[ \t]*+\n?(.*?)```", re.DOTALL)
_decoder = json.JSONDecoder()


class StructuredResult(BaseModel, Generic[T]):
    """A validated answer, the usage of all attempts, and how many attempts it took."""

    model_config = ConfigDict(frozen=True)

    value: T
    usage: Usage
    attempts: int
    raw: str


def schema_instruction(schema: type[BaseModel]) -> str:
    """The system instruction describing the JSON to produce."""
    schema_json = json.dumps(schema.model_json_schema(), ensure_ascii=False, indent=None)
    return (
        "Answer with a single JSON object that validates against this JSON Schema, and "
        "nothing else: no prose, no code fences, no comments.\n"
        f"JSON Schema ({schema.__name__}): {schema_json}"
    )


def response_format_for(schema: type[BaseModel], support: object) -> dict[str, Any] | None:
    """The ``response_format`` to send given what the LLM declares it supports."""
    if support == "json_schema":
        return {"type": "json_schema", "json_schema": {
            "name": _schema_name(schema), "schema": schema.model_json_schema(), "strict": False}}
    if support == "json_object":
        return {"type": "json_object"}
    return None


def extract_json(text: str) -> Any:
    """The first JSON value found in a model's answer.

    Tries, in order: the whole answer (scratchpad stripped); the contents of each code
    fence; every ``{`` / ``[`` position, decoding one value and ignoring what follows.

    Raises:
        ValueError: no JSON value anywhere in the text (the message says why).
    """
    cleaned = strip_scratchpad(text)
    for candidate in _candidates(cleaned):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    for index in _starts(cleaned):
        try:
            value, _ = _decoder.raw_decode(cleaned, index)
        except json.JSONDecodeError:
            continue
        return value
    if not cleaned:
        raise ValueError("the answer is empty")
    raise ValueError("the answer contains no complete JSON object")


def _candidates(text: str) -> Iterator[str]:
    yield text
    for match in _FENCE.finditer(text):
        yield match.group(1).strip()


def _starts(text: str) -> Iterator[int]:
    # Objects first: the schemas are pydantic models, and prose often holds a stray "[".
    for opener in "{[":
        index = text.find(opener)
        while index != -1:
            yield index
            index = text.find(opener, index + 1)


async def structured_call(
    llm: LLM,
    messages: Sequence[ChatMessage],
    schema: type[T],
    *,
    max_tokens: int | None = None,
    **opts: Any,
) -> StructuredResult[T]:
    """Ask ``llm`` for an instance of ``schema``; re-ask once on invalid output.

    Args:
        llm: any LLM (OpenAI-compatible, ScriptedLLM, …).
        messages: the conversation; the schema instruction is merged into its leading
            system message (or becomes one), never appended after user turns.
        schema: the pydantic model the answer must validate against.
        max_tokens: per-call output limit.
        **opts: passed to ``llm.chat``; ``response_format=`` overrides the automatic
            choice (``None`` disables it).

    Raises:
        StructuredOutputError: still invalid after the re-ask (``.raw`` = last answer,
            ``.usage`` = both calls).
        LLMError: the calls themselves failed.
    """
    if "response_format" not in opts:
        opts["response_format"] = response_format_for(
            schema, getattr(llm, "response_format_support", None))
    if opts.get("response_format") is None:
        opts.pop("response_format", None)
    if max_tokens is not None:
        opts["max_tokens"] = max_tokens
    conversation = with_instruction(messages, schema_instruction(schema))
    usage = Usage()
    raw = ""
    problem = ""
    for attempt in (1, 2):
        result = await llm.chat(conversation, **opts)
        usage = usage + result.usage
        raw = result.message.text
        try:
            value = schema.model_validate(extract_json(raw))
        except ValidationError as exc:
            problem = _describe(exc)
        except ValueError as exc:
            problem = str(exc)
        else:
            return StructuredResult[T](value=value, usage=usage, attempts=attempt, raw=raw)
        if result.finish_reason == "length":
            problem += " (the answer was cut off by the output token limit)"
        conversation = [
            *conversation,
            ChatMessage.assistant(raw or "(empty answer)"),
            ChatMessage.user(
                f"That answer was not valid: {problem}. Reply again with only the JSON "
                f"object for {schema.__name__}, matching the schema exactly."
            ),
        ]
    raise StructuredOutputError(
        f"{schema.__name__}: the model's answer did not validate after a re-ask: {problem}",
        raw=raw, usage=usage,
    )


def with_instruction(messages: Sequence[ChatMessage], instruction: str) -> list[ChatMessage]:
    """``messages`` with ``instruction`` added to the leading system message (new list).

    Merged rather than added as a second system message because several chat templates
    (Mistral, Gemma via vLLM/Ollama) reject a system message that is not first.
    """
    out = list(messages)
    if out and out[0].role == "system":
        first = out[0]
        if isinstance(first.content, list):
            content: Any = [*first.content, TextPart(text=instruction)]
        else:
            content = f"{first.content}\n\n{instruction}" if first.content else instruction
        out[0] = first.replace(content=content)
    else:
        out.insert(0, ChatMessage.system(instruction))
    return out


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:8]:
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _schema_name(schema: type[BaseModel]) -> str:
    # OpenAI requires ^[a-zA-Z0-9_-]{1,64}$; generic models have brackets in their names.
    return re.sub(r"[^a-zA-Z0-9_-]", "_", schema.__name__)[:64] or "answer"
