"""Token counting: the counter protocol, the default heuristic (within 10% of
o200k_base), the seed's formula by name, exact counters for known tokenizers, calibration
from provider-reported usage, and usage metering.

Importing this package never imports the LLM client or the guard.
"""

from ctxstack.tokens._calibration import (
    CalibratingCounter,
)
from ctxstack.tokens._counter import (
    DEFAULT_COUNTER,
    HEURISTIC,
    SEED_HEURISTIC,
    BaseCounter,
    HeuristicCounter,
    SeedHeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    estimate_messages_tokens,
    estimate_tokens,
)
from ctxstack.tokens._exact import (
    TokenizerJsonCounter,
    counter_for_model,
)
from ctxstack.tokens._metering import (
    MeteredLLM,
    UsageMeter,
)

__all__ = [
    "DEFAULT_COUNTER",
    "HEURISTIC",
    "SEED_HEURISTIC",
    "BaseCounter",
    "CalibratingCounter",
    "HeuristicCounter",
    "MeteredLLM",
    "SeedHeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerJsonCounter",
    "UsageMeter",
    "counter_for_model",
    "estimate_messages_tokens",
    "estimate_tokens",
]
