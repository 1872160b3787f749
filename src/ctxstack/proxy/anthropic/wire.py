"""Reading an Anthropic Messages request: validate what the proxy relies on, keep the rest.

The proxy refuses, before any upstream call and naming the field, only what it must
understand to fit a conversation (a 400 in Anthropic's shape): the body is a JSON object,
``model`` a name, ``messages`` a non-empty list of ``user`` / ``assistant`` messages whose
content is a string or a list of typed blocks, ``tool_use`` blocks with an ``id`` and a
``name`` in assistant messages, ``tool_result`` blocks in user messages answering an
earlier ``tool_use``, ``system`` a string or a list of blocks, ``tools`` a list, and —
on ``/v1/messages`` — ``max_tokens`` a positive integer.

Everything else passes: block types the proxy does not know (``server_tool_use``,
``web_search_tool_result``, ``compaction``, anything new), fields on blocks and messages,
and body fields (``thinking``, ``context_management``, ``metadata``, …) are the client's
business and the upstream's, never a reason for the proxy to fail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctxstack.proxy.errors import bad_request

ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class MessagesRequest:
    """A validated Messages (or count_tokens) request: ``raw`` as received (forwarded as
    is when nothing is compacted), ``body`` decoded with its key order kept."""

    raw: bytes
    body: dict[str, Any]
    model: str
    messages: list[dict[str, Any]]

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    def with_messages(self, messages: list[dict[str, Any]]) -> bytes:
        """The body with ``messages`` replaced: every other field, ``system`` and ``tools``
        included, keeps its value and place (byte-identical JSON, whitespace aside)."""
        body = dict(self.body)
        body["messages"] = messages
        try:
            return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate the client sent escaped
            return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def parse_messages_request(raw: bytes, *, count_only: bool = False,
                           check_messages: bool = True) -> MessagesRequest:
    """Validate a ``/v1/messages`` body (``count_only``: a ``/v1/messages/count_tokens``
    body, which has no ``max_tokens``; ``check_messages=False``: the messages' contents
    are left to the caller, which knows which of them it validated before —
    :func:`validate_messages` with ``start``).

    Raises:
        ProxyError: 400 naming the field (see the module doc).
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:
        raise bad_request("the request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("model: field required (a model name string)", param="model")
    if not count_only:
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise bad_request("max_tokens: field required (a positive integer)",
                              param="max_tokens")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: field required (a non-empty list of messages)",
                          param="messages")
    system = body.get("system")
    if system is not None and not isinstance(system, str) and (
            not isinstance(system, list) or not all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in system)):
        raise bad_request("system: expected a string or a list of content blocks",
                          param="system")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("tools: expected a list of tool definitions", param="tools")
    if check_messages:
        validate_messages(messages)
    return MessagesRequest(raw, body, model, messages)


def validate_messages(messages: list[Any], start: int = 0,
                      calls: set[str] | None = None) -> None:
    """Roles, content shapes, tool_use ids and tool_result answers (see the module doc),
    from message ``start`` on: the messages before it are equal to messages this owner
    sent and the proxy validated before (:mod:`ctxstack.proxy.unit_memo`); ``calls``:
    the ids of their ``tool_use`` blocks (added to)."""
    calls = set() if calls is None else calls
    for i in range(start, len(messages)):
        m = messages[i]
        # Runs over the whole resent history on every request: the common message (a
        # string, or text blocks) costs a few dictionary reads; names are built on error.
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role in ROLES and isinstance(content, str):
            continue
        where = f"messages.{i}"
        if not isinstance(m, dict):
            raise bad_request(f"{where}: expected an object, got {type(m).__name__}",
                              param=where)
        if role not in ROLES:
            raise bad_request(f"{where}.role: expected 'user' or 'assistant', got {role!r}",
                              param=f"{where}.role")
        if not isinstance(content, list):
            raise bad_request(f"{where}.content: expected a string or a list of content "
                              "blocks", param=f"{where}.content")
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                continue
            at = f"{where}.content.{j}"
            if not isinstance(kind, str):
                raise bad_request(f"{at}: expected a content block (an object with a "
                                  "'type')", param=at)
            if kind == "text":
                raise bad_request(f"{at}.text: expected a string", param=f"{at}.text")
            elif kind == "tool_use":
                if role != "assistant":
                    raise bad_request(f"{at}: tool_use blocks belong in assistant messages",
                                      param=at)
                if not isinstance(block.get("id"), str) or not block["id"]:
                    raise bad_request(f"{at}.id: expected the tool call's id (a string)",
                                      param=f"{at}.id")
                if not isinstance(block.get("name"), str) or not block["name"]:
                    raise bad_request(f"{at}.name: expected the tool's name (a string)",
                                      param=f"{at}.name")
                calls.add(block["id"])
            elif kind == "tool_result":
                if role != "user":
                    raise bad_request(f"{at}: tool_result blocks belong in user messages",
                                      param=at)
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str) or not call_id:
                    raise bad_request(f"{at}.tool_use_id: expected the id of the tool_use "
                                      "it answers", param=f"{at}.tool_use_id")
                if call_id not in calls:
                    raise bad_request(f"{at}.tool_use_id: no earlier tool_use block has the "
                                      f"id {call_id!r}", param=f"{at}.tool_use_id")
