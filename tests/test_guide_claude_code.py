"""``docs/guides/claude-code.md``: its offline command sequence runs as written.

The guide's "Try it offline" section — a ``bash`` block (stub model, proxy, a curl to
``/v1/messages``, the stats) and a ``python`` block (the official ``anthropic`` SDK:
create, stream, count_tokens) — is run in one shell, in order, with only the ports
replaced by free ones (:mod:`tests.guide_support`); the output must show the answers the
guide promises.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.guide_support import blocks, guide, run_section, section

GUIDE = guide("claude-code")


def test_the_guides_offline_commands_run_as_written(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    offline = section(GUIDE)
    (shell,) = (body for _, body in blocks(offline, "bash"))
    (python,) = (body for _, body in blocks(offline, "python"))
    assert "ctxstack proxy" in shell
    assert "--anthropic-upstream" in shell
    assert 'base_url="http://127.0.0.1:8787"' in python

    out = run_section(GUIDE, tmp_path)
    assert '"text":"You said: Hello through the proxy"' in out.replace(" ", "") or (
        "You said: Hello through the proxy" in out), out
    assert "You said: Hello from the SDK" in out
    assert "You said: Stream it" in out
    assert re.search(r'"requests":\s*1\b', out), out
    assert re.search(r"^\d+$", out, re.MULTILINE), out  # the token count
