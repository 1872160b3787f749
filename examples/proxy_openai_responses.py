"""The OpenAI Responses API through ``ctxstack proxy``: HTTP, streaming and WebSocket.

What Codex and any ``client.responses`` user does, with only ``base_url`` changed: a
request within budget goes out as sent; a conversation continued with
``previous_response_id`` (only the new items sent) is expanded by the proxy and fitted
into the budget, so the upstream never sees more; the WebSocket mode
(``client.responses.connect()``) works the same way.

Runs offline like ``proxy_openai_sdk.py`` (a ``ctxstack stub-llm`` and a proxy started
here unless ``CTXSTACK_EXAMPLE_BASE_URL`` / ``CTXSTACK_EXAMPLE_PROXY_URL`` are set).

    python examples/proxy_openai_responses.py
"""

# expect: websocket answer:

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import httpx
import openai
from proxy_openai_sdk import FILLER, proxy_url


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp, proxy_url(Path(tmp)) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="any-key-on-loopback")
        model = client.models.list().data[0].id

        first = client.responses.with_raw_response.create(model=model, input="Hello!")
        print("short request:", first.headers["x-ctxstack-compaction"])
        print("  answer:", first.parse().output_text)

        # A long chain: each request sends only its new item and previous_response_id.
        previous = first.parse().id
        for i in range(40):
            raw = client.responses.with_raw_response.create(
                model=model, previous_response_id=previous, store=False,
                input=[{"role": "user", "content": f"Turn {i}: {FILLER}"}])
            previous = raw.parse().id
        print("after 40 turns:", raw.headers["x-ctxstack-compaction"],
              "| estimated input tokens:", raw.headers["x-ctxstack-input-tokens-estimated"])
        if "method=none" in raw.headers["x-ctxstack-compaction"]:
            print("expected the long chain to be compacted", file=sys.stderr)
            return 1

        text = ""
        with client.responses.stream(model=model, input="Stream this, please.") as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    text += event.delta
        print("streamed:", text)

        with client.responses.connect() as connection:
            connection.response.create(model=model, input="Over the WebSocket, please.",
                                       store=False)
            for event in connection:
                if event.type == "response.completed":
                    print("websocket answer:", event.response.output_text)
                    break
                if event.type == "error":
                    print("websocket error:", event, file=sys.stderr)
                    return 1
        stats = httpx.get(base_url.removesuffix("/v1") + "/ctxstack/stats").json()
        print("responses stats:", stats["by_model"].get("responses"))
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
