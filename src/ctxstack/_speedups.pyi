"""Type stub of the optional C accelerator (``_speedups.c``); see ctxstack.token_model."""

LAYOUT: tuple[int, int, int, int, int, int, int]

def estimate(
    classes: bytes, weights: bytes, traditional: bytes, traditional_weight: float, text: str, /
) -> int: ...
