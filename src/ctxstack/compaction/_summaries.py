"""Summaries that keep their sources: ranges, condensation, expansion (issue 29).

A rolling summary stands for messages the context no longer holds. With an archive that
also keeps summaries (:class:`SummaryStore` — :class:`~ctxstack.compaction.HistoryArchive`
and the service's ``ConversationArchive`` do), each summary the pipeline makes is recorded
as a :class:`SummaryNode`:

* **its own messages** — the archive refs of the original messages it summarised itself,
  in conversation order (a cleared output by its placeholder's ref, so the original);
* **its children** — the earlier summaries it *condensed* (the rolling summary it folded
  in), each keeping its own messages and so its own range;
* **its range** — ``first`` … ``last`` ref and ``count``: every message it stands for,
  its children's and its own, in conversation order.

The hierarchy is kept **two levels deep**: a summary that condenses a summary which itself
had children adopts those children (they stay its children, listed oldest first, beside
the summary it folded). So from the summary in the context, *every* original message is
at most two expansions away: :func:`expand` of the summary lists its children and its own
messages; :func:`expand` of a child lists that child's own messages.

The summary message in the context carries its ref (metadata :data:`SUMMARY_REF_KEY`, and
a line of its text naming it, :func:`summary_ref_note`), so the model can expand it with
the recall tool: the agent's ``recall(ref="s3")`` and the proxy's
``ctxstack_recall(query="s3")`` both accept a summary ref; a page beyond the first is
named ``s3/2`` (:func:`parse_page_ref`). Expansion is bounded: :data:`PAGE_MESSAGES`
messages a page, each cut to its share of the caller's size, with a line naming the next
page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ctxstack.compaction._cut import cut_text
from ctxstack.compaction._prompts import SUMMARY_PREFIX
from ctxstack.messages import ChatMessage

SUMMARY_REF_KEY = "summary_ref"
"""Metadata key of a summary message: the ref its :class:`SummaryNode` is archived under."""
LATEST_SUMMARY_REF = "summary"
"""The ref every summary store also answers to: its newest summary (what the tool
description can name before any summary exists, e.g. for a summary loaded from storage
whose text names no ref)."""
PAGE_MESSAGES = 20
"""Messages one expansion page shows."""
CHILD_PREVIEW_CHARS = 240
"""Characters of a child summary's text an expansion shows (its ref reads the rest)."""
SUMMARY_TEXT_CHARS = 800
"""Characters of the expanded summary's own text its first page shows (a child's text is
not in the context: this is where the model reads it)."""
EXPANSION_CHARS = 12_000
"""The default size of a rendered expansion (what one recall result may hold)."""
_PAGE_REF = re.compile(r"^\s*(?:ref\s*)?([A-Za-z]+\d+|summary)(?:\s*/\s*(\d+))?\s*$")
_NOTE = re.compile(r"^Summary ref \S+ covers .*$", re.MULTILINE)


class SummaryNode(BaseModel):
    """One archived summary (see the module doc). ``ref`` is empty until archived."""

    model_config = ConfigDict(frozen=True)

    ref: str = ""
    text: str
    """The summary's text (prefix and notes removed): what a child preview shows."""
    messages: tuple[str, ...] = ()
    """Refs of the original messages it summarised itself, in conversation order."""
    children: tuple[str, ...] = ()
    """Refs of the earlier summaries it condensed, oldest first (two levels at most)."""
    first: str | None = None
    """The first message of its whole range (its oldest child's first, else its own)."""
    last: str | None = None
    """The last message of its whole range."""
    count: int = Field(default=0, ge=0)
    """Messages in its whole range: its children's own messages plus its own."""

    @property
    def level(self) -> int:
        """1 for a summary of messages only, 2 for one that condensed summaries."""
        return 2 if self.children else 1

    def range_text(self) -> str:
        """``a1 … a60 (60 messages)``: the range as a line shows it."""
        if not self.count:
            return "no messages"
        span = self.first if self.first == self.last else f"{self.first} … {self.last}"
        return f"{span} ({_plural(self.count, 'message')})"


@runtime_checkable
class SummaryStore(Protocol):
    """An archive that also keeps summaries (optional beside :class:`Archive`: an archive
    without it gets no hierarchy, and its summaries name no ref)."""

    async def add_summary(self, node: SummaryNode) -> str:
        """Archive ``node``; its ref (``node.ref`` is ignored)."""
        ...

    async def get_summary(self, ref: str) -> SummaryNode | None:
        """The summary ``ref`` names (its ref set), or None if there is none."""
        ...

    async def get(self, ref: str) -> ChatMessage | None:
        """The archived message ``ref`` names (as :class:`~ctxstack.compaction.Archive`)."""
        ...


def context_ref(archive: object, ref: str) -> str:
    """The ref a summary placed in the context names in its text: ``ref``, unless the
    archive defines ``context_ref(ref)`` — a store whose refs do not outlive the current
    run (the service's turn-scoped summaries, which are saved as a checkpoint and loaded
    again by later turns) names one that stays right, such as ``"summary"``."""
    method = getattr(archive, "context_ref", None)
    return str(method(ref)) if callable(method) else ref


def summary_text(message: ChatMessage, note: str | None = None) -> str:
    """A summary message's text without the ``[Conversation summary]`` prefix, the ref
    note and ``note`` (the recall hint): what a :class:`SummaryNode` keeps."""
    text = _NOTE.sub("", message.text.removeprefix(SUMMARY_PREFIX))
    return (text.replace(note, "") if note else text).strip()


def strip_ref_note(text: str) -> str:
    """``text`` without the line :func:`summary_ref_note` adds (for readers, not models)."""
    return _NOTE.sub("", text).strip()


def summary_ref_note(node: SummaryNode, tool: str = "recall", name: str | None = None
                     ) -> str:
    """The line a summary in the context ends with: its ref (``name``, default
    ``node.ref``) and how to expand it."""
    name = name or node.ref
    return (f"Summary ref {name} covers {node.range_text()}: call `{tool}` with "
            f'"{name}" to list what it summarises.')


def condensed_children(previous: Sequence[SummaryNode]) -> tuple[str, ...]:
    """The children of a summary that condenses ``previous`` (in order): each previous
    summary's own children first, then itself — so the hierarchy stays two levels deep."""
    out: dict[str, None] = {}
    for node in previous:
        out.update(dict.fromkeys(node.children))
        out[node.ref] = None
    return tuple(out)


def make_node(text: str, messages: Sequence[str], children: Sequence[SummaryNode]
              ) -> SummaryNode:
    """A :class:`SummaryNode` (no ref yet) for a summary of ``messages`` (its own, in
    order) that condenses ``children`` (every child, flattened, oldest first)."""
    own = tuple(messages)
    firsts = [c.messages[0] for c in children if c.messages] + list(own[:1])
    lasts = list(own[-1:]) or [c.messages[-1] for c in children if c.messages][-1:]
    return SummaryNode(
        text=text, messages=own, children=tuple(c.ref for c in children),
        first=firsts[0] if firsts else None, last=lasts[0] if lasts else None,
        count=sum(len(c.messages) for c in children) + len(own))


async def record_summary(
    archive: object, summary: ChatMessage, folded: Sequence[ChatMessage],
    refs: Sequence[str], *, note: str | None = None,
) -> SummaryNode | None:
    """Archive the summary that folded ``folded`` (its earlier summaries and originals, in
    order) and return its node; None when ``archive`` keeps no summaries. ``refs`` are the
    archive refs of the originals (``folded`` less its summaries), in order; ``note`` a
    line of the summary's text that is not part of what it says (the recall hint).

    Children: every earlier summary in ``folded`` that names a ref this archive knows,
    with their own children (:func:`condensed_children`); an earlier summary without one
    (made without this archive) is condensed into the text but cannot be expanded.
    """
    if not isinstance(archive, SummaryStore):
        return None
    previous: list[SummaryNode] = []
    for message in folded:
        if message.kind == "summary":
            ref = message.metadata.get(SUMMARY_REF_KEY)
            node = await archive.get_summary(ref) if isinstance(ref, str) else None
            if node is not None:
                previous.append(node)
    known = {n.ref: n for n in previous}
    children: list[SummaryNode] = []
    for ref in condensed_children(previous):
        child = known.get(ref) or await archive.get_summary(ref)
        if child is not None:
            children.append(child)
    node = make_node(summary_text(summary, note), refs, children)
    return node.model_copy(update={"ref": await archive.add_summary(node)})


def with_ref(summary: ChatMessage, node: SummaryNode, tool: str = "recall",
             name: str | None = None) -> ChatMessage:
    """``summary`` naming ``node``'s ref: in its metadata, and in a last line of its text
    (``name`` there when given, see :func:`context_ref`)."""
    return summary.replace(
        content=f"{summary.text}\n\n{summary_ref_note(node, tool, name)}",
        metadata={**summary.metadata, SUMMARY_REF_KEY: node.ref})


class ExpandedMessage(BaseModel):
    """One message an expansion lists: its archive ref and the message (None: the archive
    no longer has it)."""

    model_config = ConfigDict(frozen=True)

    ref: str
    message: ChatMessage | None


class Expansion(BaseModel):
    """A summary expanded: its node, its children's nodes, and one page of its own
    messages, in conversation order."""

    model_config = ConfigDict(frozen=True)

    summary: SummaryNode
    children: list[SummaryNode]
    messages: list[ExpandedMessage]
    page: int
    pages: int


def parse_page_ref(text: str) -> tuple[str, int] | None:
    """``"s3"`` → ``("s3", 1)``, ``"s3/2"`` → ``("s3", 2)``; None if ``text`` is no ref."""
    match = _PAGE_REF.match(text)
    if match is None:
        return None
    return match.group(1), max(1, int(match.group(2) or 1))


async def expand(
    archive: object, ref: str, page: int = 1, per_page: int = PAGE_MESSAGES
) -> Expansion | None:
    """The summary ``ref`` expanded (see :class:`Expansion`); None when ``archive`` keeps no
    summaries or has none by that ref. ``page`` counts from 1; one past the last is empty.
    """
    if not isinstance(archive, SummaryStore):
        return None
    node = await archive.get_summary(ref)
    if node is None:
        return None
    children = [c for r in node.children if (c := await archive.get_summary(r)) is not None]
    per_page = max(1, per_page)
    pages = max(1, -(-len(node.messages) // per_page))
    page = max(1, page)
    shown = node.messages[(page - 1) * per_page : page * per_page]
    messages = [ExpandedMessage(ref=r, message=await archive.get(r)) for r in shown]
    return Expansion(summary=node, children=children, messages=messages, page=page,
                     pages=pages)


def render_expansion(expansion: Expansion, tool: str = "recall",
                     max_chars: int = EXPANSION_CHARS) -> str:
    """An expansion as a tool result within about ``max_chars``: the range, on the first
    page the summary's text (cut) and the children (each a ref, a range and a preview),
    the page's messages (each cut to its share), and the next page's ref."""
    node = expansion.summary
    lines = [f"[summary {node.ref}: {node.range_text()}"
             + (f", condensing {_plural(len(expansion.children), 'earlier summary')}]"
                if expansion.children else "]")]
    if expansion.page == 1 and node.text:
        lines.append(f"Its text: {cut_text(' '.join(node.text.split()), SUMMARY_TEXT_CHARS)}")
    if expansion.children and expansion.page == 1:
        lines.append(f"Earlier summaries it condensed (call `{tool}` with one's ref for "
                     "the messages it summarised):")
        for child in expansion.children:
            preview = " ".join(child.text.split())
            if len(preview) > CHILD_PREVIEW_CHARS:
                preview = preview[:CHILD_PREVIEW_CHARS] + "…"
            own = child.model_copy(update={
                "first": child.messages[0] if child.messages else None,
                "last": child.messages[-1] if child.messages else None,
                "count": len(child.messages)})
            lines.append(f"- {child.ref}: {own.range_text()}: {preview}")
    if node.messages:
        first, last = node.messages[0], node.messages[-1]
        lines.append(f"Messages it summarised itself ({first} … {last}), page "
                     f"{expansion.page} of {expansion.pages}:")
    else:
        lines.append("It summarised no messages itself beyond the summaries above.")
    head = "\n".join(lines)
    room = max(0, max_chars - len(head) - 120)
    share = max(160, room // max(1, len(expansion.messages)))
    body = [_render_message(m, share) for m in expansion.messages]
    tail = []
    if expansion.page < expansion.pages:
        tail.append(f'More: call `{tool}` with "{node.ref}/{expansion.page + 1}".')
    elif node.messages and not expansion.messages:
        tail.append(f"No page {expansion.page}: it has {expansion.pages}.")
    return "\n".join([head, *body, *tail])


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun[:-1]}ies" if noun.endswith("y") \
        else f"{n} {noun}s"


def _render_message(item: ExpandedMessage, chars: int) -> str:
    message = item.message
    if message is None:
        return f"[{item.ref}] (no longer archived)"
    label = message.role if not message.name else f"{message.role} {message.name}"
    body = message.text
    for call in message.tool_calls or ():
        body += f"\n[tool call] {call.name}({call.arguments_json})"
    return f"[{item.ref} {label}] {cut_text(body.strip(), chars)}"
