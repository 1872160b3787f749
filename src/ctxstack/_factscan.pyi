"""Type stub of the optional C scanner (``_factscan.c``); see ctxstack.compact.facts."""

from typing import Any

GRAMMAR: tuple[str, str, str, tuple[str, ...], str, tuple[str, ...], tuple[str, ...], int]

def scan(text: str, /) -> list[str]: ...
def quotes(text: str, /) -> list[str]: ...
def names(text: str, /) -> list[str]: ...
def judged(
    verdicts: dict[str, Any],
    judge: Any,
    candidate: type[tuple[str, str, int]],
    prefixed: object,
    limit: int,
    text: str,
    extra: list[str],
    /,
) -> tuple[list[Any], list[str], dict[str, None]]: ...
def extract(
    verdicts: dict[str, Any],
    judge: Any,
    candidate: type[tuple[str, str, int]],
    prefixed: object,
    limit: int,
    quote: tuple[str, int],
    text: str,
    quotes: bool,
    /,
) -> tuple[list[Any], list[str], dict[str, None], list[Any]]: ...
