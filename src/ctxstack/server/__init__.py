"""The chat service: FastAPI + Server-Sent Events + a small web page (``ctxstack serve``).

``create_app(settings)`` builds the app (see :mod:`ctxstack.server.app`). The library never
imports this package; it sits on top of the agent, the DAG engine and the store. The names
below are imported lazily so that using one part (the SSE event models, the inject
queues) does not load the whole application.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxstack._lazy import lazy_exports

if TYPE_CHECKING:
    from ctxstack.server.app import app_from_env, create_app
    from ctxstack.server.settings import Settings

__all__ = ["Settings", "app_from_env", "create_app"]


__getattr__ = lazy_exports(globals(), {
    "app_from_env": "ctxstack.server.app",
    "create_app": "ctxstack.server.app",
    "Settings": "ctxstack.server.settings",
})
