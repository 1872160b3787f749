"""Token usage records: what one model call, or a sum of calls, consumed.

Its own module, importing nothing else of ctxstack, because both the error hierarchy
(:class:`~ctxstack.errors.StructuredOutputError` carries the usage of failed attempts) and
the model protocol need it; anywhere else it would close an import cycle. Public as
:class:`ctxstack.protocol.Usage`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Usage(BaseModel):
    """Tokens a call (or a sum of calls) consumed. Supports ``+`` and ``sum()``.

    ``estimated`` is true when any part of the figure came from ctxstack's estimator
    because the provider did not report usage (streaming servers sometimes don't).
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: object) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            calls=self.calls + other.calls,
            estimated=self.estimated or other.estimated,
        )

    def __sub__(self, other: object) -> Usage:
        """What was added between two readings of a running total (``after - before``)."""
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens - other.input_tokens,
            output_tokens=self.output_tokens - other.output_tokens,
            cached_tokens=self.cached_tokens - other.cached_tokens,
            calls=self.calls - other.calls,
            estimated=self.estimated,
        )

    def __radd__(self, other: object) -> Usage:
        # Lets sum(usages) start from the integer 0.
        if other == 0:
            return self
        return self.__add__(other)
