"""The web page in a real browser: Debian's chromium driven by playwright-core (Node).

Starts ``ctxstack serve`` with the offline demo model, a temporary SQLite database and no
budget variables (the demo model declares an 8K window, so history is compacted after a
few turns), then runs ``tests/browser/chat.mjs``, which checks: streamed text, the
"X.Xk in / X.Xk out" card, collapsible tool steps, HTML escaping, an inject while a turn
runs, an image attachment, the dashed compact divider live and after a reload,
rename/delete, and phone width; and ``tests/browser/remember.mjs`` (issue 16): the
divider's count and position, what the model remembers, the context meter, Stop, Copy and
Regenerate, settings, the DAG plan graph and a 390 px width.
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
from typing import Any

import pytest

from tests.service_support import ROOT, run_cli, running_server

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


def _run_script(script: str, tmp_path: Path, env: dict[str, str], *,
                auth: bool = False, user: str | None = None) -> dict[str, Any]:
    """Serve the demo model with ``env``, run ``tests/browser/<script>`` against it and
    return its checks (failing with its error and the server log). With ``user``, that
    user is created first and its token is the script's third argument."""
    ARTIFACTS.mkdir(exist_ok=True)
    with running_server(tmp_path, env, auth=auth) as server:
        extra = []
        if user is not None:
            made = run_cli("user", "create", user, env=server.env)
            assert made.returncode == 0, made.stderr
            extra.append(made.stdout.strip())
        proc = subprocess.run(
            ["node", str(BROWSER_DIR / script), server.url, str(ARTIFACTS), *extra],
            cwd=BROWSER_DIR, capture_output=True, text=True, timeout=400, check=False,
            env={**os.environ, "CHROMIUM_PATH": CHROMIUM},
        )
        server_log = server.log()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from {script} (exit {proc.returncode}):\n{proc.stdout}\n" \
                  f"{proc.stderr}\nserver log:\n{server_log}"
    result = json.loads(lines[-1])
    assert result["ok"], f"{result['error']}\nchecks so far: {result['checks']}\n" \
                         f"server log:\n{server_log}"
    return dict(result["checks"])


def test_chat_page_in_chromium(browser_ready: None, tmp_path: Path) -> None:
    # No budget variables: the demo model's own 8K window (4,000 tokens of context).
    checks = _run_script("chat.mjs", tmp_path, {
        "CTXSTACK_DEMO_DELAY": "0.25",
        "CTXSTACK_DEMO_CHUNK_DELAY": "0.01",
    })
    assert re.search(r"\d+\.\dk in / \d+\.\dk out", checks["done_card"])
    assert re.fullmatch(r"\d+ earlier messages? (summarized by AI|trimmed)",
                        checks["compact_divider"].strip())
    assert checks["streamed_partial_renders"] >= 3
    assert checks["html_escaped"] is True
    assert checks["markdown"] is True
    assert checks["reload_dividers"] >= 1
    assert (ARTIFACTS / "chat-desktop.png").stat().st_size > 10_000
    assert (ARTIFACTS / "chat-phone.png").stat().st_size > 5_000


def test_what_the_model_remembers_in_chromium(browser_ready: None, tmp_path: Path) -> None:
    """Issue 16 on a first run (no variables): the divider within 6 turns at the exact
    place and count (live, after reload, equal to GET /compactions), the remembers panel,
    the meter, Copy/Regenerate, Stop keeping its text, settings, the DAG graph, 390 px."""
    checks = _run_script("remember.mjs", tmp_path, {
        "CTXSTACK_DEMO_DELAY": "0.05",
        "CTXSTACK_DEMO_CHUNK_DELAY": "0.02",
    })
    # README's first-run paragraph: the divider comes with the sixth question and folds
    # the first three questions and answers.
    assert checks["divider_turn"] == 6
    assert checks["divider_live"]["text"].startswith("6 earlier messages summarized by AI")
    live, reloaded = checks["divider_live"], checks["divider_reload"]
    assert live == reloaded
    assert live["anchorSeq"] == live["lastSeq"]
    assert live["text"].startswith(f"{live['above']} earlier messages summarized by AI")
    assert "8K context window" in checks["banner"]
    assert checks["stop"]["live"] > 300
    assert {"dag-node status-running", "dag-node status-done"} <= set(checks["dag"]["states"])
    # issue 29: a summary that condensed earlier ones lists each with its own range
    assert checks["tree"]["ref"].startswith("c")
    assert checks["tree"]["children"]
    assert "Summarised itself" in checks["tree"]["own"]
    for name in ("divider-live", "meter", "dialog", "tree", "stopped", "settings", "dag",
                 "phone", "phone-dialog"):
        assert (ARTIFACTS / f"remember-{name}.png").stat().st_size > 5_000, name


def test_chat_habits_and_resumed_stream_in_chromium(browser_ready: None, tmp_path: Path) -> None:
    """Issue 31: Regenerate with an image, Edit, Compact now with its preview, a reload
    mid-answer resuming the stream, code blocks with a label and Copy."""
    checks = _run_script("habits.mjs", tmp_path, {
        "CTXSTACK_DEMO_DELAY": "0.05",
        "CTXSTACK_DEMO_CHUNK_DELAY": "0.03",
    })
    assert checks["regenerate_with_image"] is True
    assert checks["edit"] is True
    assert "Summarise 2 earlier messages" in checks["compact_preview"]
    assert checks["compact_now"] is True
    assert checks["edit_invalidates_summary"] is True
    assert checks["resumed_running"] is True
    assert checks["reload_resumed"]["shown"] > 300
    assert checks["code_copy"] is True
    for name in ("edit", "compact-preview"):
        assert (ARTIFACTS / f"habits-{name}.png").stat().st_size > 5_000, name


def test_signed_in_user_and_sign_out_in_chromium(browser_ready: None, tmp_path: Path) -> None:
    checks = _run_script("account.mjs", tmp_path, {}, auth=True, user="alice")
    assert "Signed in as alice" in " ".join(checks["sidebar"].split())
    assert checks["signed_out"] is True
