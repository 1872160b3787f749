"""The root ``ctxstack`` command group; each sub-command module adds itself to it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

F = TypeVar("F", bound=Callable[..., object])


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


def listen_options(*, port: int, workers: str) -> Callable[[F], F]:
    """``--host``, ``--port`` and ``--workers`` of a command that runs a server: loopback by
    default, ``port`` the command's own default, ``workers`` what its worker processes
    share (for the help text)."""
    options = (
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind."),
        click.option("--port", default=port, show_default=True, type=click.IntRange(1, 65535),
                     help="Port to listen on."),
        click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
                     help=f"Worker processes ({workers})."),
    )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
