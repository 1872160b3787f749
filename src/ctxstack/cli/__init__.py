"""The ``ctxstack`` command line. Each sub-command lives in its own module."""

from __future__ import annotations

import logging

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ctxstack")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """ctxstack: keep LLM conversations inside the context window without losing what matters."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")



def _register() -> None:
    # Each sub-command module adds itself to ``main`` when imported.
    from ctxstack.cli import chat, db, demo, proxy, serve, stub, user  # noqa: F401


_register()
