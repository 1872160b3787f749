"""Fidelity benchmark: what survives compaction, verbatim, in long synthetic conversations.

* :mod:`~benchmarks.fidelity.generator` — seeded conversations (en/zh/ja/mixed, tool calls,
  large JSON results) with planted facts and a question per fact;
* :mod:`~benchmarks.fidelity.scorer` — verbatim whole-token fact matching and the OpenAI
  message-sequence validity check;
* :mod:`~benchmarks.fidelity.strategies` — the strategies compared (ctxstack's and the
  naive baseline) and the deliberately lossy scripted summariser.
"""
