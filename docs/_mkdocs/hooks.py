"""MkDocs hooks for ctxstack's documentation site (mkdocs.yml ``hooks:``).

1. **Links to repository files outside ``docs/``.** The guides link the runnable examples
   the way a reader of the repository follows them (``../../examples/proxy_openai_sdk.py``
   from ``docs/guides/``). MkDocs only knows files under ``docs/``, so such a link would be
   a broken-link warning (an error under ``--strict``). Every such target that exists is
   copied into the site under its repository path (``examples/proxy_openai_sdk.py``) and
   the link is rewritten to it; a target that does not exist stays a warning.
2. **Sphinx roles in docstrings.** The code's docstrings name objects as
   ``:class:`~ctxstack.guard.ContextGuard``` (read in editors and by ``help()``). The
   rendered API pages show them as plain code: the role is dropped, and a ``~`` keeps
   only the last dotted part, as Sphinx does.

Nothing here touches the network.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.ctxstack")

# A Markdown inline link or image target: ](target) or ](target "title").
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<rest>[^)]*)\)")
_FENCE = re.compile(r"^(```|~~~)")
# A Sphinx role before a code span, as Markdown renders it: :class:<code>~a.b.C</code>
_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj|const|type):"
                   r"(?=<code>)")
_TILDE = re.compile(r"<code>~(?:[\w]+\.)*([\w]+)</code>")


def _repo_root(config: Any) -> Path:
    return Path(config["docs_dir"]).resolve().parent


def _outside(target: str, src_uri: str) -> str | None:
    """The repository path a relative link ``target`` on page ``src_uri`` points at, when
    it leaves the docs folder (else ``None``)."""
    if "://" in target or target.startswith(("/", "mailto:")):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), target))
    return resolved[len("../"):] if resolved.startswith("../") else None


def _rewrite_links(markdown: str, rewrite: Any) -> str:
    """``markdown`` with each link target outside code blocks replaced by
    ``rewrite(target)`` (``None``: unchanged)."""
    out: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            def sub(match: re.Match[str]) -> str:
                new = rewrite(match.group("target"))
                return match.group(0) if new is None else f"]({new}{match.group('rest')})"

            line = _LINK.sub(sub, line)
        out.append(line)
    return "".join(out)


def on_files(files: Files, config: Any) -> Files:
    """Add every repository file a page links to from outside ``docs/``."""
    root = _repo_root(config)
    wanted: set[str] = set()
    for file in files.documentation_pages():
        text = Path(file.abs_src_path or "").read_text(encoding="utf-8")

        def note(target: str, src_uri: str = file.src_uri) -> None:
            repo_path = _outside(target, src_uri)
            if repo_path is not None:
                wanted.add(repo_path)

        _rewrite_links(text, note)
    for repo_path in sorted(wanted):
        source = root / repo_path
        if not source.is_file() or files.get_file_from_path(repo_path) is not None:
            continue  # missing: the page's link is reported by MkDocs' own check
        files.append(File.generated(config, repo_path, abs_src_path=str(source)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point links that leave ``docs/`` at the copies :func:`on_files` added."""
    src_uri = page.file.src_uri

    def rewrite(target: str) -> str | None:
        repo_path = _outside(target, src_uri)
        if repo_path is None or files.get_file_from_path(repo_path) is None:
            return None
        return posixpath.relpath(repo_path, posixpath.dirname(src_uri) or ".")

    return _rewrite_links(markdown, rewrite)


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """Render docstrings' Sphinx roles as plain code."""
    html = _ROLE.sub("", html)
    return _TILDE.sub(r"<code>\1</code>", html)
