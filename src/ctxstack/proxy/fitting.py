"""Fitting one chat request into its model's budget: unchanged, checkpoint, or the guard.

The decision, cheapest first:

1. **Within budget** (by the requested model's counter — exact when its tokenizer is known
   offline, :mod:`ctxstack.proxy.counting` —, tool definitions included, the counter's
   margin kept free as everywhere a budget is fitted, no message over the cut size) → the
   request is forwarded *unchanged*: the very bytes the client sent.
2. **A checkpoint covers a prefix** (:mod:`ctxstack.proxy.checkpoints`) → system prompt +
   stored summary + the messages after it. Within budget → forwarded so (method
   ``checkpoint``): no summariser call for a conversation that grew by a turn.
3. **Otherwise the guard** (:class:`~ctxstack.ContextGuard`, its whole pipeline) on that
   list — or on the full list when no checkpoint applies. The system prompt and the last
   user message are never compacted: the last user message is pinned, and the cut size is
   raised above both. A new summary becomes a checkpoint for the requests that follow.

Pure of HTTP: the route hands in a parsed request and a budget and gets a :class:`Fit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxstack import LLM, ChatMessage, CompactionOptions, ContextGuard, TokenCounter, Usage
from ctxstack.compaction import Archive
from ctxstack.proxy.checkpoints import CheckpointStore
from ctxstack.proxy.counting import ModelCounters
from ctxstack.proxy.recall import RECALL_TOOL
from ctxstack.proxy.request import WIRE_KEY, CompletionRequest, WireConversation
from ctxstack.store.proxy_checkpoints import ProxyCheckpointRecord
from ctxstack.tokens._counter import effective_budget

FitMethod = Literal["none", "checkpoint", "mask", "llm", "truncate"]
DEFAULT_CUT_CHARS = 50_000
MIN_LIMIT = 256
"""The smallest message budget the guard is given (when tool definitions eat the rest)."""


@dataclass(frozen=True)
class Fit:
    """What to forward. ``messages`` is None when the request goes out unchanged."""

    messages: list[dict[str, Any]] | None
    method: FitMethod
    original: int
    kept: int
    summarized: int
    tokens: int
    """Estimated input tokens of what is forwarded (messages and tool definitions)."""
    tokens_before: int
    summarizer_usage: Usage = field(default_factory=Usage)
    checkpoint_saved: bool = False
    reason: str | None = None
    counter: str = ""
    """The counter's ``cache_key`` (``tiktoken:o200k_base``, ``bpe-heuristic``, …)."""
    view: Literal["", "extended", "recomputed"] = ""
    """With sessions: the session's stored view extended, or recomputed (and stored)."""
    recall: bool = False
    """Something of the session is archived: offer ``ctxstack_recall``."""
    session: str = ""
    """The session's key (empty without sessions)."""


class Fitter:
    """Applies the decision above with the counters, summariser timeout and checkpoint store.

    ``counters``: one counter per requested model name (:class:`ModelCounters`), or a
    single counter for every model.
    """

    def __init__(self, counters: ModelCounters | TokenCounter, store: CheckpointStore | None,
                 *, summary_timeout: float) -> None:
        self.counters = (counters if isinstance(counters, ModelCounters)
                         else ModelCounters(fixed=counters))
        self.store = store
        self.summary_timeout = summary_timeout

    async def fit(self, request: CompletionRequest, budget: int, *, salt: str,
                  summarizer: LLM | None) -> Fit:
        """Fit ``request`` into ``budget`` tokens (messages and tool definitions)."""
        counter = await self.counters.aget(request.model)
        conv = request.conversation
        tools = request.tools_tokens(counter)
        limit = max(MIN_LIMIT, budget - tools)
        total = conv.tokens(counter)
        n = len(conv)
        if (total <= effective_budget(limit, counter)
                and conv.longest_text() <= DEFAULT_CUT_CHARS):
            return Fit(None, "none", n, n, 0, total + tools, total + tools,
                       counter=counter.cache_key)
        return await self.compact(request, counter, limit, tools, total, salt=salt,
                                   summarizer=summarizer)

    async def refit(self, request: CompletionRequest, limit: int, *, salt: str,
                    summarizer: LLM | None) -> Fit:
        """Compact to an explicit, smaller ``limit`` (after an upstream overflow error)."""
        counter = await self.counters.aget(request.model)
        tools = request.tools_tokens(counter)
        total = request.conversation.tokens(counter)
        return await self.compact(request, counter, max(MIN_LIMIT, limit - tools), tools,
                                   total, salt=salt, summarizer=summarizer)

    async def compact(self, request: CompletionRequest, counter: TokenCounter, limit: int,
                       tools: int, total: int, *, salt: str, summarizer: LLM | None,
                       archive: Archive | None = None, reuse: bool = True) -> Fit:
        """The checkpoint, else the guard (with ``archive``: what it compacts away is
        archived, and its placeholders and summary note name ``ctxstack_recall``, the tool
        the proxy reads an archive back with). ``reuse=False``: never the bare checkpoint
        reuse (a session's view is being recomputed because it overflowed: the guard
        compacts with headroom)."""
        conv = request.conversation
        n = len(conv)
        key = counter.cache_key
        record = None
        if self.store is not None:
            record = await self.store.find(conv.messages, conv.prompt_end, salt)
        if record is not None and reuse:
            same = record.model == request.model[:200]  # then the same counter wrote it
            summary_tokens = record.token_count if same else counter.count_message(
                ChatMessage(role="system", content=record.summary))
            reused = _reuse(conv, record, summary_tokens, effective_budget(limit, counter),
                            tools, total)
            if reused is not None:
                return dataclasses.replace(reused, counter=key)
        working = _working(conv, record)
        if record is not None and archive is not None:
            # The checkpoint may have been written for another session of this key (or
            # before sessions): what its summary stands for must be recallable here too.
            # Archiving is idempotent per session, so a prefix archived already stays.
            anchor = _anchor(conv, record.covered)
            await archive.add([conv.view(i) for i in range(conv.prompt_end, record.covered)
                               if i != anchor])
        guard = ContextGuard(
            compact_llm=summarizer,
            default_budget=limit,
            max_message_chars=max(DEFAULT_CUT_CHARS, conv.longest_protected() + 1),
            options=CompactionOptions(timeout=self.summary_timeout, **(
                {"recall_tool": RECALL_TOOL} if archive is not None else {})),
            counter=counter,
            archive=archive,
        )
        result, event = await guard.check(working, limit)
        unchanged = result is working or _same(result, working)
        if unchanged and record is None:
            return Fit(None, "none", n, n, 0, total + tools, total + tools, counter=key)
        tokens = counter.count_messages(result) + tools
        wire = [conv.wire_form(m) for m in result]
        if event is None or unchanged:
            if record is None:
                # The guard's first stage only: over-long messages cut head+tail, the rest
                # within budget — no compaction, so no event, but a changed body.
                return Fit(wire, "truncate", n, len(result), 0, tokens, total + tools,
                           reason="over-long messages cut", counter=key)
            return Fit(wire, "checkpoint", n, len(result), _summarized(conv, record.covered),
                       tokens, total + tools, counter=key)
        summarized = 0
        saved = False
        covered = _covered(conv, result)
        summary = next((m for m in result if m.kind == "summary"), None)
        if event.method == "llm" and summary is not None:
            summarized = _summarized(conv, covered)
            if self.store is not None:
                saved = await self.store.save(
                    conv.messages, conv.prompt_end, salt, covered=covered, summary=summary.text,
                    token_count=counter.count_message(summary), model=request.model)
        elif summary is not None and record is not None:
            summarized = _summarized(conv, record.covered)
        return Fit(wire, event.method, n, len(result), summarized, tokens, total + tools,
                   summarizer_usage=event.usage, checkpoint_saved=saved, reason=event.reason,
                   counter=key)


def _reuse(conv: WireConversation, record: ProxyCheckpointRecord, summary_tokens: int,
           fits: int, tools: int, total: int) -> Fit | None:
    """System prompt + checkpoint summary + the rest, when that is within ``fits`` tokens.

    Decided from the per-message counts already made, without building a single message
    model: the common case of a long conversation between two overflows.
    """
    if len(conv.counts) != len(conv) or conv.longest_text(record.covered) > DEFAULT_CUT_CHARS:
        return None
    counts = conv.counts
    anchor = _anchor(conv, record.covered)
    tokens = (sum(counts[:conv.prompt_end]) + summary_tokens + sum(counts[record.covered:])
              + (counts[anchor] if anchor is not None else 0))
    if tokens > fits:
        return None
    summary = {"role": "system", "content": record.summary}
    kept = [conv.messages[anchor]] if anchor is not None else []
    wire = [*conv.messages[:conv.prompt_end], summary, *kept, *conv.messages[record.covered:]]
    return Fit(wire, "checkpoint", len(conv), len(wire),
               _summarized(conv, record.covered), tokens + tools, total + tools)


def _working(conv: WireConversation, record: ProxyCheckpointRecord | None) -> list[ChatMessage]:
    """The list the guard sees: everything, or prompt + stored summary + the rest."""
    if record is None:
        return conv.views()
    summary = ChatMessage(role="system", content=record.summary, metadata={"kind": "summary"})
    anchor = _anchor(conv, record.covered)
    kept = [conv.view(anchor)] if anchor is not None else []
    return [*conv.views(0, conv.prompt_end), summary, *kept, *conv.views(record.covered)]


def _same(a: Sequence[ChatMessage], b: Sequence[ChatMessage]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _covered(conv: WireConversation, result: Sequence[ChatMessage]) -> int:
    """Wire messages before the first one kept after the summary: what the summary covers.

    One exception: the user turn of a long tool loop (the last user message, pinned) is
    kept right after the summary while the calls and results after it were summarised.
    The summary then covers up to the first kept message after that anchor, and every
    reuse puts the anchor back (:func:`_anchor`) — otherwise no checkpoint could be saved
    and each iteration of an agent's tool loop would be summarised afresh.
    """
    kept = [m.metadata.get(WIRE_KEY) for m in result]
    after = sorted(i for i in kept if isinstance(i, int) and i >= conv.prompt_end)
    if not after:
        return len(conv)
    if (len(after) > 1 and after[0] == conv.last_user
            and conv.messages[after[1]].get("role") != "user"):
        return after[1]
    return after[0]


def _anchor(conv: WireConversation, covered: int) -> int | None:
    """The user message a checkpoint covering ``covered`` messages keeps verbatim, if any.

    After a summary the kept history starts with a user turn; a checkpoint whose first
    message after the summary is not one was cut inside a tool loop, whose user message
    (the last one before ``covered``) was pinned, never summarised.
    """
    if covered >= len(conv) or conv.messages[covered].get("role") in ("user", None):
        return None
    for i in range(covered - 1, conv.prompt_end - 1, -1):
        if conv.messages[i].get("role") == "user":
            return i
    return None


def _summarized(conv: WireConversation, covered: int) -> int:
    """Messages a checkpoint covering ``covered`` stands for (its anchor not counted)."""
    return covered - conv.prompt_end - (0 if _anchor(conv, covered) is None else 1)
