"""The proxy's request checks (:mod:`ctxstack._http_guard`): which hosts and origins it
answers without tokens, how large a body may be, how failed tokens are throttled — and
its refusals in the shape of the wire the request came in on (Anthropic's error object on
``/v1/messages``, OpenAI's everywhere else), so the client's SDK reads the message.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import Scope

from ctxstack._http_guard import FailureCounter, GuardPolicy, failure_counter
from ctxstack.proxy.errors import ErrorType, error_body
from ctxstack.proxy.settings import ProxySettings

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 413: "request_too_large",
                    429: "rate_limit_error"}


def failures_for(settings: ProxySettings) -> FailureCounter | None:
    """The failed-auth counter (None when no tokens are required: nothing can fail)."""
    if settings.auth != "token":
        return None
    return failure_counter(settings.redis_url, limit=settings.auth_failure_limit,
                           window=settings.auth_failure_window,
                           prefix="ctxstack:proxy:authfail:")


def request_policy(settings: ProxySettings, failures: FailureCounter | None) -> GuardPolicy:
    """What every request to the proxy must pass."""
    limit = settings.max_body_bytes
    return GuardPolicy(local_only=settings.auth == "none", body_limit=lambda _path: limit,
                       failures=failures, extra_hosts=settings.allowed_hosts)


def refusal(scope: Scope, status: int, message: str, code: str,
            headers: dict[str, str]) -> JSONResponse:
    """A refusal in the request's wire shape."""
    path = str(scope.get("path", ""))
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        body: dict[str, object] = {"type": "error", "error": {
            "type": _ANTHROPIC_TYPES.get(status, "invalid_request_error"), "message": message}}
    else:
        kind: ErrorType = ("authentication_error" if status == 401
                           else "invalid_request_error")
        body = error_body(message, type=kind, code=code)
    return JSONResponse(body, status_code=status, headers=headers or None)


__all__ = ["failures_for", "refusal", "request_policy"]
