"""The proxy learns how many tokens the upstream counts for what it estimated, per model.

A model counted by the heuristic (no tokenizer offline: Claude, Gemini…) may need more
tokens for the same text than the ``o200k_base`` the heuristic models; fitted by the
estimate alone, its requests can overflow the real window. The upstream reports what it
counted, and budgets are divided by the learnt ratio (:mod:`ctxstack.proxy.scales`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from ctxstack.llm.stub import StubReply, StubRequest, StubServer
from ctxstack.llm.stub.anthropic import input_tokens
from ctxstack.messages import ChatMessage
from ctxstack.proxy import ProxySettings, parse_compaction_header
from ctxstack.proxy.anthropic import count_request
from ctxstack.proxy.counting import ModelCounters
from ctxstack.proxy.fitting import Fit
from ctxstack.proxy.recall import UpstreamUsage
from ctxstack.proxy.scales import (
    DEAD_BAND,
    MAX_MODELS,
    MAX_SCALE,
    MIN_TOKENS,
    SMOOTHING,
    TokenScales,
    prompt_tokens,
)
from ctxstack.tokens import DEFAULT_COUNTER, HEURISTIC, BaseCounter
from tests.proxy_support import app_client, is_summary_request


class Exact(BaseCounter):
    """A counter that claims to be exact (margin 0), as a model's own tokenizer is."""

    margin = 0.0

    @property
    def cache_key(self) -> str:
        return "exact-words"

    def count_text(self, text: str) -> int:
        return len(text.split())


def fit(tokens: int) -> Fit:
    return Fit(None, "none", 3, 3, 0, tokens, tokens, counter="bpe-heuristic")


def usage(prompt: int, **kw: int) -> UpstreamUsage:
    return UpstreamUsage(input_tokens=prompt, output_tokens=10, calls=1, **kw)


def estimating() -> TokenScales:
    return TokenScales(ModelCounters(fixed=DEFAULT_COUNTER))


def test_the_first_answer_sets_the_scale_and_later_ones_move_it_smoothly() -> None:
    scales = estimating()
    assert scales.scale("claude-x") == 1.0
    assert scales.budget("claude-x", 100_000) == 100_000
    assert scales.observe("anthropic", "claude-x", fit(10_000), usage(13_000))
    assert scales.scale("claude-x") == pytest.approx(1.3)
    assert scales.budget("claude-x", 100_000) == int(100_000 / 1.3)
    assert scales.observe("anthropic", "claude-x", fit(10_000), usage(12_000))
    assert scales.scale("claude-x") == pytest.approx(1.3 + SMOOTHING * (1.2 - 1.3))
    assert scales.samples("claude-x") == 2
    assert scales.scale("other-model") == 1.0  # per model name


def test_the_scale_only_ever_shrinks_budgets() -> None:
    """Upward only: a model that needs fewer tokens keeps the whole budget (the margin
    is for the estimate's own scatter), and a ratio within the dead band changes nothing."""
    scales = estimating()
    assert scales.observe("chat", "fewer", fit(10_000), usage(8_000))
    assert scales.scale("fewer") == 1.0
    assert scales.budget("fewer", 50_000) == 50_000
    assert scales.observe("chat", "close", fit(10_000), usage(int(10_000 * (1 + DEAD_BAND)) - 1))
    assert scales.scale("close") == 1.0
    assert scales.budget("tiny", 1) == 1


@pytest.mark.parametrize(("why", "sample"), [
    ("recall rounds: usage of several calls", dict(rounds=1)),
    ("several calls summed", dict(answer=UpstreamUsage(input_tokens=26_000, calls=2))),
    ("a small request", dict(estimated=MIN_TOKENS - 1, answer=usage(MIN_TOKENS * 2))),
    ("no usage reported", dict(answer=usage(0))),
    ("an absurd ratio", dict(answer=usage(int(10_000 * MAX_SCALE) + 10))),
    ("a fit that failed (nothing estimated)", dict(estimated=0)),
    ("no fit", dict(no_fit=True)),
])
def test_what_is_not_a_sample(why: str, sample: dict[str, Any]) -> None:
    scales = estimating()
    taken = scales.observe(
        "chat", "m", None if sample.get("no_fit") else fit(sample.get("estimated", 10_000)),
        sample.get("answer", usage(13_000)), sample.get("rounds", 0))
    assert not taken, why
    assert scales.scale("m") == 1.0
    assert scales.samples("m") == 0


def test_a_model_counted_by_its_own_tokenizer_is_never_scaled() -> None:
    scales = TokenScales(ModelCounters(fixed=Exact()))
    assert not scales.observe("chat", "gpt-x", fit(10_000), usage(13_000))
    assert scales.budget("gpt-x", 100_000) == 100_000


def test_disabled_learns_nothing() -> None:
    scales = TokenScales(ModelCounters(fixed=DEFAULT_COUNTER), enabled=False)
    assert not scales.observe("chat", "m", fit(10_000), usage(13_000))
    assert scales.budget("m", 100_000) == 100_000


def test_anthropic_reports_the_cached_part_of_the_prompt_apart() -> None:
    answer = usage(1_000, cache_read_tokens=11_000, cache_write_tokens=1_000)
    assert prompt_tokens("anthropic", answer) == 13_000
    assert prompt_tokens("chat", usage(13_000, cache_read_tokens=11_000)) == 13_000
    scales = estimating()
    scales.observe("anthropic", "claude-x", fit(10_000), answer)
    assert scales.scale("claude-x") == pytest.approx(1.3)


def test_model_names_are_bounded() -> None:
    scales = estimating()
    for i in range(MAX_MODELS + 5):
        scales.observe("chat", f"client-chosen-{i}", fit(10_000), usage(13_000))
    # Past the bound the map was cleared: the first names are forgotten, the last kept.
    assert scales.scale("client-chosen-0") == 1.0
    assert scales.scale(f"client-chosen-{MAX_MODELS + 4}") == pytest.approx(1.3)


# ------------------------------------------------------------------ a proxy in process
BUDGET = 20_000
MODEL = "claude-scaled"
WIDER = 1.3
"""How many more tokens the stub's "model" counts than the heuristic: another vocabulary."""


def wider_tokenizer(request: StubRequest) -> StubReply:
    """The stub as a model whose tokenizer needs 30% more tokens than the estimate."""
    if is_summary_request(request):
        return StubReply.text("Summary: the logs so far were routine.")
    whole = int(input_tokens(request.body, request.messages) * WIDER)
    body = {"id": "msg_scaled", "type": "message", "role": "assistant", "model": MODEL,
            "content": [{"type": "text", "text": "Noted."}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": whole - 400, "cache_read_input_tokens": 300,
                      "cache_creation_input_tokens": 100, "output_tokens": 3}}
    return StubReply(raw_body=json.dumps(body))


def turns_of(tokens: int, tag: str) -> list[dict[str, str]]:
    """A system prompt and user and assistant turns the heuristic counts at about
    ``tokens``, ending with a question."""
    turns: list[dict[str, str]] = [{"role": "system", "content": "You watch the logs."}]
    day = 0
    while HEURISTIC.count_messages([ChatMessage(role=t["role"], content=t["content"])
                                    for t in turns]) < tokens:
        line = f"{tag} day {day}: " + " ".join(
            f"crate {day}-{i} left bay {i % 7} at {8 + i % 9}:{i % 60:02d}" for i in range(25))
        turns += [{"role": "user", "content": line},
                  {"role": "assistant", "content": f"Day {day} logged."}]
        day += 1
    turns.append({"role": "user", "content": "Anything unusual?"})
    return turns


def request_of(tokens: int, tag: str) -> dict[str, Any]:
    """A Messages body of about ``tokens``."""
    turns = turns_of(tokens, tag)
    return {"model": MODEL, "max_tokens": 64, "system": turns[0]["content"],
            "messages": turns[1:]}


def check_outcome(response: httpx.Response, forwarded: list[StubRequest],
                  count: Callable[[StubRequest], int], learn: bool) -> None:
    """Learning: the request was compacted to fit the model's count (``count`` × WIDER);
    off: it went out as sent, over the budget by that count."""
    method = parse_compaction_header(response.headers["x-ctxstack-compaction"])["method"]
    sent = [q for q in forwarded if not is_summary_request(q)][-1]
    counted = count(sent) * WIDER
    if learn:
        assert method != "none"
        assert counted <= BUDGET
    else:
        assert method == "none"
        assert counted > BUDGET


def settings(db: str, stub: StubServer, *, learn: bool) -> ProxySettings:
    return ProxySettings(upstream=stub.base_url, anthropic_upstream=stub.url,
                         database_url=db, learn_scale=learn,
                         budget_env={"LLM_CONTEXT_SIZE": str(BUDGET + 1000),
                                     "LLM_MAX_OUTPUT_TOKENS": "1000"})


@pytest.mark.parametrize("learn", [True, False], ids=["learning", "off"])
async def test_after_one_answer_requests_fit_the_upstreams_count(
        proxy_db_url: str, stub: StubServer, learn: bool) -> None:
    """One answer of a model that counts 30% more teaches the proxy; the next request,
    within the budget by the estimate less its margin but over it by the model's count,
    is compacted to fit the model's count. With learning off it goes out as sent."""
    stub.rule = wider_tokenizer
    headers = {"x-api-key": "sk-ant-scaled", "anthropic-version": "2023-06-01"}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, settings(proxy_db_url, stub, learn=learn))
        first = await client.post("/v1/messages", json=request_of(3_000, "warm-up"),
                                  headers={**headers, "x-ctxstack-session": "a"})
        assert first.status_code == 200, first.text
        big = request_of(int(BUDGET * 0.85), "main")
        assert count_request(big, DEFAULT_COUNTER) * WIDER > BUDGET  # over, as counted
        seen = len(stub.requests)
        r = await client.post("/v1/messages", json=big,
                              headers={**headers, "x-ctxstack-session": "b"})
        assert r.status_code == 200, r.text
    check_outcome(r, stub.requests[seen:], lambda q: input_tokens(q.body, q.messages), learn)


def wider_on(wire: str) -> Any:
    """:func:`wider_tokenizer` for the Chat or the Responses wire."""
    def rule(request: StubRequest) -> StubReply:
        if is_summary_request(request):
            return StubReply.text("Summary: the logs so far were routine.")
        prompt = int(HEURISTIC.count_messages(request.messages) * WIDER)
        if wire == "chat":
            body: dict[str, Any] = {
                "id": "chatcmpl-scaled", "object": "chat.completion", "created": 0,
                "model": MODEL, "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant",
                                                         "content": "Noted."}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 2,
                          "total_tokens": prompt + 2}}
        else:
            body = {
                "id": f"resp_scaled_{len(request.messages)}", "object": "response",
                "created_at": 0, "status": "completed", "model": MODEL,
                "output": [{"type": "message", "id": "msg_scaled", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": "Noted.",
                                         "annotations": []}]}],
                "usage": {"input_tokens": prompt, "output_tokens": 2,
                          "total_tokens": prompt + 2,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
        return StubReply(raw_body=json.dumps(body))
    return rule


def body_on(wire: str, turns: list[dict[str, str]]) -> tuple[str, dict[str, Any]]:
    if wire == "chat":
        return "/v1/chat/completions", {"model": MODEL, "messages": turns}
    return "/v1/responses", {"model": MODEL, "instructions": turns[0]["content"],
                             "input": turns[1:]}


@pytest.mark.parametrize("learn", [True, False], ids=["learning", "off"])
@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_the_chat_and_responses_wires_learn_the_scale_too(
        proxy_db_url: str, stub: StubServer, wire: str, learn: bool) -> None:
    stub.rule = wider_on(wire)
    headers = {"authorization": "Bearer sk-scaled"}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, settings(proxy_db_url, stub, learn=learn))
        path, warm = body_on(wire, turns_of(3_000, "warm-up"))
        first = await client.post(path, json=warm, headers=headers)
        assert first.status_code == 200, first.text
        path, big = body_on(wire, turns_of(int(BUDGET * 0.85), "main"))
        seen = len(stub.requests)
        r = await client.post(path, json=big, headers=headers)
        assert r.status_code == 200, r.text
    check_outcome(r, stub.requests[seen:], lambda q: HEURISTIC.count_messages(q.messages),
                  learn)


@pytest.mark.parametrize("reported", [10**30, -5, "many", None, 2.5e9, True],
                         ids=["huge", "negative", "text", "null", "float", "bool"])
async def test_an_upstreams_absurd_usage_teaches_nothing_and_breaks_nothing(
        proxy_db_url: str, stub: StubServer, reported: object) -> None:
    """Whatever the upstream writes in ``usage``, the answer reaches the client and the
    model's budget stays as it was: the next request, within it by the estimate, goes out
    as sent."""
    def rule(request: StubRequest) -> StubReply:
        body = {"id": "msg_odd", "type": "message", "role": "assistant", "model": MODEL,
                "content": [{"type": "text", "text": "Noted."}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": reported, "output_tokens": 3}}
        return StubReply(raw_body=json.dumps(body))

    stub.rule = rule
    headers = {"x-api-key": "sk-ant-odd", "anthropic-version": "2023-06-01"}
    async with AsyncExitStack() as stack:
        client = await app_client(stack, settings(proxy_db_url, stub, learn=True))
        first = await client.post("/v1/messages", json=request_of(3_000, "warm-up"),
                                  headers=headers)
        assert first.status_code == 200, first.text
        assert first.json()["content"][0]["text"] == "Noted."
        r = await client.post("/v1/messages", json=request_of(int(BUDGET * 0.85), "main"),
                              headers=headers)
        assert r.status_code == 200, r.text
        # The stats were written to the database (a 10**30 once made every write fail).
        stats = (await client.get("/ctxstack/stats")).json()
        assert stats["scope"] == "all"
    assert parse_compaction_header(r.headers["x-ctxstack-compaction"])["method"] == "none"
