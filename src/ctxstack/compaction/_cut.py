"""Shortening one text, one message or one tool group head+tail.

When something must shrink, its two ends are the parts worth keeping: the head carries
the question, the headers, the first rows; the tail carries the conclusion, the error,
the total. The middle is replaced by a marker that says how much was removed, so neither
the model nor a human reading the log mistakes the cut text for the whole.

Token-bounded cuts search the kept length with the caller's counter, so the result fits
whatever counter is in use (heuristic or exact), not just an approximation of it.

Audio and file parts are never cut and never dropped out of a message: a half of a base64
payload is not half the recording, and a question whose PDF silently vanished would be
answered about nothing. A message holding them keeps them byte-identical (its text may
be cut around them), and when they alone do not fit the message cannot be cut
(:func:`cut_message` returns None): the caller drops it whole, as a unit. Images, which
the model can do without, may still be replaced by a note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxstack.messages import AudioPart, ChatMessage, ContentPart, FilePart, ImagePart, TextPart
from ctxstack.tokens import TokenCounter

CUT_MARKER = "\n[... {removed:,} characters removed ...]\n"
"""Placed where text was removed; ``removed`` is the number of characters cut out."""

IMAGE_OMITTED = "[{count} image(s) omitted]"


def marker(removed: int) -> str:
    """The marker text for ``removed`` characters."""
    return CUT_MARKER.format(removed=removed)


def head_tail(text: str, keep: int) -> str:
    """``text`` reduced to ``keep`` characters (head and tail halves) plus the marker."""
    if keep >= len(text):
        return text
    keep = max(0, keep)
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker(len(text) - keep) + (text[len(text) - tail :] if tail else "")


def cut_text(text: str, max_chars: int) -> str:
    """Cut ``text`` to at most ``max_chars`` characters, keeping head and tail.

    The result, marker included, is never longer than ``max_chars``. When even the marker
    does not fit, the plain head of the text is returned.
    """
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(marker(len(text)))
    if keep <= 0:
        return text[: max(0, max_chars)]
    return head_tail(text, keep)


def _max_fitting(length: int, fits: Callable[[int], bool]) -> int | None:
    """Largest ``keep`` in ``[0, length)`` with ``fits(keep)``; None if ``fits(0)`` fails.

    ``fits`` is monotone up to rounding of the estimator; the answer is always one that
    was checked to fit.
    """
    if not fits(0):
        return None
    lo, hi = 0, length - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def cut_text_tokens(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """Cut ``text`` head+tail so that ``counter.count_text`` of it is ``<= max_tokens``.

    Returns ``""`` when not even the marker fits.
    """
    if counter.count_text(text) <= max_tokens:
        return text
    keep = _max_fitting(len(text), lambda k: counter.count_text(head_tail(text, k)) <= max_tokens)
    return "" if keep is None else head_tail(text, keep)


def _with_text(
    message: ChatMessage, text: str, *, keep_images: bool, removed: int = 0
) -> ChatMessage:
    """``message`` with its text replaced by ``text`` (images kept or noted as omitted;
    audio and file parts always kept, byte-identical, in their order).

    ``removed`` (characters cut out) is added to ``metadata["truncated_chars"]``.
    """
    images = message.images
    if images and not keep_images:
        note = IMAGE_OMITTED.format(count=len(images))
        text = f"{note}\n{text}" if text else note
        images = []
    content: str | list[ContentPart] | None
    if isinstance(message.content, list):
        parts: list[ContentPart] = [TextPart(text=text)] if text else []
        kept = (ImagePart, AudioPart, FilePart) if images else (AudioPart, FilePart)
        parts.extend(p for p in message.content if isinstance(p, kept))
        content = parts
    elif message.content is None and not text:
        content = None
    else:
        content = text
    before = message.metadata.get("truncated_chars", 0)
    total = (before if isinstance(before, int) else 0) + removed
    return message.model_copy(
        update={"content": content, "metadata": {**message.metadata, "truncated_chars": total}}
    )


def cut_message(
    message: ChatMessage, max_tokens: int, counter: TokenCounter
) -> ChatMessage | None:
    """A copy of ``message`` that costs at most ``max_tokens``, or None if impossible.

    The text content is cut head+tail (marker included); if the images alone are too
    expensive they are replaced by a note. Tool-call names and arguments are never cut
    (a truncated JSON argument would be a different call), nor are audio and file parts
    (see the module doc), so a message whose calls or binary parts alone exceed the limit
    cannot be cut. The copy records the removed character count in
    ``metadata["truncated_chars"]``. The original is returned unchanged if it fits.
    """
    if counter.count_message(message) <= max_tokens:
        return message
    text = message.text
    image_options = (True, False) if message.images else (True,)
    for keep_images in image_options:

        def fits(keep: int, keep_images: bool = keep_images) -> bool:
            candidate = _with_text(message, head_tail(text, keep), keep_images=keep_images)
            return counter.count_message(candidate) <= max_tokens

        if text:
            keep = _max_fitting(len(text), fits)
            if keep is not None:
                return _with_text(
                    message,
                    head_tail(text, keep),
                    keep_images=keep_images,
                    removed=len(text) - keep,
                )
        else:
            stripped = _with_text(message, "", keep_images=keep_images)
            if counter.count_message(stripped) <= max_tokens:
                return stripped
    return None


def cut_group(
    members: Sequence[ChatMessage], max_tokens: int, counter: TokenCounter
) -> list[ChatMessage] | None:
    """Shrink a tool group (or a single message) to ``max_tokens``, or None if impossible.

    Each member's text gets a share of the room left after the fixed costs (overheads,
    tool-call arguments, images) in proportion to its original text size, so a long tool
    output gives up more than a short assistant remark. No member is ever dropped: the
    group stays well-formed for the provider.
    """
    if counter.count_messages(members) <= max_tokens:
        return list(members)
    if len(members) == 1:
        single = cut_message(members[0], max_tokens, counter)
        return None if single is None else [single]
    full = [counter.count_message(m) for m in members]
    fixed = [counter.count_message(_with_text(m, "", keep_images=True)) for m in members]
    room = max_tokens - sum(fixed)
    if room < 0:
        return None
    text_total = sum(max(0, f - x) for f, x in zip(full, fixed, strict=True)) or 1
    out: list[ChatMessage] = []
    for m, f, x in zip(members, full, fixed, strict=True):
        limit = x + room * max(0, f - x) // text_total
        cut = cut_message(m, limit, counter)
        if cut is None:
            cut = _with_text(m, "", keep_images=True, removed=len(m.text))
        out.append(cut)
    return out
