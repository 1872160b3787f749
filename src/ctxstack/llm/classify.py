"""Turn an HTTP failure from an OpenAI-compatible endpoint into a ctxstack error.

Pure functions only (no SDK, no I/O), so the decisions are testable on their own and
reusable by any provider adapter.

Context overflow is the error the rest of ctxstack reacts to (the guard compacts and
retries), so it is recognised from the shapes real servers send, not only OpenAI's:

* OpenAI / Azure / Groq: ``code: "context_length_exceeded"``, "This model's maximum
  context length is N tokens … Please reduce the length of the messages";
* vLLM, DeepSeek, OpenRouter, Mistral: "maximum context length is N tokens" (vLLM also
  "'max_tokens' … is too large … maximum context length");
* llama.cpp: ``type: "exceed_context_size_error"``, "the request exceeds the available
  context size" — older builds sent it with HTTP 500, so 5xx bodies are checked too;
* Ollama: "the input length exceeds the context length";
* Anthropic-compatible: "prompt is too long: N tokens > M maximum", "input length and
  `max_tokens` exceed context limit";
* Gemini (OpenAI-compatible endpoint): "The input token count (N) exceeds the maximum
  number of tokens allowed (M)";
* TGI: "`inputs` tokens + `max_new_tokens` must be <= N"; Bedrock: "Input is too long";
  LM Studio: "Context size has been exceeded"; xAI: "maximum prompt length".

What must *not* be read as an overflow: rate limits that talk about tokens. OpenAI's
"Request too large for gpt-4o … on tokens per min (TPM): Limit 30000, Requested 36278"
(429, and 413 at Groq) mentions a size, but compacting the prompt is the wrong cure —
it is a quota. So a 429 is never an overflow, and any body that speaks of per-minute /
per-day token limits or rate limits is a :class:`RateLimitError` whatever its status.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from ctxstack.errors import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    LLMConnectionError,
    LLMError,
    LLMTimeoutError,
    RateLimitError,
    ServerError,
)

OVERFLOW_CODES = frozenset({
    "context_length_exceeded",
    "exceed_context_size_error",
    "context_window_exceeded",
    "string_above_max_length",
})

_OVERFLOW = re.compile(
    "|".join([
        r"maximum context length",
        r"context[ _-]length[ _-]exceeded",
        r"prompt is too long",
        r"input (?:length |is )?too long",
        r"exceeds? (?:the )?(?:available |model'?s? )?context (?:size|length|window)",
        r"context (?:size|window|length) (?:has been |was |is )?exceeded",
        r"exceeds? (?:the )?context limit",
        r"input token count .{0,40}exceeds",
        r"maximum prompt length",
        r"`?inputs`? tokens \+ `?max_new_tokens`? must be",
        r"reduce the length of the (?:messages|prompt|input)",
        r"too large for model with \d+ maximum context",
    ]),
    re.IGNORECASE,
)

_RATE_LIMIT = re.compile(
    r"per min(?:ute)?\b|\bTPM\b|\bRPM\b|\bTPD\b|per day\b|rate[ _-]?limit|quota",
    re.IGNORECASE,
)
_RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "insufficient_quota"})

# "Limit 30000, Requested 36278": one request bigger than the whole per-minute quota.
_LIMIT_REQUESTED = re.compile(r"Limit:? ([\d,]+).{0,40}?Requested:? ([\d,]+)", re.IGNORECASE)
# OpenAI also says when to come back: "Please try again in 1m19.2s" / "in 200ms".
_TRY_AGAIN = re.compile(
    r"try again in (?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)(ms|s))?",
    re.IGNORECASE,
)


def describe_body(body: object) -> tuple[str, set[str]]:
    """The human text and the machine codes of an error body, however it is nested.

    Bodies come as ``{"error": {"message", "type", "code"}}``, as the SDK's already
    unwrapped inner dict, as a bare string, or (Gemini) as a list holding a dict whose
    message is itself JSON. All string leaves under ``message``/``detail``/``error`` join
    the text; ``code``/``type``/``status`` values become codes.
    """
    texts: list[str] = []
    codes: set[str] = set()

    def walk(node: object, key: str | None, depth: int) -> None:
        if depth > 6:
            return
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, str(k), depth + 1)
        elif isinstance(node, list | tuple):
            for item in node[:10]:
                walk(item, key, depth + 1)
        elif isinstance(node, str):
            if key in ("code", "type", "status", "reason"):
                codes.add(node.lower())
            elif key is None or key in ("message", "detail", "error", "msg", "error_description"):
                texts.append(node)
        elif isinstance(node, int) and key == "code":
            codes.add(str(node))

    walk(body, None, 0)
    return " | ".join(texts)[:4000], codes


def is_context_overflow(status: int | None, body: object) -> bool:
    """Whether a failure means "the prompt does not fit the model's window"."""
    if status == 429:
        return False
    text, codes = describe_body(body)
    if codes & _RATE_LIMIT_CODES or _RATE_LIMIT.search(text):
        return False
    if codes & OVERFLOW_CODES:
        return True
    return bool(_OVERFLOW.search(text))


def is_rate_limit(status: int | None, body: object) -> bool:
    """429, or another status whose body clearly describes a rate limit / quota."""
    if status == 429:
        return True
    if status in (401, 403):
        return False
    text, codes = describe_body(body)
    return bool(codes & _RATE_LIMIT_CODES or _RATE_LIMIT.search(text))


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> (
    float | None
):
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date).

    Unparseable or negative values give ``None`` / ``0.0``; ``now`` (epoch seconds) is for
    tests of the date form.
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms):
            return max(0.0, ms / 1000.0)
    raw = lower.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        parsed = email.utils.parsedate_tz(raw)
        if parsed is None:
            return None
        when = email.utils.mktime_tz(parsed)
        return max(0.0, when - (time.time() if now is None else now))
    return max(0.0, seconds) if math.isfinite(seconds) else None


def retry_after_from_message(text: str) -> float | None:
    """OpenAI's "Please try again in 1m19.2s" / "in 200ms" as seconds, if present."""
    match = _TRY_AGAIN.search(text)
    if not match or not any(match.groups()):
        return None
    hours, minutes, value, unit = match.groups()
    seconds = float(hours or 0) * 3600 + float(minutes or 0) * 60
    if value is not None:
        seconds += float(value) / (1000.0 if unit.lower() == "ms" else 1.0)
    return seconds


def request_exceeds_quota(text: str) -> bool:
    """True for "Request too large … Limit N, Requested M" with M > N: waiting won't help."""
    match = _LIMIT_REQUESTED.search(text)
    if not match:
        return False
    limit, requested = (int(g.replace(",", "")) for g in match.groups())
    return requested > limit


def classify_status(
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    where: str | None = None,
) -> LLMError:
    """The ctxstack error for an HTTP error response (status, decoded body, headers).

    ``where`` (endpoint and model) is appended to the message so a log line says which
    endpoint failed; ``retry_after`` comes from the headers, else from the message.

    Order matters: authentication first, then rate limits (so a token-per-minute message
    is never an overflow), then overflow (any status, because some servers send it as
    500), then the status class.
    """
    text, _ = describe_body(body)
    detail = text or f"HTTP {status}"
    if where:
        detail = f"{detail} [{where}]"
    if status in (401, 403):
        return AuthenticationError(f"authentication failed ({status}): {detail}",
                                   status_code=status)
    if is_rate_limit(status, body):
        retry_after = parse_retry_after(headers)
        if retry_after is None:
            retry_after = retry_after_from_message(text)
        return RateLimitError(f"rate limited ({status}): {detail}", status_code=status,
                              retry_after=retry_after)
    if is_context_overflow(status, body):
        return ContextOverflowError(f"context window exceeded ({status}): {detail}",
                                    status_code=status)
    if status == 408:
        return LLMTimeoutError(f"the server timed out the request (408): {detail}",
                               status_code=status)
    if status >= 500:
        return ServerError(f"server error ({status}): {detail}", status_code=status)
    return BadRequestError(f"request refused ({status}): {detail}", status_code=status)


def is_retryable(exc: BaseException) -> bool:
    """Whether trying the same request again may succeed.

    Yes: rate limits (unless one request alone exceeds the quota), 5xx, connection
    failures and timeouts. No: authentication, bad requests, overflow, anything else.
    """
    if isinstance(exc, RateLimitError):
        return not request_exceeds_quota(str(exc))
    return isinstance(exc, ServerError | LLMConnectionError | LLMTimeoutError)


def retry_after_of(exc: BaseException) -> float | None:
    """The server-requested wait carried by an error, if any."""
    value: Any = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, int | float) else None
