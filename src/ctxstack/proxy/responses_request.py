"""Reading a ``/v1/responses`` request (an HTTP body or a WebSocket ``response.create``
frame): validate what an upstream would refuse anyway, before any upstream call.

A 400 in OpenAI's error shape names the field (``param``): not JSON, no ``model``, an
``input`` that is neither a string nor a list, an item that is not an object, a message
with an unknown role or no content, a function or custom tool call without its
``call_id``/``name``, an output without its ``call_id``, and — over the whole
conversation the upstream would see (the stored chain behind ``previous_response_id``
plus the new items) — a ``function_call`` / ``custom_tool_call`` without its output item
or an output without its call. Everything else (``reasoning``, provider ``compaction``,
hosted tool calls, item types this proxy has never heard of, unknown body fields) is not
judged: it passes through.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack.proxy.errors import bad_request

MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
CALL_OUTPUTS = {"function_call": "function_call_output",
                "custom_tool_call": "custom_tool_call_output"}
OUTPUT_CALLS = {v: k for k, v in CALL_OUTPUTS.items()}


class ResponsesRequest:
    """A validated Responses request.

    ``raw`` is the body as received (forwarded unchanged when nothing needs changing; for
    a WebSocket frame, the frame's fields without ``type``, serialised once), ``body``
    the decoded object (field order kept), ``input`` the input items (a string input is
    one user message).
    """

    __slots__ = ("body", "input", "input_is_text", "model", "previous_id", "raw", "store",
                 "stream")

    def __init__(self, raw: bytes, body: dict[str, Any]) -> None:
        self.raw = raw
        self.body = body
        self.model: str = body["model"]
        self.stream = bool(body.get("stream"))
        self.store = body.get("store") is not False
        prev = body.get("previous_response_id")
        self.previous_id: str | None = prev if isinstance(prev, str) and prev else None
        value = body.get("input")
        self.input_is_text = isinstance(value, str)
        self.input: list[dict[str, Any]] = (
            [{"role": "user", "content": value}] if isinstance(value, str)
            else list(value) if isinstance(value, list) else [])

    @property
    def instructions(self) -> object:
        return self.body.get("instructions")

    def with_input(self, items: list[dict[str, Any]], *, stream: bool | None = None) -> bytes:
        """The body with ``input`` replaced and ``previous_response_id`` removed (every
        other field, and its order, kept; ``stream`` forced when given)."""
        body = {k: v for k, v in self.body.items() if k != "previous_response_id"}
        body["input"] = items
        if stream is not None:
            body["stream"] = stream
        return dump(body)

    def forced_stream(self) -> bytes:
        """The body as received, with ``stream: true`` (WebSocket frames go upstream as
        an SSE request)."""
        if self.body.get("stream") is True:
            return self.raw
        return dump({**self.body, "stream": True})


def dump(body: object) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate the client sent escaped
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def parse_body(raw: bytes) -> dict[str, Any]:
    """Decode an HTTP body (400 unless a JSON object)."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def parse_responses(raw: bytes, body: dict[str, Any] | None = None, *,
                    check_items: bool = True) -> ResponsesRequest:
    """Validate a Responses body (``body``: already decoded, e.g. from a frame;
    ``check_items=False``: the input items' shapes are left to the caller, which knows
    which of them it validated before — :func:`validate_items` with ``start``).

    Raises:
        ProxyError: 400 naming the field (see the module doc).
    """
    body = parse_body(raw) if body is None else body
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' is required (a model name string)", param="model")
    value = body.get("input")
    if value is not None and not isinstance(value, str | list):
        raise bad_request("'input' must be a string or a list of input items", param="input")
    prev = body.get("previous_response_id")
    if prev is not None and not isinstance(prev, str):
        raise bad_request("'previous_response_id' must be a string",
                          param="previous_response_id")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str | list):
        raise bad_request("'instructions' must be a string", param="instructions")
    request = ResponsesRequest(raw, body)
    if check_items:
        validate_items(request.input)
    return request


def validate_items(items: Sequence[object], start: int = 0) -> None:
    """Each item's own shape (pairing is :func:`validate_pairs`, over the whole chain),
    from ``start`` on (the items before it are equal to items this owner sent and the
    proxy validated before: :mod:`ctxstack.proxy.unit_memo`).

    Runs over the whole resent input on every request: the field path of an error is only
    formatted when there is one, and decoded JSON objects (dicts) skip the ABC check."""
    for i in range(start, len(items)):
        item = items[i]
        if isinstance(item, dict) and item.get("type", "message") == "message" and (
                item.get("role") in MESSAGE_ROLES):
            # The common item, a message, in a few dictionary reads.
            content = item.get("content")
            if isinstance(content, str) or (isinstance(content, list) and all(
                    isinstance(p, dict) for p in content)):
                continue
        if not isinstance(item, (dict, Mapping)):
            raise bad_request(f"input[{i}]: expected an object, got {type(item).__name__}",
                              param=f"input[{i}]")
        kind = item.get("type", "message" if "role" in item else None)
        if kind is None:
            raise bad_request(f"input[{i}]: an input item needs a 'type' (or a 'role')",
                              param=f"input[{i}].type")
        if not isinstance(kind, str):
            raise bad_request(f"input[{i}].type: expected a string", param=f"input[{i}].type")
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise bad_request(f"input[{i}].role: unknown role {role!r} (expected one of "
                                  f"{', '.join(sorted(MESSAGE_ROLES))})",
                                  param=f"input[{i}].role")
            content = item.get("content")
            if not isinstance(content, (str, list)):
                raise bad_request(f"input[{i}].content: expected a string or a list of parts",
                                  param=f"input[{i}].content")
            if isinstance(content, list) and not all(
                    isinstance(p, (dict, Mapping)) for p in content):
                raise bad_request(f"input[{i}].content: every part must be an object",
                                  param=f"input[{i}].content")
        elif kind in CALL_OUTPUTS:
            for key, expected in (("call_id", "a non-empty string"), ("name", "a string")):
                if not isinstance(item.get(key), str) or (key == "call_id" and not item[key]):
                    raise bad_request(f"input[{i}].{key}: expected {expected}",
                                      param=f"input[{i}].{key}")
            field = "arguments" if kind == "function_call" else "input"
            if not isinstance(item.get(field), str):
                raise bad_request(f"input[{i}].{field}: expected a string",
                                  param=f"input[{i}].{field}")
        elif kind in OUTPUT_CALLS:
            if not isinstance(item.get("call_id"), str) or not item["call_id"]:
                raise bad_request(f"input[{i}].call_id: expected a non-empty string",
                                  param=f"input[{i}].call_id")
            if not isinstance(item.get("output"), (str, list)):
                raise bad_request(f"input[{i}].output: expected a string or a list",
                                  param=f"input[{i}].output")


def validate_pairs(chain: Sequence[Mapping[str, Any]] | None,
                   items: Sequence[Mapping[str, Any]]) -> None:
    """Every function / custom tool call has its output item and every output its call,
    over ``chain`` (the stored conversation before ``items``; ``None``: unknown, so an
    output may answer a call this proxy never saw) followed by ``items``.

    Raises:
        ProxyError: 400 naming the first offending item.
    """
    calls: dict[tuple[str, str], str] = {}  # (call type, call_id) -> where
    for item in chain or ():
        kind = item.get("type")
        if kind in CALL_OUTPUTS:
            calls[(kind, str(item.get("call_id")))] = "an earlier response"
        elif kind in OUTPUT_CALLS:
            calls.pop((OUTPUT_CALLS[kind], str(item.get("call_id"))), None)
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind in CALL_OUTPUTS:
            calls[(kind, str(item["call_id"]))] = f"input[{i}]"
        elif kind in OUTPUT_CALLS:
            key = (OUTPUT_CALLS[kind], str(item["call_id"]))
            if key not in calls and chain is not None:
                raise bad_request(
                    f"input[{i}]: no {key[0]} item with call_id {key[1]!r} precedes this "
                    f"{kind}", param=f"input[{i}].call_id")
            calls.pop(key, None)
    for (kind, call_id), where in calls.items():
        param = where if where.startswith("input[") else "input"
        raise bad_request(f"{where}: no {CALL_OUTPUTS[kind]} item answers the {kind} with "
                          f"call_id {call_id!r}", param=param)
