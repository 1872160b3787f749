"""The optional C accelerator of the token estimator (everything else is in pyproject.toml).

``optional=True``: without a C compiler the install still succeeds and
``ctxstack.token_model`` uses its pure-Python path (same results, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("ctxstack._speedups", ["src/ctxstack/_speedups.c"], optional=True),
])
