"""Reversible compaction: what a compaction removes stays retrievable.

Every message the guard masks, summarises or drops is handed to an *archive* first; the
placeholder or summary that replaces it names a reference, and the agents get a
``recall`` tool (:mod:`ctxstack.agent._recall`) that searches the archive or reads one
message back by reference. Compaction then loses nothing for good: it only moves detail
out of the context window to where the model can fetch it.

:class:`Archive` is the protocol (async, so a database can implement it: the chat service
uses the stored messages themselves, see ``ctxstack.store.archive``);
:class:`HistoryArchive` is the in-memory implementation for library users.

Search is by **character n-grams** (bigrams and trigrams of the case-folded, NFKC-normalised
text), not whitespace words, so it works for Chinese and Japanese, where words are not
separated, and for identifiers such as ``ORD-99812-XK``; a one-character query (a CJK word
such as ``猫``) matches through the bigrams that contain it. Ranking is BM25 over the n-grams
(common n-grams weigh little, a document that matches many rare ones ranks first).
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ctxstack.errors import InputError
from ctxstack.messages import ChatMessage

MAX_INDEXED_CHARS = 100_000
"""Characters of one message that are indexed (the whole message is still stored)."""
SNIPPET_CHARS = 240
ARCHIVE_REF_KEY = "archive_ref"
"""Metadata key a placeholder or archived copy carries: the reference it stands for."""
MASKED_KEY = "masked"
"""Metadata flag of a cleared tool output (never cleared twice)."""
_K1 = 1.2
_B = 0.75


class ArchiveHit(BaseModel):
    """One search result: the reference, its score, the message and a short snippet."""

    model_config = ConfigDict(frozen=True)

    ref: str
    score: float
    message: ChatMessage
    snippet: str


@runtime_checkable
class Archive(Protocol):
    """Where compaction puts what it removes (see the module doc)."""

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Archive ``messages``; their references, in order (a message already archived
        keeps its reference)."""
        ...

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """The ``k`` best-matching archived messages, best first."""
        ...

    async def get(self, ref: str) -> ChatMessage | None:
        """The archived message ``ref`` names, or None if there is none."""
        ...

    def __len__(self) -> int:
        """Messages archived so far (the agents offer ``recall`` once this is > 0)."""
        ...


def normalize_text(text: str) -> str:
    """Case-folded NFKC text with whitespace runs collapsed (what n-grams are taken of)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def ngrams(text: str) -> Counter[str]:
    """Character bigrams and trigrams of normalised ``text`` (a lone character for 1)."""
    norm = normalize_text(text)
    if len(norm) < 2:
        return Counter([norm]) if norm else Counter()
    grams: Counter[str] = Counter(norm[i : i + 2] for i in range(len(norm) - 1))
    grams.update(norm[i : i + 3] for i in range(len(norm) - 2))
    return grams


def searchable_text(message: ChatMessage) -> str:
    """What is indexed: the text plus tool names and arguments."""
    parts = [message.text]
    if message.name:
        parts.append(message.name)
    for call in message.tool_calls or ():
        parts.append(f"{call.name} {call.arguments_json}")
    return "\n".join(p for p in parts if p)


def snippet(text: str, query: str, size: int = SNIPPET_CHARS) -> str:
    """About ``size`` characters of ``text`` around the first query word found in it."""
    if len(text) <= size:
        return text
    lowered = text.casefold()
    at = -1
    for word in sorted(query.casefold().split(), key=len, reverse=True):
        at = lowered.find(word)
        if at >= 0:
            break
    if at < 0:
        # CJK queries have no spaces: fall back to the first bigram found.
        norm = query.casefold().strip()
        at = next((lowered.find(norm[i:i + 2]) for i in range(max(0, len(norm) - 1))
                   if lowered.find(norm[i:i + 2]) >= 0), 0)
    start = max(0, at - size // 3)
    piece = text[start : start + size]
    return ("…" if start else "") + piece + ("…" if start + size < len(text) else "")


class HistoryArchive:
    """In-memory :class:`Archive` with n-gram BM25 search (see the module doc).

    References are ``"a1"``, ``"a2"``…, in archiving order. A message that carries an
    ``archive_ref`` in its metadata (a placeholder, or a copy already archived) is not
    archived twice. Safe to share between the guards of one run (single event loop).
    """

    def __init__(self) -> None:
        self._messages: dict[str, ChatMessage] = {}
        self._lengths: dict[str, int] = {}
        self._postings: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._messages)

    def __repr__(self) -> str:
        return f"HistoryArchive({len(self)} messages)"

    async def add(self, messages: Sequence[ChatMessage]) -> list[str]:
        """Archive ``messages`` (see :meth:`Archive.add`)."""
        refs = []
        for message in messages:
            if not isinstance(message, ChatMessage):
                raise InputError(f"add: expected ChatMessage objects, got {type(message).__name__}")
            known = message.metadata.get(ARCHIVE_REF_KEY)
            if isinstance(known, str) and known in self._messages:
                refs.append(known)
                continue
            ref = f"a{len(self._messages) + 1}"
            stored = message.replace(metadata={**message.metadata, ARCHIVE_REF_KEY: ref})
            self._messages[ref] = stored
            grams = ngrams(searchable_text(message)[:MAX_INDEXED_CHARS])
            for gram, count in grams.items():
                self._postings[gram][ref] = count
            length = sum(grams.values())
            self._lengths[ref] = length
            self._total_length += length
            refs.append(ref)
        return refs

    async def get(self, ref: str) -> ChatMessage | None:
        """The archived message ``ref`` names (None if unknown)."""
        if not isinstance(ref, str):
            raise InputError(f"get: ref must be a string, got {type(ref).__name__}")
        return self._messages.get(ref.strip())

    async def search(self, query: str, k: int = 5) -> list[ArchiveHit]:
        """BM25 over character n-grams; best first, at most ``k``.

        Raises:
            InputError: an empty query or ``k`` < 1.
        """
        if not isinstance(query, str) or not query.strip():
            raise InputError("search: query must be a non-empty text")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError(f"search: k must be a positive integer, got {k!r}")
        n = len(self._messages)
        if n == 0:
            return []
        average = self._total_length / n or 1.0
        scores: dict[str, float] = defaultdict(float)
        for gram, posting in self._query_postings(query):
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            weight = idf * (1.5 if len(gram) == 3 else 1.0)
            for ref, tf in posting.items():
                norm = _K1 * (1 - _B + _B * self._lengths[ref] / average)
                scores[ref] += weight * tf * (_K1 + 1) / (tf + norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], _order(item[0])))[:k]
        return [
            ArchiveHit(ref=ref, score=round(score, 4), message=self._messages[ref],
                       snippet=snippet(searchable_text(self._messages[ref]), query))
            for ref, score in best
        ]


    def _query_postings(self, query: str) -> list[tuple[str, dict[str, int]]]:
        """The (n-gram, posting) pairs a query scores with.

        A one-character query (``猫``, ``犬`` — a whole word in Chinese and Japanese) has no
        bigram of its own: it matches through every indexed bigram that contains it, the
        bigram counts summed per message. One pass over the vocabulary, for that rare query
        only.
        """
        grams = ngrams(query)
        if len(grams) == 1:
            (char,) = grams
            if len(char) == 1:
                merged: dict[str, int] = defaultdict(int)
                for gram, posting in self._postings.items():
                    if gram == char or (len(gram) == 2 and char in gram):
                        for ref, tf in posting.items():
                            merged[ref] += tf
                return [(char, dict(merged))] if merged else []
        return [(g, p) for g in grams if (p := self._postings.get(g))]


def _order(ref: str) -> int:
    """Newer first among equal scores."""
    digits = ref.lstrip("a")
    return -int(digits) if digits.isdigit() else 0
