"""Alembic's environment and the schema's migrations (run by :mod:`ctxstack.store.migrate`).

``versions/`` holds one module per revision (Alembic loads them by path); :mod:`._ddl`
holds the DDL building blocks they share.
"""
