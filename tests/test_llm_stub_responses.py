"""``ctxstack stub-llm`` speaks the OpenAI Responses wire: JSON, SSE and the WebSocket
mode, read by the official ``openai`` SDK, with the stub's scripted faults."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from websockets.sync.client import connect as ws_connect

from ctxstack.llm.stub import StubReply, StubServer


def test_json_and_stream_through_the_sdk(stub: StubServer) -> None:
    client = openai.OpenAI(base_url=stub.base_url, api_key="k", max_retries=0)
    stub.push(StubReply.text("Hello!", reasoning="why", cached_tokens=2),
              StubReply.tool_call("lookup", {"q": "x"}, call_id="call_7"))
    response = client.responses.create(model="stub-model", instructions="Be kind.",
                                       input="hi")
    assert response.output_text == "Hello!"
    assert response.output[0].type == "reasoning"
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 2
    assert stub.requests[-1].messages[0].text == "Be kind."
    with client.responses.stream(model="stub-model", input="look") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds
    assert final.output[0].type == "function_call"
    assert final.output[0].call_id == "call_7"
    stub.push(StubReply.rate_limited(retry_after=1))
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="stub-model", input="hi")
    client.close()


def test_websocket_mode(stub: StubServer) -> None:
    url = stub.base_url.replace("http://", "ws://") + "/responses"
    stub.push(StubReply.text("over the socket"), StubReply.server_error())
    with ws_connect(url) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "stub-model", "input": "hi"}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(ws.recv(timeout=10)))
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["response"]["output"][0]["content"][0]["text"] == "over the socket"
        ws.send(json.dumps({"type": "response.create", "model": "stub-model", "input": "x"}))
        error = json.loads(ws.recv(timeout=10))
        assert error["type"] == "error"
        assert error["status"] == 500
    assert stub.requests[0].transport == "websocket"
