"""The stub's OpenAI Responses wire: ``POST /v1/responses`` (JSON or SSE) and its WebSocket.

What a client of the Responses API sees from OpenAI, generated from the same scripted
:class:`~ctxstack.llm.stub.StubReply` the chat route answers with:

* **JSON** — a ``response`` object: ``output`` holds a ``reasoning`` item (when the reply
  has :attr:`~ctxstack.llm.stub.StubReply.reasoning`; its ``encrypted_content`` is that
  text in base64), then one ``function_call`` item per tool call, or one assistant
  ``message`` with an ``output_text`` part; ``usage`` with ``input_tokens_details.
  cached_tokens``.
* **SSE** (``stream: true``) — the real event sequence: ``response.created``,
  ``response.in_progress``, per output item ``response.output_item.added`` (then for a
  message ``response.content_part.added``, ``response.output_text.delta``…,
  ``response.output_text.done``, ``response.content_part.done``; for a function call
  ``response.function_call_arguments.delta``…, ``.done``) and ``response.output_item.done``,
  then ``response.completed``; each as ``event: TYPE`` + ``data: JSON`` with a growing
  ``sequence_number``.
* **WebSocket** at ``/v1/responses`` — each client text frame ``{"type":
  "response.create", …request fields…}`` is answered with the same events as the SSE
  stream, one JSON text frame each; an error (a scripted fault, a frame that is not a
  ``response.create``) is one ``{"type": "error", "status": N, "error": {…}, "headers":
  {…}}`` frame, the shape Codex reads. ``generate: false`` (Codex's pre-warm) answers an
  empty completed response.

The request's ``instructions`` and ``input`` items are also read as chat messages
(:func:`input_messages`, best effort) so the same rules script both wires.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ctxstack.errors import MessageError
from ctxstack.llm.stub.replies import StubReply, StubRequest, ids, stub_usage
from ctxstack.messages import ChatMessage, ToolCall

PATH = "/v1/responses"


def input_messages(body: Mapping[str, Any]) -> tuple[ChatMessage, ...]:
    """``instructions`` and ``input`` as chat messages (items it cannot read are skipped:
    the stub scripts answers, it does not validate)."""
    out: list[ChatMessage] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append(ChatMessage.system(instructions))
    raw = body.get("input")
    items: Sequence[Any] = ([{"role": "user", "content": raw}] if isinstance(raw, str)
                            else raw if isinstance(raw, list) else [])
    for item in items:
        if not isinstance(item, Mapping):
            continue
        try:
            message = _message(item)
        except (MessageError, ValueError, TypeError):
            continue
        if message is not None:
            out.append(message)
    return tuple(out)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def _message(item: Mapping[str, Any]) -> ChatMessage | None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        role = "system" if role == "developer" else role
        if role not in ("system", "user", "assistant"):
            return None
        return ChatMessage(role=role, content=_text(item.get("content")))
    if kind in ("function_call", "custom_tool_call"):
        raw = item.get("arguments") if kind == "function_call" else item.get("input")
        try:
            args = json.loads(raw) if kind == "function_call" and isinstance(raw, str) else None
        except json.JSONDecodeError:
            args = None
        arguments = args if isinstance(args, dict) else {"_raw": raw}
        return ChatMessage(role="assistant", content=None, tool_calls=[ToolCall(
            id=str(item.get("call_id")), name=str(item.get("name")), arguments=arguments)])
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        return ChatMessage(role="tool", tool_call_id=str(item.get("call_id")),
                           content=output if isinstance(output, str) else _text(output))
    return None


# --------------------------------------------------------------------------- answers
def output_items(reply: StubReply, *, generate: bool = True) -> list[dict[str, Any]]:
    """The ``output`` of a completed response answering with ``reply``."""
    if not generate:
        return []
    items: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        items.append({"id": f"rs_stub_{next(ids)}", "type": "reasoning", "summary": [],
                      "encrypted_content": base64.b64encode(
                          reply.reasoning.encode("utf-8")).decode("ascii")})
    for call in reply.tool_calls:
        items.append({"id": f"fc_stub_{next(ids)}", "type": "function_call",
                      "status": "completed", "arguments": call.arguments_text,
                      "call_id": call.id or f"call_stub_{next(ids)}", "name": call.name})
    if reply.content is not None or not reply.tool_calls:
        items.append({"id": f"msg_stub_{next(ids)}", "type": "message", "status": "completed",
                      "role": "assistant", "content": [{
                          "type": "output_text", "text": reply.content or "",
                          "annotations": [], "logprobs": []}]})
    return items


def response_object(model: str, request: StubRequest, *, rid: str, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    ) -> dict[str, Any]:
    body = request.body
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": status,
        "background": False, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": str(body.get("model") or model), "output": output,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": bool(body.get("store", True)), "temperature": 1.0,
        "text": {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [], "top_p": 1.0, "truncation": "disabled",
        "usage": usage, "user": None, "metadata": body.get("metadata") or {},
    }


def usage_json(request: StubRequest, reply: StubReply, *, generate: bool = True,
               ) -> dict[str, Any] | None:
    if not reply.include_usage:
        return None
    prompt, completion = stub_usage(request.messages, reply.content if generate else "",
                                    reply.tool_calls if generate else ())
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion}


def completed_json(model: str, request: StubRequest, reply: StubReply) -> dict[str, Any]:
    """The non-streamed answer: a completed ``response`` object (``model``: the name
    answered when the request names none)."""
    generate = request.body.get("generate") is not False
    return response_object(model, request, rid=f"resp_stub_{next(ids)}", status="completed",
                           output=output_items(reply, generate=generate),
                           usage=usage_json(request, reply, generate=generate))


def stream_events(model: str, request: StubRequest, reply: StubReply,
                  ) -> list[dict[str, Any]]:
    """Every event of a streamed answer, in order (``response.completed`` last)."""
    generate = request.body.get("generate") is not False
    rid = f"resp_stub_{next(ids)}"
    output = output_items(reply, generate=generate)
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    start = response_object(model, request, rid=rid, status="in_progress", output=[],
                            usage=None)
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    size = max(1, reply.chunk_size)
    for index, item in enumerate(output):
        iid = item["id"]
        if item["type"] == "message":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            text = item["content"][0]["text"]
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit("response.content_part.added", item_id=iid, output_index=index,
                 content_index=0, part=empty)
            for i in range(0, len(text), size):
                emit("response.output_text.delta", item_id=iid, output_index=index,
                     content_index=0, delta=text[i:i + size], logprobs=[])
            emit("response.output_text.done", item_id=iid, output_index=index,
                 content_index=0, text=text, logprobs=[])
            emit("response.content_part.done", item_id=iid, output_index=index,
                 content_index=0, part=item["content"][0])
        elif item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "arguments": ""})
            args = item["arguments"]
            for i in range(0, len(args), 16):
                emit("response.function_call_arguments.delta", item_id=iid,
                     output_index=index, delta=args[i:i + 16])
            emit("response.function_call_arguments.done", item_id=iid, output_index=index,
                 name=item["name"], arguments=args)
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    done = response_object(model, request, rid=rid, status="completed", output=output,
                           usage=usage_json(request, reply, generate=generate))
    emit("response.completed", response=done)
    return events


def error_event(status: int, error: Mapping[str, Any],
                headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The WebSocket error frame (Codex reads ``status``, ``error`` and ``headers``)."""
    return {"type": "error", "status": status, "error": dict(error),
            "headers": dict(headers or {})}


def sse_frame(event: dict[str, Any]) -> bytes:
    """One event as a Server-Sent Event (``event:`` its type, ``data:`` its JSON)."""
    return (f"event: {event['type']}\ndata: "
            f"{json.dumps(event, ensure_ascii=False)}\n\n").encode()
