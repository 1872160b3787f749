"""What a refitting caller sent last: the guard carries it for that caller.

A caller that fits its whole stored history at every call (``carried=False``: an OpenAI
Agents session, a LlamaIndex memory, a per-request filter) hands the guard its raw history
each time and keeps nothing of the result. Planned from the history alone, a compaction
moves with it: once clearing every old tool output cannot bring the history down to
``mask_fill``, each new tool group cleared one more output and rewrote the provider's
cached context from there — on the bill benchmark's held-out traces at 5K, 85 of 125
calls compacted, against 17 per 100 for an agent loop that carries its result.

So the guard remembers, per conversation, its last result for such a caller as a *layout*
over the input it was made from: each message either the index of an input message it
kept or the replacement it made (a placeholder, a summary, a cut copy). When the next
input extends that input — the same messages by content and pin, in order, as stored
rows read afresh are — the guard starts from the remembered result plus the new
messages, as an agent loop carries its context: under budget that is sent as it is,
over budget it is compacted with the loop's headroom. Anything else (an edited, removed
or re-pinned message, a summary checkpoint that starts the history anew, another
process's first call) falls back to the stable windows, which depend on the history
alone. Kept messages are always the caller's current objects, so a caller that maps the
result back to its rows by identity still can.

Bounded: :data:`REFITS_KEPT` conversations, one int per input message and the
replacement messages of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxstack.messages import ChatMessage, tool_turns_valid

REFITS_KEPT = 64
"""Conversations whose last refitted result a guard carries (oldest forgotten first)."""


def conversation_key(messages: Sequence[ChatMessage]) -> int:
    """A conversation's identity for a caller that refits it: the fingerprints of its
    leading system messages and first other message (a stored history always opens the
    same way; after a summary checkpoint it opens with the summary: a new key)."""
    opening = []
    for message in messages:
        opening.append(fingerprint(message))
        if message.role != "system":
            break
    return hash(tuple(opening))


def fingerprint(message: ChatMessage) -> int:
    """A message as one int: its role, text, tool calls, name and number of content
    parts (not the bytes of an image or file part: a stored history is appended to, not
    edited, and hashing every image at every call would cost more than it guards).
    Equal messages, equal ints; different texts almost surely not."""
    calls = tuple((c.id, c.name, c.arguments_json) for c in message.tool_calls or ())
    parts = len(message.content) if isinstance(message.content, list) else -1
    return hash((message.role, message.text, message.tool_call_id, message.name, calls,
                 parts))


def mark(message: ChatMessage) -> int:
    """A message compared across calls: its :func:`fingerprint` and its pin (a message
    pinned since cannot keep the replacement made for it)."""
    return hash((fingerprint(message), message.pinned))


@dataclass(frozen=True, slots=True)
class _Refit:
    marks: tuple[int, ...]
    """The input's messages, marked."""
    layout: tuple[int | ChatMessage, ...]
    """The result: an input index per message kept, the replacement itself otherwise."""


class RefitMemo:
    """Per conversation, the last result a refitting caller was given (see the module
    doc). Not shared between processes; safe under concurrent calls on one event loop
    (each result is made from its own input, so a stale entry is only a missed reuse)."""

    def __init__(self, kept: int = REFITS_KEPT) -> None:
        self._kept = kept
        self._refits: dict[int, _Refit] = {}

    def carried(self, messages: list[ChatMessage], marks: tuple[int, ...]
                ) -> list[ChatMessage] | None:
        """The last result for ``messages``' conversation followed by the messages added
        since, if ``messages`` (whose :func:`mark` s are ``marks``) extends the input it was
        made from and the result is a valid request; else None."""
        refit = self._refits.get(conversation_key(messages))
        n = 0 if refit is None else len(refit.marks)
        if refit is None or marks[:n] != refit.marks:
            return None
        out = [messages[x] if isinstance(x, int) else x for x in refit.layout]
        out += messages[n:]
        return out if tool_turns_valid(out) else None

    def remember(self, messages: Sequence[ChatMessage], marks: tuple[int, ...],
                 result: Sequence[ChatMessage]) -> None:
        """Remember ``result`` as what ``messages``' conversation (marked ``marks``) was
        last given."""
        at = {id(m): i for i, m in enumerate(messages)}
        layout = tuple(at.get(id(m), m) for m in result)
        key = conversation_key(messages)
        self._refits.pop(key, None)
        self._refits[key] = _Refit(marks, layout)
        while len(self._refits) > self._kept:
            del self._refits[next(iter(self._refits))]

    def result_marks(self, messages: Sequence[ChatMessage]) -> list[int] | None:
        """The marks of the last result ``messages``' conversation was given (None if not
        remembered): what a new result is compared with to estimate what it rewrites."""
        refit = self._refits.get(conversation_key(messages))
        if refit is None:
            return None
        return [refit.marks[x] if isinstance(x, int) else mark(x) for x in refit.layout]
