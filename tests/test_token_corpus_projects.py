"""The held-out-by-project code corpus keeps fitting and evaluation projects apart
(benchmarks.token_corpus.project_code): no file of an evaluation project is fitted on."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import token_corpus
from benchmarks.token_corpus import (
    MAX_CHARS,
    MIN_CHARS,
    _distributions,
    project_code,
    project_code_chunks,
)


def module(name: str, lines: int = 40) -> str:
    """A Python module of ``lines`` functions (over MIN_CHARS characters for 40)."""
    return "".join(f"def {name}_{i}(value):\n    return value * {i}\n\n\n" for i in range(lines))


def debian_site(root: Path, name: str, top: str, files: dict[str, str]) -> None:
    """An egg-info distribution as Debian installs it: PKG-INFO and top_level.txt, no
    list of files."""
    info = root / f"{name}-1.0.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text(f"{top}\n")
    for rel, text in files.items():
        path = root / top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_project_the_venv_lacks_is_evaluated_whole_but_never_its_vendored_copies(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    own = {"__init__.py": module("init"), "core.py": module("core"),
           "tests/test_core.py": module("test_core"), "tiny.py": "x = 1\n"}
    debian_site(tmp_path, "leafpkg", "leafpkg",
                {**own, "_vendor/other.py": module("vendored")})
    monkeypatch.setattr(token_corpus, "DEBIAN_SITE", tmp_path)
    held = project_code("eval")
    assert sorted(held["leafpkg"]) == sorted(own[f] for f in own if f != "tiny.py")
    assert "leafpkg" not in project_code("fit")


def test_a_debian_copy_of_a_venv_project_is_not_a_second_project(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    venv_names = [(d.metadata["Name"] or "").lower() for d in _distributions()]
    fitted = next(n for n in venv_names if token_corpus._half("pkg:" + n) == "fit")
    debian_site(tmp_path, fitted, "copied", {"mod.py": module("copied")})
    monkeypatch.setattr(token_corpus, "DEBIAN_SITE", tmp_path)
    held = project_code("eval")
    assert fitted not in held
    assert module("copied") not in {t for texts in held.values() for t in texts}


def test_fit_and_eval_projects_share_no_project_and_no_file() -> None:
    fit, held = project_code("fit"), project_code("eval")
    assert fit
    assert held
    assert not set(fit) & set(held)
    assert "ctxstack" not in fit
    assert "ctxstack" not in held
    fitted = {t for texts in fit.values() for t in texts}
    assert not any(t in fitted for texts in held.values() for t in texts)


def test_chunks_are_pieces_of_their_own_project_within_the_size_bounds() -> None:
    projects = project_code("eval")
    chunks = project_code_chunks("eval", 3)
    assert set(chunks) == set(projects)
    for name, pieces in chunks.items():
        assert len(pieces) <= 3
        assert len(set(pieces)) == len(pieces)  # a small project gives fewer, not repeats
        for piece in pieces:
            assert MIN_CHARS <= len(piece) <= MAX_CHARS
            assert any(piece in text for text in projects[name])
    assert project_code_chunks("eval", 3) == chunks  # seeded: the same every run
