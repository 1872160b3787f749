"""The web page in a real browser: Debian's chromium driven by playwright-core (Node).

Starts ``ctxstack serve`` with the offline demo model, a temporary SQLite database and a
small budget (so history is compacted after a few turns), then runs
``tests/browser/chat.mjs``, which checks: streamed text, the "X.Xk in / X.Xk out" card,
collapsible tool steps, HTML escaping, an inject while a turn runs, an image attachment,
the dashed compact divider live and after a reload, rename/delete, and phone width.
Screenshots land in ``test-artifacts/`` (kept by CI).

Needs /usr/bin/chromium and ``tests/browser/node_modules`` (``scripts/install-browser-deps``
installs both). Without them the test is skipped, unless ``CTXSTACK_REQUIRE_BROWSER=1``
(CI), where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.service_support import ROOT, running_server

pytestmark = pytest.mark.browser

BROWSER_DIR = ROOT / "tests" / "browser"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing"
    if shutil.which("node") is None:
        return "node is missing"
    if not (BROWSER_DIR / "node_modules" / "playwright-core" / "package.json").exists():
        return "tests/browser/node_modules/playwright-core is missing"
    return None


@pytest.fixture
def browser_ready() -> None:
    reason = _missing()
    if reason is None:
        return
    message = f"{reason}: run scripts/install-browser-deps to enable the browser test"
    if os.environ.get("CTXSTACK_REQUIRE_BROWSER") == "1":
        pytest.fail(f"CTXSTACK_REQUIRE_BROWSER=1 but {message}")
    pytest.skip(message)


def test_chat_page_in_chromium(browser_ready: None, tmp_path: Path) -> None:
    env = {
        "LLM_CONTEXT_SIZE": "8000",
        "LLM_MAX_OUTPUT_TOKENS": "4000",
        "CTXSTACK_DEMO_DELAY": "0.25",
        "CTXSTACK_DEMO_CHUNK_DELAY": "0.01",
    }
    ARTIFACTS.mkdir(exist_ok=True)
    with running_server(tmp_path, env) as server:
        proc = subprocess.run(
            ["node", str(BROWSER_DIR / "chat.mjs"), server.url, str(ARTIFACTS)],
            cwd=BROWSER_DIR, capture_output=True, text=True, timeout=240, check=False,
            env={**os.environ, "CHROMIUM_PATH": CHROMIUM},
        )
        server_log = server.log()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from chat.mjs (exit {proc.returncode}):\n{proc.stdout}\n" \
                  f"{proc.stderr}\nserver log:\n{server_log}"
    result = json.loads(lines[-1])
    assert result["ok"], f"{result['error']}\nchecks so far: {result['checks']}\n" \
                         f"server log:\n{server_log}"
    checks = result["checks"]
    assert re.search(r"\d+\.\dk in / \d+\.\dk out", checks["done_card"])
    assert re.fullmatch(
        r"Earlier context \(\d+ messages?\) was (summarized by AI|trimmed)\.",
        checks["compact_divider"].strip())
    assert checks["streamed_partial_renders"] >= 3
    assert checks["html_escaped"] is True
    assert checks["reload_dividers"] >= 1
    assert (ARTIFACTS / "chat-desktop.png").stat().st_size > 10_000
    assert (ARTIFACTS / "chat-phone.png").stat().st_size > 5_000
