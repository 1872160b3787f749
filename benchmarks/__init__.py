"""ctxstack's benchmarks: one ``bench_*.py`` module per area, run together by ``benchmarks/run``.

See ``benchmarks/README.md`` for the module protocol and how to reproduce the report.
"""
