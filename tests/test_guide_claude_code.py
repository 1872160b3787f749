"""``docs/guides/claude-code.md``: its offline command sequence runs as written.

The guide's first ``bash`` block (stub model, proxy, a curl to ``/v1/messages``, the stats)
and its first ``python`` block (the official ``anthropic`` SDK: create, stream,
count_tokens) are run in one shell, in order, with only the ports replaced by free ones;
the output must show the answers the guide promises.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service_support import clean_env, free_port

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "claude-code.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall(GUIDE.read_text()) if lang == kind]


def test_the_guides_offline_commands_run_as_written(tmp_path: Path) -> None:
    pytest.importorskip("anthropic")
    stub_port, proxy_port = free_port(), free_port()
    shell, python = blocks("bash")[0], blocks("python")[0]
    assert "ctxstack proxy" in shell
    assert "--anthropic-upstream" in shell
    assert 'base_url="http://127.0.0.1:8787"' in python

    def ports(text: str) -> str:
        return text.replace("8001", str(stub_port)).replace("8787", str(proxy_port))

    script = (f"set -e\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n{ports(shell)}\n"
              f"echo\npython - <<'PY'\n{ports(python)}PY\n")
    bindir = str(Path(sys.executable).parent)
    env = clean_env({"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                     "CTXSTACK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'p.db'}"})
    proc = subprocess.Popen(["bash", "-c", script], env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
    assert proc.returncode == 0, out
    assert '"text":"You said: Hello through the proxy"' in out.replace(" ", "") or (
        "You said: Hello through the proxy" in out), out
    assert "You said: Hello from the SDK" in out
    assert "You said: Stream it" in out
    assert re.search(r'"requests":\s*1\b', out), out
    assert re.search(r"^\d+$", out, re.MULTILINE), out  # the token count
