"""The root ``ctxstack`` command group; each sub-command module adds itself to it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ctxstack")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """ctxstack: keep LLM conversations inside the context window without losing what matters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@contextmanager
def needs_extra(extra: str, command: str) -> Iterator[None]:
    """Turn a missing optional dependency into an error that names the extra to install.

    The commands that serve or store (``serve``, ``db``, ``user``, ``stub-llm``) import
    their packages inside this block, so ``pip install ctxstack`` alone still runs
    ``ctxstack chat`` and ``ctxstack demo``.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"`ctxstack {command}` needs the {extra!r} extra ({exc.name} is not installed): "
            f"pip install 'ctxstack[{extra}]'"
        ) from exc
