"""Helpers for the Responses-wire proxy tests: what a forwarded body holds, counted and
checked as the proxy counts and the upstream checks it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import openai

from ctxstack.llm.stub import StubRequest
from ctxstack.proxy import parse_compaction_header
from ctxstack.proxy.responses_view import count_tokens, schema_tokens, side
from ctxstack.tokens import DEFAULT_COUNTER
from tests.proxy_support import is_summary_request

MODEL = "stub-model"
BUDGET = 4_000
"""The input budget the tests' proxies are given (a 5,000-token window, 1,000 kept for
the answer)."""


def input_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A body's ``input`` as items (a string is one user message)."""
    value = body.get("input")
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value or [])


def body_tokens(body: Mapping[str, Any]) -> int:
    """The proxy's count of a forwarded body (the default counter: the stub's model)."""
    return count_tokens(input_items(body), body.get("instructions"),
                        schema_tokens(body, DEFAULT_COUNTER), DEFAULT_COUNTER)


def model_turns(items: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """The model's turns: maximal runs of assistant-side items, each as its JSON texts."""
    runs: list[list[str]] = []
    previous = False
    for item in items:
        mine = side(item) == "assistant"
        if mine:
            if not previous:
                runs.append([])
            runs[-1].append(json.dumps(item))
        previous = mine
    return [tuple(r) for r in runs]


def check_turns(forwarded: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    """Every turn of the model forwarded is one of the client's, whole: its reasoning,
    calls and message byte-identical (key order included), contiguous and in order."""
    own = set(model_turns(history))
    for turn in model_turns(forwarded):
        assert turn in own, turn


def forwarded(requests: list[StubRequest]) -> list[StubRequest]:
    """The client's requests as the upstream got them (not the proxy's summary calls)."""
    return [r for r in requests if r.path == "/v1/responses" and not is_summary_request(r)]


class ResendingClient:
    """A Responses client that resends its whole history on every call, as Codex does
    over HTTP: each turn is a user message, then the model's output, and while the model
    calls tools, their outputs (``output_for(call)``) and the next call.

    ``sent``: the input of every call; ``methods``: each answer's
    ``x-ctxstack-compaction`` method; ``texts``: each answer's body as received.
    """

    def __init__(self, client: openai.OpenAI, **fields: Any) -> None:
        self.client = client
        self.fields = fields
        self.history: list[dict[str, Any]] = []
        self.sent: list[list[dict[str, Any]]] = []
        self.methods: list[str] = []
        self.texts: list[str] = []

    def _call(self) -> Any:
        self.sent.append(list(self.history))
        raw = self.client.responses.with_raw_response.create(
            input=self.history, **self.fields)  # type: ignore[arg-type]
        self.methods.append(
            parse_compaction_header(raw.headers["x-ctxstack-compaction"])["method"])
        self.texts.append(raw.text)
        return raw.parse()

    def turn(self, question: str, output_for: Callable[[dict[str, Any]], str]) -> None:
        self.history.append({"role": "user", "content": question})
        response = self._call()
        while True:
            output = [o.model_dump(exclude_none=True) for o in response.output]
            self.history.extend(output)
            calls = [o for o in output if o["type"] == "function_call"]
            if not calls:
                return
            self.history += [{"type": "function_call_output", "call_id": c["call_id"],
                              "output": output_for(c)} for c in calls]
            response = self._call()
