"""The plain baseline's search: textbook word BM25 over the turns truncation dropped.

What a user writes in an afternoon beside truncation (issue 29's baseline): lower-cased
``\\w+`` tokens, no stop words, no stemming, k1 = 1.2, b = 0.75, Robertson–Spärck Jones
idf. Benchmark code only: the library's own search is
:class:`ctxstack.compaction.HistoryArchive`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"\w+")  # one character class, repeated: linear time
K1 = 1.2
B = 0.75


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def top_k(query: str, documents: Sequence[str], k: int = 5) -> list[int]:
    """Indices of the ``k`` best documents for ``query``, best first (ties: newer first)."""
    docs = [Counter(tokens(d)) for d in documents]
    if not docs:
        return []
    lengths = [sum(d.values()) for d in docs]
    average = sum(lengths) / len(docs) or 1.0
    frequency: Counter[str] = Counter()
    for d in docs:
        frequency.update(d.keys())
    n = len(docs)
    scores = [0.0] * n
    for term in set(tokens(query)):
        df = frequency.get(term, 0)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(docs):
            tf = d.get(term, 0)
            if tf:
                scores[i] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[i] / average))
    ranked = sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], -i))
    return ranked[:k]
