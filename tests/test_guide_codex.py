"""The Codex guide's commands and configuration are the ones that work.

Codex itself cannot be installed here; what can be checked is checked: the provider
block parses as TOML and points a Responses client at the proxy's default address; every
``ctxstack`` command the guide shows exists with the flags it uses; the openai-SDK
example it links is a script ``tests/test_examples.py`` runs (create, stream, a
``previous_response_id`` chain, the WebSocket mode) — and the SDK calls of its snippet
run here against a real proxy. Its "Try it offline" section runs as written
(:func:`tests.guide_support.run_section`): a curl to ``/v1/responses``, then a 100-turn
``previous_response_id`` chain over the SDK's WebSocket that the proxy compacts.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import openai

from ctxstack.llm.stub import StubReply, StubServer
from tests.guide_support import blocks, guide, run_section, section, shown
from tests.proxy_support import running_proxy

ROOT = Path(__file__).resolve().parent.parent
GUIDE = guide("codex")


def _blocks(kind: str, text: str | None = None) -> list[str]:
    return [body for _, body in blocks(GUIDE.read_text(encoding="utf-8") if text is None
                                       else text, kind)]


def test_the_provider_block_is_a_responses_provider_at_the_proxy() -> None:
    (config,) = _blocks("toml")
    data = tomllib.loads(config)
    provider = data["model_providers"][data["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:8787/v1"
    assert provider["wire_api"] == "responses"
    assert provider["supports_websockets"] is True


def test_every_ctxstack_command_of_the_guide_exists_with_its_flags() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    commands = [line.strip() for block in _blocks("sh") for line in block.splitlines()
                if line.strip().startswith("ctxstack ")]
    commands += re.findall(r"`(ctxstack (?:proxy|stub-llm) [^`]*)`", text)
    assert any(c.startswith("ctxstack proxy") for c in commands)
    for command in commands:
        words = shlex.split(command)
        helped = subprocess.run(
            [sys.executable, "-c", "from ctxstack.cli import main; main()", words[1],
             "--help"], capture_output=True, text=True, timeout=60, check=False)
        assert helped.returncode == 0, helped.stderr
        for flag in (w for w in words[2:] if w.startswith("--")):
            assert flag in helped.stdout, (command, flag)
    example = ROOT / "examples" / "proxy_openai_responses.py"
    assert example.exists()
    assert f"python examples/{example.name}" in text


def test_the_sdk_snippet_runs_against_the_proxy(stub: StubServer, tmp_path: Path) -> None:
    (snippet,) = _blocks("python", section(GUIDE, "4. The same from the openai SDK"))
    stub.push(StubReply.text("Hello from the stub"))
    with running_proxy(tmp_path, stub.base_url, {"LLM_API_KEY": "k"}) as proxy:
        code = snippet.replace("http://127.0.0.1:8787/v1", proxy.base_url)
        scope = {"openai": openai}
        exec(compile(code, str(GUIDE), "exec"), scope)
        assert scope["event"].response.output_text == "Hello from the stub"
        scope["client"].close()


def test_the_offline_section_runs_as_written(tmp_path: Path) -> None:
    out = run_section(GUIDE, tmp_path)
    shown(GUIDE, out)
    # the curl: a response object with the stub's answer
    assert '"text":"You said: Hello through the proxy"' in out
    # the chain's last answer came back over the WebSocket
    assert "You said: Turn 99: We read src/parser.py" in out
    # the upstream got a fitted full input, never the chain's id nor all 200 items
    (items,) = re.findall(r"^upstream got previous_response_id: False \| input items: (\d+) of 200$",
                          out, re.MULTILINE)
    assert 0 < int(items) < 200
    assert "{'requests': 101, 'websocket_requests': 100, 'forwarded': 101}" in out
    assert "compacted: True" in out

