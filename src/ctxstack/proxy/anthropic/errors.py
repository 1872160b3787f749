"""Errors on the Anthropic Messages wire, in Anthropic's own shape.

Anthropic's SDKs (and Claude Code) read ``{"type": "error", "error": {"type", "message"}}``
and pick the exception class from the status; the proxy's own refusals on ``/v1/messages``
use that shape, with the error types Anthropic documents, and never name the upstream's
address or key.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from ctxstack.proxy.errors import ProxyError

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          502: "api_error", 503: "api_error", 504: "timeout_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (``api_error`` for other 5xx)."""
    return _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> dict[str, object]:
    """Anthropic's error object."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def anthropic_error(status: int, message: str,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON response carrying :func:`error_body`."""
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def from_proxy_error(exc: ProxyError, headers: dict[str, str] | None = None) -> JSONResponse:
    """A :class:`ProxyError` (raised by shared code: auth, forwarding, parsing) answered in
    Anthropic's shape; the message keeps naming the field."""
    return anthropic_error(exc.status, exc.message, headers)
