"""The chat service: FastAPI + Server-Sent Events + a small web page (``ctxstack serve``).

``create_app(settings)`` builds the app (see :mod:`ctxstack.server.app`). The library never
imports this package; it sits on top of the agent, the DAG engine and the store.
"""

from ctxstack.server.app import app_from_env, create_app
from ctxstack.server.settings import Settings

__all__ = ["Settings", "app_from_env", "create_app"]
