"""Errors the proxy itself answers with, in OpenAI's shape.

Every client SDK knows how to read ``{"error": {"message", "type", "param", "code"}}``, so
the proxy's own refusals (bad request, missing token, upstream unreachable or silent) use
it too. Messages say what was wrong and never name the upstream's address or key: a
client of the proxy has no business learning where it forwards to.
"""

from __future__ import annotations

from typing import Literal

from fastapi.responses import JSONResponse

from ctxstack.errors import CtxstackError

ErrorType = Literal[
    "invalid_request_error", "authentication_error", "upstream_error", "server_error",
]


class ProxyError(CtxstackError):
    """A refusal the proxy answers itself (raised by parsing, auth and forwarding)."""

    def __init__(self, status: int, message: str, *, type: ErrorType = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type: ErrorType = type
        self.code = code
        self.param = param

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        """The JSON response for this error."""
        return error_response(self.status, self.message, type=self.type, code=self.code,
                              param=self.param, headers=headers)


def bad_request(message: str, *, param: str | None = None,
                code: str | None = None) -> ProxyError:
    """A 400 for a request the proxy refuses before any upstream call."""
    return ProxyError(400, message, param=param, code=code)


def upstream_unreachable() -> ProxyError:
    """502: the upstream could not be reached (its address is not disclosed)."""
    return ProxyError(502, "the upstream model server could not be reached",
                      type="upstream_error", code="upstream_unreachable")


def upstream_timeout(seconds: float) -> ProxyError:
    """504: the upstream sent nothing for ``seconds``."""
    return ProxyError(504, f"the upstream model server did not answer within {seconds:g}s",
                      type="upstream_error", code="upstream_timeout")


def upstream_failed() -> ProxyError:
    """502: the upstream connection broke before an answer arrived."""
    return ProxyError(502, "the connection to the upstream model server failed",
                      type="upstream_error", code="upstream_error")


def upstream_bad_answer() -> ProxyError:
    """502: the upstream answered with a success status but a body that is not JSON."""
    return ProxyError(502, "the upstream model server sent an answer that is not valid JSON "
                      "(cut off, or not an OpenAI-compatible server)",
                      type="upstream_error", code="upstream_bad_response")


def upstream_error_status(status: int, text: str) -> ProxyError:
    """The upstream's own error status whose body was not JSON, in OpenAI's shape."""
    kind: ErrorType = ("upstream_error" if status >= 500 else
                       "authentication_error" if status == 401 else "invalid_request_error")
    detail = f": {text}" if text else ""
    return ProxyError(status, f"the upstream model server answered HTTP {status}{detail}",
                      type=kind, code="upstream_error")


def error_body(message: str, *, type: ErrorType = "invalid_request_error",
               code: str | None = None, param: str | None = None) -> dict[str, object]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(status: int, message: str, *, type: ErrorType = "invalid_request_error",
                   code: str | None = None, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """A JSON response carrying :func:`error_body`."""
    return JSONResponse(status_code=status, headers=headers,
                        content=error_body(message, type=type, code=code, param=param))
