"""Layer 3: ContextGuard, the per-iteration budget enforcer.

Called at the top of every ReAct iteration (and inside every DAG step's agent), it is the
last line of defence before messages reach the provider. Three stages:

1. **Cut oversized messages.** Any single message whose text exceeds
   ``max_message_chars`` (a runaway tool output, a pasted dump) is cut head+tail around a
   ``[Truncated: N characters removed]`` marker; every other field is kept. A message that
   passed once is remembered as vetted (on the frozen message object itself), so later
   calls do not look at its text again; and the guard remembers the last list it vetted,
   so a list that starts with the same message objects skips that prefix altogether.
2. **Estimate.** Within budget → the input list itself is returned. The total comes from
   the guard's :class:`~ctxstack.tokens._counter.MessageListMemo`: when the list extends the one
   counted last (same message objects), that total plus a cached lookup per new message,
   so a conversation that grew by k messages costs O(k) steps and one C-speed identity
   pass. Most iterations end here: compaction is the exception.
3. **Compact, cheapest first** (:mod:`ctxstack.compaction._stages`). Over budget → first the
   pinned cap (pinned content above ``pinned_cap`` of the budget unpins the oldest
   injected messages; the current query stays pinned, cut if it alone is too large), then
   clear old tool outputs ("mask"); if that is not enough, the rolling LLM summary with
   the hint's prompt when a compact LLM is set ("llm"), else ``smart_truncate``
   ("truncate"). Any LLM failure — exception, timeout, empty or unusable answer — ends in
   truncation: the agent never sees it. Given the coming call's ``tools``, the summary
   asks with the conversation's cached prefix (these messages as the model saw them, the
   tools, the instruction last; :mod:`ctxstack.compaction._prefix_request`). Each
   compaction is reported as a :class:`~ctxstack.guard.CompactionEvent` whose ``method``
   names the stage.

With an ``archive`` (:class:`ctxstack.HistoryArchive`, or the service's database-backed
one) everything the guard masks, summarises or drops is archived first, and the agents
offer the model a ``recall`` tool to read it back: compaction becomes reversible.

The pinned cap runs only when compaction is needed: it exists to leave room for history
in a compaction, and within budget there is nothing to make room for (so the caller's list
comes back untouched, pinned flags included).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ctxstack.budget import ModelBudget, input_tokens
from ctxstack.compaction import Archive, CompactionOptions, CompactionResult, CompactUtils, Hint
from ctxstack.compaction._archive import ARCHIVE_REF_KEY
from ctxstack.compaction._llm_compact import resolve_options
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._prompts import check_hint
from ctxstack.compaction._stages import compact_staged
from ctxstack.compaction._summaries import SUMMARY_REF_KEY
from ctxstack.errors import ConfigError, MessageError
from ctxstack.guard._events import (
    CompactionEvent,
    CompactionMethod,
    GuardCheck,
    GuardCheckEvent,
    GuardTotals,
    first_changed,
)
from ctxstack.guard._refits import RefitMemo, mark
from ctxstack.guard._rules import apply_pinned_cap, cut_message, is_oversized
from ctxstack.messages import (
    ChatMessage,
    from_openai_messages,
    repair_tool_turns,
    to_openai_messages,
    tool_turns_valid,
)
from ctxstack.messages._model import not_a_chat_message
from ctxstack.protocol import LLM, ToolSpec
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._counter import MessageListMemo, common_prefix, effective_budget, memo_applies

log = logging.getLogger(__name__)

_CUT_REFS_KEPT = 256
"""Cut originals whose archive reference the guard remembers (a caller that keeps
passing an original gets the same reference, and the original is archived once)."""

OnCompact = Callable[[CompactionEvent], Awaitable[None] | None]
"""A compaction listener: a plain function or a coroutine function of the event."""
OnCheck = Callable[[GuardCheckEvent], Awaitable[None] | None]
"""A check listener: a plain function or a coroutine function of the check's report."""

E = TypeVar("E")
_Listener = Callable[[E], Awaitable[None] | None]

DEFAULT_BUDGET = 64_000
DEFAULT_TIMEOUT = 10.0
"""Seconds the summariser may take when ``options.timeout`` is not set."""
MIN_MESSAGE_CHARS = 200


class ContextGuard:
    """Keeps a message list within a token budget before each LLM call.

    Args:
        compact_llm: the model that writes summaries (usually the fast one); ``None``
            means truncation only.
        default_budget: tokens (or a :class:`~ctxstack.budget.ModelBudget`, whose
            ``usable_input_tokens`` is used) when a call passes no budget.
        max_message_chars: the size above which one message is cut head+tail.
        on_compact: a listener, or a list of listeners, called with each
            :class:`CompactionEvent` (sync or async), in order. ``guard.on_compact`` is that
            list: append to it to observe a guard built elsewhere. A listener that raises is
            logged and ignored: observability must not break the agent.
        on_check: a listener, or a list of listeners, called once after every completed
            check (compacting or not, after the ``on_compact`` listeners) with a
            :class:`~ctxstack.guard.GuardCheckEvent`: the messages in, the
            :class:`GuardCheck` returned, the budget and the hint. ``guard.on_check`` is
            that list. Same rules as ``on_compact``: sync or async, in order, a listener
            that raises is logged and ignored. With no listener, a check pays nothing.
        options: the :class:`~ctxstack.compaction.CompactionOptions`: everything about how
            a compaction runs (keep_recent, hint prompts or a custom ``prompt``,
            ``target_fill``, the mask watermarks, the summariser's ``timeout`` — 10 s when
            unset — and the ``strategies`` pipeline). The guard takes no copies of those
            as keyword arguments: one place, validated once.
        counter: the token counter (default: the heuristic; see
            :class:`~ctxstack.tokens.CalibratingCounter` for a self-correcting one).
        pinned_cap: share of the budget pinned messages may take before injected ones
            are unpinned.
        archive: where masked, summarised and dropped messages go (see the module doc).

    Raises:
        ConfigError: an argument out of range (the message names it).
    """

    def __init__(
        self,
        compact_llm: LLM | None = None,
        default_budget: int | ModelBudget = DEFAULT_BUDGET,
        max_message_chars: int = 50_000,
        *,
        options: CompactionOptions | None = None,
        counter: TokenCounter | None = None,
        archive: Archive | None = None,
        pinned_cap: float = 0.5,
        on_compact: OnCompact | Sequence[OnCompact] | None = None,
        on_check: OnCheck | Sequence[OnCheck] | None = None,
    ) -> None:
        self.compact_llm = compact_llm
        self.default_budget = input_tokens(default_budget, "default_budget")
        if isinstance(max_message_chars, bool) or not isinstance(max_message_chars, int) or (
            max_message_chars < MIN_MESSAGE_CHARS
        ):
            raise ConfigError(
                f"max_message_chars: expected an integer >= {MIN_MESSAGE_CHARS}, "
                f"got {max_message_chars!r}"
            )
        if not 0 < pinned_cap <= 1:
            raise ConfigError(f"pinned_cap: expected 0 < pinned_cap <= 1, got {pinned_cap!r}")
        if archive is not None and not isinstance(archive, Archive):
            raise ConfigError(f"archive: expected an Archive (e.g. HistoryArchive), "
                              f"got {type(archive).__name__}")
        opts = resolve_options(options)
        # the summariser's deadline: the guard never waits on a model without one
        self.options = opts if opts.timeout is not None else opts.with_(timeout=DEFAULT_TIMEOUT)
        self.max_message_chars = max_message_chars
        self.on_compact: list[OnCompact] = _listeners(on_compact)
        self.on_check: list[OnCheck] = _listeners(on_check)
        self.timeout = float(self.options.timeout or DEFAULT_TIMEOUT)
        self.counter: TokenCounter = counter or DEFAULT_COUNTER
        self.pinned_cap = pinned_cap
        self.archive = archive
        # The last list stage 1 returned (every message in it vetted) with the limit it
        # was vetted against, and the memo of the last list counted.
        self._vetted: tuple[int, Sequence[ChatMessage]] = (max_message_chars, ())
        self._memo = MessageListMemo()
        # Originals stage 1 cut and archived (by id, the original held) → their reference.
        self._cut_refs: dict[int, tuple[ChatMessage, str]] = {}
        # Per conversation, the last result refitted for a carried=False caller: carried
        # on when its next input extends that one, and what the next estimate is
        # measured against (ctxstack.guard._refits).
        self._refits = RefitMemo()
        # Compaction totals; the two per-call counters are plain ints because the
        # under-budget path must not pay for building a pydantic object.
        self._totals = GuardTotals()
        self._checks = 0
        self._cuts = 0

    @property
    def _vetted_key(self) -> str:
        """Stored on each vetted message (in its per-message cache, which dies with the
        frozen object): "this message was checked against this limit and fits"."""
        return f"ctxstack.guard._guard.vetted:{self.max_message_chars}"

    # ------------------------------------------------------------------ public
    @property
    def keep_recent(self) -> int:
        """Messages an LLM compaction keeps verbatim at least (``options.keep_recent``)."""
        return self.options.keep_recent

    @property
    def target_fill(self) -> float:
        """The summary's low watermark (``options.target_fill``)."""
        return self.options.target_fill

    @property
    def prompt(self) -> str | None:
        """The custom summariser prompt, if any (``options.prompt``)."""
        return self.options.prompt

    @property
    def totals(self) -> GuardTotals:
        """Running totals since creation (or the last :meth:`reset_totals`)."""
        return self._totals.plus_checks(self._checks, self._cuts)

    def reset_totals(self) -> GuardTotals:
        """Start counting afresh (e.g. per chat turn); returns the totals so far."""
        previous = self.totals
        self._totals, self._checks, self._cuts = GuardTotals(), 0, 0
        return previous

    async def check_and_compact(
        self,
        messages: Sequence[ChatMessage] | Sequence[Mapping[str, Any]],
        budget: int | ModelBudget | None = None,
        hint: Hint | str = "general",
        *,
        tools: Sequence[ToolSpec] | None = None,
        carried: bool = True,
    ) -> list[Any]:
        """Return ``messages`` fitted to ``budget`` tokens (default: the guard's).

        Within budget, with no oversized message and with valid tool turns, the very list
        passed in is returned (a list copy if a non-list sequence was passed); a broken log
        (an orphan tool result, a call with no result) comes back repaired by
        :func:`ctxstack.messages.repair_tool_turns`, so what goes to the provider is always
        a valid request. The input is never mutated.

        OpenAI-format dicts are accepted too (``[{"role": "user", "content": "…"}]``):
        converted at the boundary (:func:`ctxstack.messages.from_openai_messages`) and
        returned as dicts (:func:`ctxstack.messages.to_openai_messages`) — the list passed
        in when nothing changed. Each call converts the whole list, so a long-running loop
        that checks every iteration is cheaper on :class:`ChatMessage` objects, which the
        guard caches per message.

        Raises:
            ConfigError: unknown ``hint`` or an invalid ``budget``.
            MessageError: a message is malformed (the error names its index), or the list
                mixes dicts and :class:`ChatMessage` objects.
        """
        if messages and isinstance(messages[0], Mapping):
            converted = from_openai_messages(_all_dicts(messages))
            fitted = (await self.check(converted, budget, hint, tools=tools,
                                       carried=carried)).messages
            if fitted is converted:
                return messages if isinstance(messages, list) else list(messages)
            return to_openai_messages(fitted)
        return (await self.check(messages, budget, hint,  # type: ignore[arg-type]
                                 tools=tools, carried=carried)).messages

    async def check(
        self,
        messages: Sequence[ChatMessage],
        budget: int | ModelBudget | None = None,
        hint: Hint | str = "general",
        *,
        tools: Sequence[ToolSpec] | None = None,
        carried: bool = True,
    ) -> GuardCheck:
        """:meth:`check_and_compact`, also returning this call's :class:`CompactionEvent`.

        For callers that share one guard between concurrent tasks (agents, DAG steps) and
        need the events of *their* call: listeners see every call's events, this returns
        only its own (``event`` is ``None`` when nothing was compacted).

        ``tools``: the tools of the model call these messages are for (an empty list for
        none; the agent passes its own). Given, they say the messages are the conversation
        as that call sends it, and a summary asks the summariser with its cached prefix —
        these messages as the model saw them and these tools, the instruction last — so the
        provider's prompt cache serves it (:mod:`ctxstack.compaction._prefix_request`).
        ``None`` (the default): the summariser gets the transcript request, as a caller
        whose list is not what its model saw (or whose summariser frames the request
        itself) needs.

        ``carried``: whether the caller sends the result on as the start of its next call
        (an agent loop, a framework that keeps the fitted history: the default), so a
        truncation leaves the low watermark's headroom and the next calls append without
        truncating again. False for a caller that fits its whole stored history afresh at
        every call (a memory or a per-request filter): the guard then remembers its last
        result for the conversation and, while the history extends the one it fitted,
        starts from that result plus the new messages, as for an agent loop
        (:mod:`ctxstack.guard._refits`); otherwise — a first call, an edited history,
        another process — headroom would only drop context, so the clearing of old tool
        outputs and the truncation's start move in steps fixed by the history (counted
        from its first message), and consecutive calls send the same prefix until a step
        is due (*Stable windows* in :mod:`ctxstack.compaction._truncate`). Hand such a
        caller's history from the same first message each time (the conversation's, or
        a summary checkpoint's).
        """
        checked = check_hint(hint)
        limit = self.default_budget if budget is None else input_tokens(budget, "budget")
        self._checks += 1
        current, cuts, total = self._cut_and_count(messages)
        cut = len(cuts)
        if cuts and self.archive is not None:
            current = await self._archive_cuts(cuts, current)
        if total <= effective_budget(limit, self.counter):
            self._cuts += cut
            result = GuardCheck(current, None)
        else:
            result = await self._over_budget(current, total, limit, checked, cut, tools,
                                             carried=carried)
        if self.on_check:
            await _notify(self.on_check, GuardCheckEvent(messages, result, limit, checked),
                          "on_check")
        return result

    async def _over_budget(
        self, current: list[ChatMessage], total: int, limit: int, hint: Hint, cut: int,
        tools: Sequence[ToolSpec] | None, *, carried: bool,
    ) -> GuardCheck:
        """Compact ``current``; for a refitting caller, from the last result it was given
        plus what it added since when its history extends the input of that result
        (:mod:`ctxstack.guard._refits`), as an agent loop carries its context."""
        if carried:
            return await self._compact(current, total, limit, hint, cut, tools)
        marks = tuple(mark(m) for m in current)  # once: compared, then remembered
        base = self._refits.carried(current, marks)
        if base is None:
            result = await self._compact(current, total, limit, hint, cut, tools,
                                         carried=False)
        else:
            tokens = self.counter.count_messages(base)
            if tokens <= effective_budget(limit, self.counter):
                self._cuts += cut
                result = GuardCheck(base, None)
            else:
                result = await self._compact(base, tokens, limit, hint, cut, tools)
        self._refits.remember(current, marks, result.messages)
        return result

    # ------------------------------------------------------------------ stages 1 and 2
    def _cut_and_count(
        self, messages: Sequence[ChatMessage]
    ) -> tuple[list[ChatMessage], list[tuple[ChatMessage, ChatMessage]], int]:
        """Stage 1 and the estimate: ``(current, (original, cut copy) pairs, total tokens)``.

        One identity pass against the last list vetted (kept as the memo's own snapshot
        when the memo counts for this counter, so the pass serves both): its shared prefix
        is not vetted again, and when the list extends that one only the new messages are
        counted. After the prefix, already-vetted messages cost one membership test each
        and only the first unvetted one on are examined; a new list is built only if one
        is cut (cuts fall after the shared prefix, so the prefix stays shared).
        """
        as_list = messages if isinstance(messages, list) else list(messages)
        limit, last = self._vetted
        shared = common_prefix(last, as_list) if limit == self.max_message_chars else 0
        cuts: list[tuple[ChatMessage, ChatMessage]] = []
        if shared == len(as_list):
            current = as_list  # unchanged, or a prefix of the last list vetted
        else:
            current, cuts = self._vet_from(as_list, shared)
        hint: int | None = shared
        if shared < len(last) or shared < len(as_list):
            # A valid request out, always. The last list vetted was valid, so any prefix
            # of it that ends outside a tool group (the next message is no tool result)
            # is valid with no call open, and the list is valid when what follows that
            # prefix is: back up from `shared` to the start of its tool group and check
            # from there — the new messages and at most one group, not the whole list.
            start = shared
            while 0 < start < len(last) and last[start].role == "tool":
                start -= 1
            if not tool_turns_valid(current[start:] if start else current):
                current = repair_tool_turns(current)
                log.info("guard: repaired the tool turns of a %d-message list (orphan "
                         "results dropped, unanswered calls marked interrupted)", len(as_list))
                hint = start
        counter, memo = self.counter, self._memo
        if memo_applies(counter):
            total = memo.count(counter, current, hint if memo.last is last else None)
            self._vetted = (self.max_message_chars, memo.last)
        else:
            total = counter.count_messages(current)
            if shared < len(as_list):
                self._vetted = (self.max_message_chars, list(current))
        return current, cuts, total

    def _vet_from(
        self, as_list: list[ChatMessage], start: int
    ) -> tuple[list[ChatMessage], list[tuple[ChatMessage, ChatMessage]]]:
        """Vet ``as_list[start:]``: cut what is oversized, mark each message vetted."""
        key = self._vetted_key
        first = len(as_list)
        try:
            for i in range(start, len(as_list)):
                private = as_list[i].__pydantic_private__
                if key not in private["_token_cache"]:  # type: ignore[index]
                    first = i
                    break
        except (AttributeError, TypeError):
            first = start  # not a ChatMessage: reported with its index below
        if first == len(as_list):
            return as_list, []
        out: list[ChatMessage] | None = None
        cuts: list[tuple[ChatMessage, ChatMessage]] = []
        for i in range(first, len(as_list)):
            m = as_list[i]
            if not isinstance(m, ChatMessage):
                raise not_a_chat_message(i, m)
            cache = _cache(m)
            if key in cache:
                continue
            if is_oversized(m, self.max_message_chars):
                replacement = cut_message(m, self.max_message_chars)
                log.info(
                    "guard: cut oversized %s message #%d from %d to %d characters",
                    m.role, i, len(m.text), len(replacement.text),
                )
                if out is None:
                    out = list(as_list)
                out[i] = replacement
                cuts.append((m, replacement))
                m = replacement
            _cache(m)[key] = 1
        if out is None:
            return as_list, []
        return out, cuts

    async def _archive_cuts(
        self, cuts: list[tuple[ChatMessage, ChatMessage]], current: list[ChatMessage]
    ) -> list[ChatMessage]:
        """Archive the originals of the messages stage 1 cut (each once per archive), and
        tag each cut copy with its archive reference, so what the cut removed stays
        searchable (``recall``). Tagging changes metadata only: the count stands."""
        assert self.archive is not None
        known = self._cut_refs
        fresh = [m for m, _ in cuts if id(m) not in known]
        if fresh:
            for original, ref in zip(fresh, await self.archive.add(fresh), strict=True):
                known[id(original)] = (original, ref)  # the original held: its id stays its
            while len(known) > _CUT_REFS_KEPT:
                del known[next(iter(known))]
        tags: dict[int, ChatMessage] = {}
        for original, copy in cuts:
            entry = known.get(id(original))
            if entry is not None:
                tagged = copy.replace(metadata={**copy.metadata, ARCHIVE_REF_KEY: entry[1]})
                _cache(tagged)[self._vetted_key] = 1
                tags[id(copy)] = tagged
        return [tags.get(id(m), m) for m in current]

    def _rewritten_from(self, messages: list[ChatMessage], result: list[ChatMessage],
                        carried: bool) -> int:
        """Where ``result`` starts to differ from what the caller's previous model call
        most likely sent: the messages before the newest appended ones — or, for a caller
        that refits its stored history (``carried`` false), the result this guard
        refitted last for the same conversation, when it remembers one (that caller
        sends results, not its history)."""
        previous = None if carried else self._refits.result_marks(messages)
        if previous is None:
            return first_changed(messages, result)
        marks = [mark(m) for m in result]
        return next((i for i, (a, b) in enumerate(zip(previous, marks, strict=False))
                     if a != b), min(len(previous), len(marks)))

    # ------------------------------------------------------------------ stage 3
    async def _compact(
        self, messages: list[ChatMessage], tokens_before: int, limit: int, hint: Hint,
        cut_before: int, tools: Sequence[ToolSpec] | None = None, *, carried: bool = True,
    ) -> GuardCheck:
        started = time.perf_counter()
        counter = self.counter
        fits = effective_budget(limit, counter)  # what the result may fill (margin kept)
        pool, unpinned, cut_queries = apply_pinned_cap(messages, fits, self.pinned_cap, counter)
        # The messages as the model saw them (before the pinned cap, which keeps positions).
        seen = CallPrefix.of(seen=messages, tools=tools) if tools is not None else None
        detailed, reason = await self._staged(pool, limit, hint, seen, carried=carried)
        result = detailed.messages
        method: CompactionMethod = "truncate" if detailed.method == "none" else detailed.method
        if method == "truncate" and reason is None and self.compact_llm is not None:
            reason = detailed.reason or "the summariser produced no summary"
        tokens_after = counter.count_messages(result)
        if tokens_after > fits:
            # Defence in depth: whatever compaction returned, enforce the budget once more.
            retried = CompactUtils.smart_truncate(result, limit, counter=counter)
            retried_tokens = counter.count_messages(retried)
            if retried_tokens < tokens_after:
                result, tokens_after = retried, retried_tokens
            if tokens_after > fits:
                log.warning(
                    "guard: still %d tokens over a %d-token budget after compaction: "
                    "system and pinned messages alone exceed it",
                    tokens_after - fits, fits,
                )
        event = CompactionEvent(
            hint=hint,
            method=method,
            reason=reason,
            budget=limit,
            messages_before=len(messages),
            messages_after=len(result),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            summarized=len(detailed.summarized) if method == "llm" else 0,
            masked=detailed.masked,
            archived=detailed.archived,
            summary_ref=_summary_ref(detailed) if method == "llm" else None,
            unpinned=unpinned,
            cut_messages=cut_before + cut_queries,
            usage=detailed.usage,
            duration_s=time.perf_counter() - started,
            cache_write_tokens_estimate=counter.count_messages(
                result[self._rewritten_from(messages, result, carried):]),
        )
        self._totals = self._totals.add(event)
        log.info(
            "guard: compacted (%s, hint %s) %d→%d messages, %d→%d tokens, budget %d, "
            "%d outputs cleared, %.3fs%s",
            event.method, hint, event.messages_before, event.messages_after,
            event.tokens_before, event.tokens_after, limit, event.masked, event.duration_s,
            f"; fell back: {reason}" if reason else "",
        )
        await self._report(event)
        return GuardCheck(result, event)

    async def _staged(
        self, pool: list[ChatMessage], limit: int, hint: Hint, prefix: CallPrefix | None = None,
        *, carried: bool = True,
    ) -> tuple[CompactionResult, str | None]:
        """The staged compaction; every failure, even an unexpected one, ends in truncation
        (with the reason)."""
        # compact_detailed enforces `timeout` on the LLM call itself; this outer deadline
        # only guards against a hang anywhere else (a misbehaving LLM wrapper or archive).
        deadline = self.timeout * 2 + 1.0
        try:
            async with asyncio.timeout(deadline):
                detailed = await compact_staged(
                    pool, self.compact_llm, limit, self.options.with_(hint=hint),
                    counter=self.counter, archive=self.archive, prefix=prefix,
                    carried=carried,
                )
        except TimeoutError:
            reason = f"compaction did not finish within {deadline:.1f}s"
        except Exception as exc:
            log.warning("guard: compaction failed unexpectedly", exc_info=True)
            reason = f"compaction error: {type(exc).__name__}: {exc}"
        else:
            return detailed, None
        fallback = CompactUtils.smart_truncate(pool, limit, counter=self.counter)
        return CompactionResult(
            messages=fallback, method="truncate", reason=reason,
            tokens_before=self.counter.count_messages(pool),
            tokens_after=self.counter.count_messages(fallback),
            messages_before=len(pool), messages_after=len(fallback),
        ), reason

    async def _report(self, event: CompactionEvent) -> None:
        await _notify(self.on_compact, event, "on_compact")



def _summary_ref(result: CompactionResult) -> str | None:
    """The archive ref the result's summary names, if it names one."""
    ref = result.summary.metadata.get(SUMMARY_REF_KEY) if result.summary is not None else None
    return ref if isinstance(ref, str) else None


def _all_dicts(messages: Sequence[object]) -> list[Mapping[str, Any]]:
    """``messages`` when every one is a dict; else a :class:`MessageError` naming the
    first that is not (a list mixing the two forms is ambiguous to return)."""
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise MessageError(
                f"messages[{i}]: expected an OpenAI-format dict like messages[0], got "
                f"{type(m).__name__} (pass all dicts or all ChatMessage objects; "
                "ctxstack.messages.from_openai_messages converts dicts)")
    return messages  # type: ignore[return-value]


def _listeners(given: _Listener[E] | Sequence[_Listener[E]] | None) -> list[_Listener[E]]:
    """A constructor's listener argument (none, one, or several) as a fresh list."""
    if given is None:
        return []
    return [given] if callable(given) else list(given)


async def _notify(listeners: list[_Listener[E]], event: E, name: str) -> None:
    """Call each listener in order (awaiting coroutines); one that raises is logged and
    ignored: observability must not break the agent."""
    for listener in list(listeners):
        try:
            outcome = listener(event)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            log.warning("guard: %s listener failed (ignored)", name, exc_info=True)


def _cache(message: ChatMessage) -> dict[str, int]:
    """The message's per-message cache, read directly: pydantic's private-attribute
    ``__getattr__`` costs ~1 µs, more than everything else on the under-budget path."""
    return message.__pydantic_private__["_token_cache"]  # type: ignore[index,no-any-return]
