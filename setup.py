"""The optional C accelerators (everything else is in pyproject.toml): the token
estimator's (``ctxstack._speedups``) and the fact extractor's scan
(``ctxstack._factscan``).

``optional=True``: without a C compiler the install still succeeds and
``ctxstack.token_model`` / ``ctxstack.compact.facts`` use their pure-Python paths (same
results, slower).

setuptools' metadata scratch directory (``ctxstack.egg-info``) goes to ``build/``, not
``src/``: on the tests' and benchmarks' ``PYTHONPATH`` (``src``) a copy there would
shadow the installed distribution's metadata.
"""

from pathlib import Path

from setuptools import Extension, setup

Path("build").mkdir(exist_ok=True)
setup(
    ext_modules=[
        Extension("ctxstack._speedups", ["src/ctxstack/_speedups.c"], optional=True),
        Extension("ctxstack._factscan", ["src/ctxstack/_factscan.c"], optional=True),
    ],
    options={"egg_info": {"egg_base": "build"}},
)
