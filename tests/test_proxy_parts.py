"""``ctxstack proxy`` with audio and file parts: forwarded untouched when they fit, kept
byte-identical or dropped with their message when the request must be compacted.

A real proxy process in front of the stub (real HTTP on loopback). Budget: 31,000 − 1,000
= 30,000 input tokens (a file referenced by id alone is estimated at 15,650). The stub
records the raw body the upstream received.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from ctxstack.llm.stub import StubServer
from ctxstack.proxy import parse_compaction_header
from ctxstack.tokens._parts import MP3_BYTES_PER_SECOND
from tests.proxy_support import (
    ProxyProcess,
    is_summary_body,
    running_proxy,
    tool_sequence_problems,
)

MODEL = "stub-model"
FILL = "The contract for order #A-1042 runs 30 days from 2026-03-04; keep every figure. "


@pytest.fixture(scope="module")
def proxy(stub_server: StubServer, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[ProxyProcess]:
    env = {"LLM_API_KEY": "upstream-key", "LLM_CONTEXT_SIZE": "31000",
           "LLM_MAX_OUTPUT_TOKENS": "1000", "FAST_LLM_TIMEOUT": "10"}
    with running_proxy(tmp_path_factory.mktemp("parts"), stub_server.base_url, env) as p:
        yield p


def raw_bodies(stub: StubServer) -> list[str]:
    """The raw chat-completion bodies that reached the upstream (summariser calls left out)."""
    records = httpx.get(f"{stub.url}/_stub/requests").json()["requests"]
    out = []
    for r in records:
        if not r["path"].endswith("chat/completions"):
            continue
        if not is_summary_body(json.loads(r["body"])):
            out.append(r["body"])
    return out


def post(proxy: ProxyProcess, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", content=json.dumps(body).encode(),
                      headers={"content-type": "application/json"}, timeout=60)


def mp3(seconds: float) -> str:
    return base64.b64encode(b"\xff\xfb" * int(seconds * MP3_BYTES_PER_SECOND / 2)).decode()


def pdf(kilobytes: int) -> str:
    return "data:application/pdf;base64," + base64.b64encode(
        b"%PDF-1.4\n" + bytes(range(256)) * (kilobytes * 4)).decode()


def audio_msg(text: str, data: str, fmt: str = "mp3") -> dict[str, Any]:
    return {"role": "user", "content": [
        {"type": "text", "text": text},
        {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}]}


def file_msg(text: str, file: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "file", "file": file}]}


def test_a_request_with_audio_and_files_that_fits_goes_out_byte_for_byte(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    messages = [
        {"role": "system", "content": "You transcribe and read."},
        audio_msg("What is said here?", mp3(20)),  # 160 tokens at 32 a second
        {"role": "assistant", "content": None, "audio": {"id": "audio_abc123"}},
        file_msg("And in this PDF?", {"file_data": pdf(20), "filename": "c.pdf"}),
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        file_msg("This one, then.", {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}),
    ]
    body = {"model": MODEL, "messages": messages}
    raw = json.dumps(body)
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=raw.encode(),
                          headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == 200, response.text
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header["method"] == "none"
    estimated = int(response.headers["x-ctxstack-input-tokens-estimated"])
    # the audio, the PDF page, the file reference, the replayed spoken answer
    assert estimated > 160 + 1_565 + 15_650 + 960
    assert raw_bodies(upstream) == [raw]


def test_through_the_openai_sdk(proxy: ProxyProcess, upstream: StubServer) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
    data = mp3(3)
    reply = client.chat.completions.create(model=MODEL, messages=[  # type: ignore[list-item]
        {"role": "user", "content": [
            {"type": "text", "text": "Transcribe."},
            {"type": "input_audio", "input_audio": {"data": data, "format": "mp3"}}]}])
    assert reply.choices[0].message.content == "Noted."
    (body,) = raw_bodies(upstream)
    assert json.loads(body)["messages"][0]["content"][1]["input_audio"]["data"] == data


def test_over_budget_the_binary_messages_are_kept_whole_or_dropped_whole(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    old_audio = audio_msg("Old voice note.", mp3(60))  # ~1,900 tokens
    big_pdf = file_msg("The full contract.", {"file_data": pdf(800), "filename": "big.pdf"})
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a clerk."},
                                     old_audio, {"role": "assistant", "content": "Heard it."},
                                     big_pdf, {"role": "assistant", "content": "Read it."}]
    for i in range(12):
        history += [{"role": "user", "content": f"Q{i}: {FILL * 4}"},
                    {"role": "assistant", "content": f"A{i}: {FILL * 4}"}]
    recent = audio_msg("And this short one?", mp3(2))
    history += [{"role": "assistant", "content": "Go on."}, recent,
                {"role": "assistant", "content": "Short and clear."},
                {"role": "user", "content": "Compare them."}]
    response = post(proxy, {"model": MODEL, "messages": history})
    assert response.status_code == 200, response.text
    header = parse_compaction_header(response.headers["x-ctxstack-compaction"])
    assert header["method"] != "none"
    assert int(header["kept"]) < len(history)
    (raw,) = raw_bodies(upstream)
    sent = json.loads(raw)["messages"]
    assert tool_sequence_problems(sent) == []
    assert sent[-1] == history[-1]
    originals = [json.dumps(m, sort_keys=True) for m in history]
    for m in sent:
        content = m.get("content")
        if isinstance(content, list) and any(p.get("type") in ("input_audio", "file")
                                             for p in content):
            # a binary message goes out as the client sent it, never cut, never noted
            assert json.dumps(m, sort_keys=True) in originals
        else:
            assert "base64" not in json.dumps(m)
    assert recent in sent  # the recent, cheap one fits and is kept
    assert big_pdf not in sent  # 33 pages, 51,645 tokens: more than the whole budget
    for data in (old_audio["content"][1]["input_audio"]["data"],
                 recent["content"][1]["input_audio"]["data"]):
        assert raw.count(data) in (0, 1)


def test_a_new_question_with_its_attachment_is_never_compacted(
        proxy: ProxyProcess, upstream: StubServer) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You read PDFs."}]
    for i in range(15):
        history += [{"role": "user", "content": f"Q{i}: {FILL * 40}"},
                    {"role": "assistant", "content": f"A{i}: {FILL * 40}"}]
    question = file_msg("Summarise this letter " + FILL * 2,
                        {"file_data": pdf(30), "filename": "letter.pdf"})
    history.append(question)
    response = post(proxy, {"model": MODEL, "messages": history})
    assert response.status_code == 200, response.text
    (raw,) = raw_bodies(upstream)
    sent = json.loads(raw)["messages"]
    assert sent[-1] == question
    assert len(sent) < len(history)


@pytest.mark.parametrize(("part", "fragment"), [
    ({"type": "input_audio", "input_audio": {"format": "wav"}}, "input_audio.data"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": ""}},
     "input_audio.format"),
    ({"type": "file", "file": {"filename": "a.pdf"}}, "file: needs file_data"),
])
def test_a_malformed_binary_part_is_a_400_naming_the_field(
        proxy: ProxyProcess, upstream: StubServer, part: dict[str, Any], fragment: str) -> None:
    response = post(proxy, {"model": MODEL, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "x"}, part]}]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert fragment in error["message"]
    assert "messages[0].content[1]" in error["message"]
    assert raw_bodies(upstream) == []
