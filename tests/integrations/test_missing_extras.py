"""Each adapter, imported without its framework, fails with the pip command that installs
its extra (run in a fresh interpreter where the framework's package is blocked)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(("blocked", "adapter", "extra"), [
    ("langchain", "langchain", "langchain"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("llama_index.core", "llamaindex", "llamaindex"),
    ("agents", "openai_agents", "openai-agents"),
])
def test_missing_extra_names_the_pip_install(blocked: str, adapter: str, extra: str) -> None:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"try:\n    import ctxstack.integrations.{adapter}\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert f"pip install 'ctxstack[{extra}]'" in out
