"""The ``ctxstack`` command line. Each sub-command lives in its own module.

The root group is :func:`ctxstack.cli.app.main`; importing a sub-command module adds its
command to it. Sub-commands that need the ``server`` extra import it only when run.
"""

from ctxstack.cli import chat, db, demo, proxy, serve, stub, user
from ctxstack.cli.app import main

__all__ = ["chat", "db", "demo", "main", "proxy", "serve", "stub", "user"]
