"""Layer 4: ``DbMemory`` — a conversation's persisted history, loaded within the budget.

Read-only: :meth:`DbMemory.add_message` and :meth:`DbMemory.clear` do nothing, because the
chat service owns every write (it stores the user message before a run and the answer
after it, in one place).

What one :meth:`~DbMemory.get_messages` call does:

1. **Start from the newest checkpoint** (if any): its summary becomes a ``system``
   message ``[Conversation summary] …`` of kind ``"summary"``, and only messages after
   its ``last_seq`` are read.
2. **Read newest-first in pages, bounded by the budget.** User and assistant rows are read
   in ``seq`` order descending with a ``LIMIT``, and reading stops once the rows read hold
   ``load_window`` × the budget in tokens (default 2×). A load therefore costs
   O(budget), not O(conversation): a 10,000-message conversation with a recent
   checkpoint reads a few dozen rows. Anything older than the window that no checkpoint
   covers is **folded** into the rolling summary in chunks (:mod:`ctxstack.store.fold`),
   at most ``max_fold_chunks`` per load; the checkpoint offered afterwards covers it, so
   the next load continues where this one stopped. Only without a compact LLM, or past
   that bound, are older rows left out — counted exactly (``omitted_count``) and logged.
   A window that leaves rows out starts at a block boundary of ``seq`` (a power of two
   of rows, at most half the window's), so the first message a load returns — where the
   prefix a provider caches begins — stays put for many turns instead of moving with
   every new message, and step 5 keeps a stable start within it.
3. **Drop the trailing user message** — the current query, which the agent re-adds
   pinned. It is kept in :attr:`~DbMemory.trailing_message`.
   An assistant row whose ``metadata["status"]`` is ``"failed"`` (the service's notice
   that a turn failed) is left out: the user reads it, the model never said it.
4. **Rebuild images** listed in ``metadata["images"]`` (``[{"file_id", "mime_type"}]``)
   as ``data:<mime>;base64,…`` image parts. Only the conversation owner's files are ever
   read; a malformed id, an unknown or foreign file, or bytes gone from disk become a
   short text note and a logged warning — never an exception, never another user's image.
   Bytes are read only for messages that survive compaction (compaction counts an image
   at its token cost without needing its bytes; the summariser sees images as
   ``[image]``).
5. **Compact to the budget**, cheapest stage first
   (:func:`ctxstack.compaction._stages.compact_staged`, hint "general"), with the compact
   LLM when one is given (any LLM failure falls back to truncation inside it). The
   summariser is asked with the previous turn's cached prefix first (the system prompt,
   the history as loaded up to the end of the fold, the tools, the instruction last;
   :mod:`ctxstack.compaction._prefix_request`), the transcript request as its fallback. The
   summary folds history down to ``target_fill`` — so the checkpoint leaves room for the
   next turns and the summariser runs once per overflow — and this load returns what
   the next one will load from the checkpoint: the summary, then the messages it does
   not cover. The next turn's call therefore extends this one's and reads it from the
   provider's cache. (Loads used to show the newest folded messages verbatim too, while
   the budget allowed: one turn of extra verbatim context, paid for by a second rewrite
   of the whole cached context on the turn after each summary: a 300-turn chat at 4K
   was billed 0.40× of truncating its history each turn instead of 0.25×,
   ``benchmarks/bench_dbmemory.py``. The folded messages stay reachable through the
   summary's sources and the archive's tools.) Masking
   and truncation, which every load redoes on the stored history, move in steps counted
   from the history's start (its first row, the window's block start or the checkpoint;
   ``stride`` in :func:`~ctxstack.compaction.smart_truncate`): a load keeps between
   ``target_fill`` and all of the budget, and the cached prefix is rewritten once a step
   rather than at every turn.
6. **Offer a checkpoint**: when the LLM summarised, :attr:`~DbMemory.checkpoint_candidate`
   holds the summary and the last sequence number it covers; the service persists it
   with :meth:`DbMemory.save_checkpoint` (or :func:`ctxstack.store.save_checkpoint`)
   after the turn, so the next load starts from it — one summarisation per overflow,
   not one per request.

Every stored message comes back with ``metadata["seq"]`` (the summary carries
``metadata["checkpoint_seq"]`` instead). A database failure raises
:class:`~ctxstack.store.errors.StorageError` (the caller decides what to do); it is never turned
into an empty history. One instance serves one load at a time: the statistics of a load
are attributes, so create one ``DbMemory`` per request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import func, select

from ctxstack.budget import ModelBudget
from ctxstack.compaction import SUMMARY_PREFIX, CompactionOptions
from ctxstack.compaction._llm_compact import resolve_options
from ctxstack.compaction._prefix_request import CallPrefix
from ctxstack.compaction._stages import compact_staged
from ctxstack.compaction._summaries import SUMMARY_REF_KEY
from ctxstack.errors import ConfigError
from ctxstack.memory._base import BaseMemory
from ctxstack.messages import ChatMessage
from ctxstack.protocol import LLM, ToolSpec, Usage
from ctxstack.store.checkpoints import (
    CheckpointCandidate,
    CheckpointRecord,
    read_latest_checkpoint,
    save_checkpoint,
)
from ctxstack.store.conversations import fetch_conversation
from ctxstack.store.db import SessionFactory, reading
from ctxstack.store.files import FileRecord, FileStore
from ctxstack.store.fold import fold_older
from ctxstack.store.history_messages import (
    CachedRow,
    HistoryMessageCache,
    image_message,
    materialise,
    text_message,
)
from ctxstack.store.messages import (
    HISTORY_ROLES,
    HistoryRow,
    read_history_page,
    read_history_rows,
)
from ctxstack.store.models import Message
from ctxstack.store.summaries import checkpoint_ref
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._calibration import message_counts
from ctxstack.tokens._counter import (
    IMAGE_TOKENS,
    budget_margin,
    effective_budget,
    tool_specs_tokens,
)

log = logging.getLogger(__name__)

LoadMethod = Literal["none", "mask", "llm", "truncate"]
MIN_PAGE = 32
MAX_PAGE = 250
"""Rows per page: the ORM materialises a page on the event loop, so pages stay small
enough (~10 ms) not to stall other streams."""
MAX_READ_AHEAD = 4_000
"""Rows a load with a message cache reads in one query at most (:meth:`DbMemory.
_read_page`): the previous load's count, so a turn at the default 64K budget reads its
~1,000 rows at once."""
FIRST_PAGE_TOKENS_PER_ROW = 40
"""A deliberately low guess of a row's size, so the first page usually covers the window."""
QUESTION_ROOM = 0.05
"""The least share of the call's budget (after tools and system prompt) a load leaves for
the trailing question. A shorter question leaves the history the same budget, so a stable
window does not move back and forth with the size of each question (each move is a cache
miss for the whole history)."""
INLINE_COUNT_ROWS = 64
"""Rows built and counted between two yields to the event loop (a few hundred
microseconds for chat-sized rows)."""
INLINE_COUNT_CHARS = 1_000_000
"""…and at most about this many characters (~2 ms of estimating): 64 rows of long
answers must not hold the loop for tens of milliseconds."""


class DbMemory(BaseMemory):
    """The persisted history of one conversation, compacted to a budget on every load.

    Args:
        conversation_id: the conversation to load.
        session_factory: the store's session factory.
        budget: a :class:`ModelBudget` (its ``usable_input_tokens``) or a token count.
        compact_llm: summariser for over-budget history; without one, smart truncation.
        user_id: when given, the conversation must be this user's (else
            :class:`~ctxstack.store.errors.NotFoundError`); images are always read as the
            conversation owner's files.
        owner_verified: ``user_id`` is known to own the conversation (the caller checked
            it, as the chat service does before claiming a turn): the load skips that
            lookup. Requires ``user_id``.
        file_store: where images live (default: a :class:`FileStore` on the same
            database and the default directory).
        counter: token counter (default: the heuristic).
        keep_recent: messages compaction keeps verbatim at least (default:
            ``options.keep_recent``).
        load_window: how many budgets' worth of tokens to read at most (``None``: read
            every message after the checkpoint — the seed's behaviour, for comparison).
        use_checkpoints: start from the newest checkpoint (``False`` ignores them).
        compact_timeout: seconds the summariser may take before falling back.
        options: the shared :class:`CompactionOptions`; the arguments above override it.
        archive_tools: tools the agent adds once history is archived (its ``recall``,
            :func:`ctxstack.agent._recall.recall_spec`). ``system_prompt`` and ``tools``
            (below) are also what the previous turn's call sent before and with this
            history, and a load from a checkpoint follows calls that offered these too:
            a summary asks with that prefix (step 5).
        max_fold_chunks: summariser calls one load may spend folding history older
            than the window (16: a first load of ~2,000 messages folds them all; longer
            ones continue from the checkpoint on the next load).
        system_prompt: what every call adds to the loaded history besides the trailing
            question (with ``tools``). The history is compacted to what the guard will
            leave it — ``budget`` less the tool specs, the system prompt and the
            trailing question (which the agent re-adds), counted as the guard counts
            them — so a history that fits here is not compacted a second time at the
            first call. Without them only the trailing question is set aside.
        tools: the tool specs every call sends (see ``system_prompt``).
        message_cache: a :class:`~ctxstack.store.history_messages.HistoryMessageCache`
            shared by the loads of one process (the chat service's): a row the previous
            load of the conversation built, unchanged since, is taken back as that
            message, its token figures already cached on it — no rebuilding and no
            re-estimating of ~1,000 rows per turn. The loaded history is the same.

    After each load: ``was_compacted``, ``method`` (``"none"|"mask"|"llm"|"truncate"``),
    ``original_count`` (messages the loaded history stood for before compaction: the
    checkpoint summary counts as one, plus every stored message after it),
    ``compacted_count``, ``summarized_count`` (stored messages folded into the summary
    by this load, exactly), ``folded_count`` (of those, the ones beyond the window),
    ``usage`` (the summariser's), ``checkpoint`` (the one the load started from),
    ``checkpoint_candidate``, ``trailing_message`` (text only: its images are not
    rebuilt), ``rows_read``, ``omitted_count`` (stored messages neither loaded nor
    summarised) and ``warnings``.

    Images are rebuilt from the owner's file rows; the ``mime_type`` written in a
    message's metadata is not trusted — the type detected at upload is used.
    """

    def __init__(
        self,
        conversation_id: str,
        *,
        session_factory: SessionFactory,
        budget: ModelBudget | int,
        compact_llm: LLM | None = None,
        user_id: int | None = None,
        owner_verified: bool = False,
        file_store: FileStore | None = None,
        counter: TokenCounter | None = None,
        keep_recent: int | None = None,
        load_window: float | None = 2.0,
        use_checkpoints: bool = True,
        compact_timeout: float | None = None,
        options: CompactionOptions | None = None,
        max_fold_chunks: int = 16,
        system_prompt: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
        archive_tools: Sequence[ToolSpec] | None = None,
        message_cache: HistoryMessageCache | None = None,
    ) -> None:
        tokens = budget.usable_input_tokens if isinstance(budget, ModelBudget) else budget
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise ConfigError(f"budget: expected a ModelBudget or a positive int, got {budget!r}")
        if load_window is not None and not load_window >= 1:
            raise ConfigError(f"load_window: must be at least 1 (budgets) or None, "
                              f"got {load_window!r}")
        self.conversation_id = conversation_id
        self.session_factory = session_factory
        self.max_tokens = tokens
        self.compact_llm = compact_llm
        if owner_verified and user_id is None:
            raise ConfigError("owner_verified: needs the owner's user_id")
        self.user_id = user_id
        self.owner_verified = owner_verified
        self.file_store = file_store or FileStore(session_factory)
        self.counter: TokenCounter = counter or DEFAULT_COUNTER
        if isinstance(max_fold_chunks, bool) or not isinstance(max_fold_chunks, int) or (
            max_fold_chunks < 0
        ):
            raise ConfigError(f"max_fold_chunks: expected an integer >= 0, got "
                              f"{max_fold_chunks!r}")
        self.options = resolve_options(options, keep_recent=keep_recent,
                                       timeout=compact_timeout)
        self.load_window = load_window
        self.use_checkpoints = use_checkpoints
        self.max_fold_chunks = max_fold_chunks
        self.system_prompt = system_prompt
        self.tools = list(tools) if tools else None
        self.archive_tools = list(archive_tools) if archive_tools else []
        self.message_cache = message_cache
        self._reset()

    @property
    def keep_recent(self) -> int:
        """Messages compaction keeps verbatim at least (``options.keep_recent``)."""
        return self.options.keep_recent

    def _reset(self) -> None:
        self.was_compacted = False
        self.method: LoadMethod = "none"
        self.original_count = 0
        self.compacted_count = 0
        self.usage = Usage()
        self.checkpoint: CheckpointRecord | None = None
        self.checkpoint_candidate: CheckpointCandidate | None = None
        self.trailing_message: ChatMessage | None = None
        self.rows_read = 0
        self.omitted_count = 0
        self.folded_count = 0
        self.summarized_count = 0
        self.warnings: list[str] = []
        self._window_start: int | None = None
        self._stable_window = False
        self._after_seq = 0
        self._fold_summary: ChatMessage | None = None
        self._fold_last: int | None = None
        self._llm_failed = False
        self._history_tokens = self._compact_tokens = self.max_tokens
        self._texts: dict[int, ChatMessage] = {}  # seq → history message (see _page_tokens)
        # what the message cache held for this conversation, the metadata texts of the
        # rows read, and what this load gives back (see message_cache)
        self._cached: dict[int, CachedRow] = {}
        self._meta_texts: dict[int, str | None] = {}
        self._built: dict[int, CachedRow] = {}
        self._ahead: list[HistoryRow] = []  # rows read ahead, newest first (_read_page)
        self._ahead_done = False  # …down to the checkpoint

    # ------------------------------------------------------------------ BaseMemory
    async def add_message(self, message: ChatMessage | Mapping[str, Any]) -> None:
        """Does nothing: the chat service owns all writes."""

    async def clear(self) -> None:
        """Does nothing: the chat service owns all writes."""

    async def get_messages(self) -> list[ChatMessage]:
        """Load, rebuild and compact the history (see the module docstring).

        Raises:
            NotFoundError: no such conversation (or not ``user_id``'s).
            StorageError: the database failed.
        """
        self._reset()
        owner_id, records = await self._read()
        if records and records[-1].role == "user":
            self.trailing_message = records.pop().to_chat_message()
        stored_after = len(records) + self.omitted_count
        self._history_tokens, self._compact_tokens = self._history_budget()
        await self._fold()
        refs = await self._owner_files(owner_id, records)
        # Inline: the text messages were built (and counted) while reading, off the loop
        # for long pages; what is left is a lookup per row and the few image rows.
        history = self._history(records, refs)
        self.original_count = stored_after + (self.checkpoint is not None)
        compacted = await self._compact(history)
        if self.folded_count and self.method in ("none", "mask"):
            self.was_compacted, self.method = True, "llm"
        if self.omitted_count and not self.was_compacted:
            self.was_compacted, self.method = True, "truncate"
        if self.omitted_count:
            self._warn(f"conversation {self.conversation_id}: {self.omitted_count} older "
                       "message(s) beyond the load window were left out (neither loaded nor "
                       "summarised)")
        self.compacted_count = len(compacted)
        return await materialise(compacted, refs, self.file_store, self._warn)

    async def save_checkpoint(self) -> CheckpointRecord | None:
        """Persist :attr:`checkpoint_candidate` (if the last load produced one)."""
        if self.checkpoint_candidate is None:
            return None
        return await save_checkpoint(self.session_factory, self.conversation_id,
                                     self.checkpoint_candidate, owner_id=self.user_id)

    # ------------------------------------------------------------------ reading
    def _row_tokens(self, record: HistoryRow) -> int:
        images = len(record.image_refs)
        text_part = self.counter.count_text(record.content or "")
        return 4 + text_part + images * IMAGE_TOKENS

    def _page_tokens(self, page: Sequence[HistoryRow]) -> list[int]:
        """Each row's tokens, counted on the messages the history will use.

        A row without images becomes its history message here (kept in ``_texts`` by
        ``seq``) and is counted with ``counter.count_message``, which caches the figure
        on that message — with a calibrating counter, its content kind and floor too. The
        history is built from these very objects, so the compaction check of this load,
        and the guard and the context meter of the turn, find every figure cached: each
        stored message is estimated once per load. (Counting the row's text and then a
        new message built from it estimated and classified every message twice.) A row
        with images is counted from the row (765 per image reference): its parts are
        built once the owner's files are known. With a ``message_cache``, a row the
        previous load built, unchanged, is that load's message (figures cached on it).
        """
        costs: list[int] = []
        cache = self.message_cache
        built: list[ChatMessage] = []
        at: list[int] = []  # where each built message's figure goes in ``costs``
        for record in page:
            if "images" in record.metadata:
                costs.append(self._row_tokens(record))
                continue
            if cache is None:
                message = text_message(record)
            else:
                message = cache.message(self._cached, record)
                self._built[record.seq] = CachedRow(record, self._meta_texts[record.seq],
                                                    message)
            self._texts[record.seq] = message
            built.append(message)
            at.append(len(costs))
            costs.append(0)
        for i, tokens in zip(at, message_counts(self.counter, built), strict=True):
            costs[i] = tokens
        return costs

    async def _count_page(self, page: Sequence[HistoryRow]) -> list[int]:
        """:meth:`_page_tokens` on the event loop in slices (:func:`_slices`: at most
        ``INLINE_COUNT_ROWS`` rows and about ``INLINE_COUNT_CHARS`` characters, a few
        milliseconds at worst) with a yield in between, so other streams run between the
        slices. Long pages used to be counted in a worker thread (issue 15), which gave
        other streams no more than this — the GIL runs one thread's Python at a time and
        hands it over every few milliseconds — and cost a thread hop per page and a GIL
        hand-over per slice: ~2.5 ms more CPU per 900-row load, measured side by side."""
        costs: list[int] = []
        for start, stop in _slices(page):
            if start:
                await asyncio.sleep(0)
            costs += self._page_tokens(page[start:stop])
        return costs

    async def _read(self) -> tuple[int, list[HistoryRow]]:
        """(owner id, the history rows after the checkpoint in ascending ``seq``)."""
        action = f"loading the history of conversation {self.conversation_id!r}"
        window = None if self.load_window is None else int(self.max_tokens * self.load_window)
        async with reading(self.session_factory, action) as session:
            if self.owner_verified and self.user_id is not None:
                owner_id = self.user_id
            else:
                owner_id = (await fetch_conversation(session, self.conversation_id,
                                                     self.user_id)).owner_id
            if self.use_checkpoints:
                self.checkpoint = await read_latest_checkpoint(session, self.conversation_id)
            after = self.checkpoint.last_seq if self.checkpoint else 0
            if self.checkpoint is not None and window is not None:
                window = max(1, window - self.checkpoint.token_count)
            if self.message_cache is not None:
                self._cached = self.message_cache.rows(self.conversation_id)
            rows: list[HistoryRow] = []
            tokens = 0
            before: int | None = None
            limit = None if window is None else _clamp(window // FIRST_PAGE_TOKENS_PER_ROW)
            while True:
                page = await self._read_page(session, after, before, limit)
                self.rows_read += len(page)
                rows.extend(page)
                tokens += sum(await self._count_page(page))
                if limit is None or len(page) < limit:
                    break  # everything after the checkpoint has been read
                before = page[-1].seq
                if window is not None and tokens > window:
                    block = await self._read_block(session, after, before, len(rows), window)
                    rows.extend(block)
                    start = block[-1].seq if block else before
                    self.omitted_count = await _count_before(session, self.conversation_id,
                                                             after, start)
                    self._window_start, self._after_seq = start, after
                    break
                assert window is not None  # a limit implies a window
                per_row = max(1, tokens // len(rows))
                limit = _clamp(int((window - tokens) / per_row * 1.2) + 8)
        rows.reverse()
        if self.message_cache is not None:
            self.message_cache.store(self.conversation_id, self._built)
            self._cached, self._meta_texts = {}, {}
        return owner_id, rows

    async def _read_block(self, session: Any, after: int, before: int, read: int,
                          window: int) -> list[HistoryRow]:
        """The rows from the start of ``before``'s seq block up to ``before``, newest
        first: a window that leaves rows out starts there, so its first row — where the
        prefix a provider caches begins — does not move with every new message.

        A block is the largest power of two of rows not above half the ``read`` rows
        (at least 4): the extra read is at most half the window, and the block size, a
        power of two, changes only when the window's row count crosses one. Rows past
        another ``window`` of tokens are not taken (a block of huge rows): the window
        then starts where they stop, and the load fills the budget instead.
        """
        size = 1 << max(2, (read // 2).bit_length() - 1)
        first = max(after + 1, (before - 1) // size * size + 1)
        if first >= before:
            self._stable_window = True
            return []
        page = await self._read_page(session, after, before, before - first)
        self.rows_read += len(page)
        block = [row for row in page if row.seq >= first]
        costs = await self._count_page(block)
        over = next((i for i, total in enumerate(itertools.accumulate(costs))
                     if total > window), None)
        if over is not None:
            return block[:over]
        self._stable_window = True
        return block

    async def _read_page(self, session: Any, after: int, before: int | None,
                         limit: int | None) -> list[HistoryRow]:
        """One page: the ``limit`` newest rows after ``after`` and before ``before``.

        With a ``message_cache``, the rows the previous load read unchanged are its very
        rows (their metadata not decoded again), and the pages are served from one
        read-ahead as long as the previous load of the conversation read (plus some
        slack): the turn's ~1,000 rows come in one query, not four of at most
        ``MAX_PAGE``. The pages are the same rows either way — each is the next ``limit``
        rows of the same newest-first sequence — so where the load stops, and what it
        holds, does not change; rows read ahead past that point are dropped.
        """
        if self.message_cache is None:
            return await read_history_page(
                session, self.conversation_id, after_seq=after, before_seq=before,
                limit=limit, newest_first=True)
        if limit is None:
            return await self._read_rows(session, after, before, None)
        ahead = self._ahead
        assert not ahead or before is None or ahead[0].seq < before
        if len(ahead) < limit and not self._ahead_done:
            want = max(limit - len(ahead), min(MAX_READ_AHEAD, len(self._cached) + 16))
            more = await self._read_rows(session, after, ahead[-1].seq if ahead else before,
                                         want)
            self._ahead_done = len(more) < want
            ahead.extend(more)
        page = ahead[:limit]
        del ahead[:limit]
        return page

    async def _read_rows(self, session: Any, after: int, before: int | None,
                         limit: int | None) -> list[HistoryRow]:
        """Rows newest first, given back from the message cache where unchanged."""
        pairs = await read_history_rows(
            session, self.conversation_id, after_seq=after, before_seq=before,
            limit=limit, newest_first=True, known=self._cached)
        texts = self._meta_texts
        for row, text in pairs:
            texts[row.seq] = text
        return [row for row, _ in pairs]

    async def _owner_files(
        self, owner_id: int, records: Sequence[HistoryRow]
    ) -> dict[str, FileRecord]:
        wanted = [str(ref.get("file_id")) for r in records if "images" in r.metadata
                  for ref in r.image_refs]
        return await self.file_store.infos(owner_id, wanted) if wanted else {}

    # ------------------------------------------------------------------ building
    def _warn(self, message: str) -> None:
        log.warning(message)
        self.warnings.append(message)

    async def _fold(self) -> None:
        """Fold the rows older than the window into the summary (:mod:`ctxstack.store.fold`)."""
        if not self.omitted_count or self.compact_llm is None or self._window_start is None:
            return
        previous = None
        if self.checkpoint is not None:
            previous = self.checkpoint.summary.removeprefix(SUMMARY_PREFIX).strip()
        action = f"folding the older history of conversation {self.conversation_id!r}"
        async with reading(self.session_factory, action) as session:
            outcome = await fold_older(
                session, self.conversation_id, after_seq=self._after_seq,
                before_seq=self._window_start, previous=previous, llm=self.compact_llm,
                budget=self.max_tokens, options=self.options.with_(hint="general"),
                counter=self.counter, max_chunks=self.max_fold_chunks,
            )
        self.usage += outcome.usage
        self._llm_failed = bool(outcome.stopped and outcome.stopped.startswith("summariser"))
        if outcome.stopped:
            self._warn(f"conversation {self.conversation_id}: folding older history stopped "
                       f"({outcome.stopped}) after {outcome.folded} message(s)")
        if outcome.summary is not None:
            self._fold_summary, self._fold_last = outcome.summary, outcome.last_seq
            self.folded_count = outcome.folded
            self.omitted_count -= outcome.folded

    def _history(
        self, records: Sequence[HistoryRow], files: dict[str, FileRecord]
    ) -> list[ChatMessage]:
        history: list[ChatMessage] = []
        if self._fold_summary is not None:
            history.append(self._fold_summary)
        elif self.checkpoint is not None:
            text = self.checkpoint.summary
            if not text.startswith(SUMMARY_PREFIX):
                text = f"{SUMMARY_PREFIX}\n{text}"
            # its ref in metadata only (never sent): the text stays byte-identical to the
            # summary the previous call sent, and a summary folding it names it as a child
            history.append(ChatMessage.summary(text, checkpoint_seq=self.checkpoint.last_seq,
                                               **{SUMMARY_REF_KEY: checkpoint_ref(
                                                   self.checkpoint.id)}))
        texts = self._texts
        for record in records:
            if record.role == "assistant" and record.metadata.get("status") == "failed":
                continue  # a failure notice is for the user; the model never said it
            built = texts.get(record.seq)
            history.append(built if built is not None
                           else image_message(record, files, self._warn))
        return history

    # ------------------------------------------------------------------ compacting
    def _history_budget(self) -> tuple[int, int]:
        """The budget left to the history, and the budget a compaction fits it into.

        The first: what the guard will allow the whole call (``budget`` less the tool
        specs, then its margin) less the system prompt and the trailing question, grossed
        up by the margin so that ``effective_budget`` of the result is exactly what
        remains (at least 1). The second is the same with the question taking at least
        :data:`QUESTION_ROOM`, so that it — and with it where a stable window starts and
        the step it moves by — does not change with each question. (A history that fits
        beside the actual question is not compacted.)
        """
        keep = 1.0 - budget_margin(self.counter)
        call = self.max_tokens - tool_specs_tokens(self.tools, self.counter)
        if self.system_prompt is not None:
            call -= math.ceil(self.counter.count_messages([ChatMessage.system(
                self.system_prompt)]) / keep)
        question = 0
        if self.trailing_message is not None:
            question = math.ceil(self.counter.count_messages([self.trailing_message]) / keep)
        room = max(question, int(call * QUESTION_ROOM))
        return max(1, call - question), max(1, call - room)

    async def _compact(self, history: list[ChatMessage]) -> list[ChatMessage]:
        fits = effective_budget(self._history_tokens, self.counter)
        # every figure was cached on these messages while reading: no thread hop needed
        if self.counter.count_messages(history) <= fits:
            if self._fold_summary is not None and self._fold_last is not None:
                self.checkpoint_candidate = self._candidate(history, (), self._fold_summary)
            self.summarized_count = self.folded_count
            return list(history)
        # A summariser that just failed while folding is not called again in this load.
        llm = None if self._llm_failed else self.compact_llm
        # The previous turn's call sent the system prompt, this history and the tools: a
        # summary asks with that prefix (cached by the provider), the instruction last.
        # Image rows are placeholders until materialised: that call cannot be rebuilt.
        around = () if self.system_prompt is None else (ChatMessage.system(self.system_prompt),)
        # A load from a checkpoint follows turns whose calls offered the archive's tools.
        offered = [*(self.tools or []), *(self.archive_tools if self.checkpoint else [])]
        prefix = CallPrefix.of(before=around, tools=offered,
                               enabled=not any(m.images for m in history))
        # Each load fits the stored history afresh: a truncation's headroom would carry
        # into no later call (only a summary's checkpoint does), so none is left; the
        # mask and truncate boundaries move in steps counted from the history's start
        # (its first row, a window's block start, or the checkpoint) — unless a window
        # of huge rows could not start at its block.
        result = await compact_staged(
            history, llm, self._compact_tokens, self.options.with_(hint="general"),
            counter=self.counter, prefix=prefix, carried=False,
            stable_start=self._stable_window or not self.omitted_count,
        )
        self.method = result.method
        self.was_compacted = result.method != "none"
        self.usage += result.usage
        folded_here = [m for m in result.summarized if isinstance(m.metadata.get("seq"), int)]
        self.summarized_count = self.folded_count + len(folded_here)
        summary = result.summary if result.method == "llm" else self._fold_summary
        if summary is not None:
            self.checkpoint_candidate = self._candidate(history, result.summarized, summary)
        return list(result.messages)

    def _candidate(
        self, history: Sequence[ChatMessage], summarized: Sequence[ChatMessage],
        summary: ChatMessage,
    ) -> CheckpointCandidate | None:
        """The checkpoint the summary allows: it covers the longest run of the oldest
        loaded messages that were all folded into it (a message kept verbatim in the
        middle stops the run, so a later load never loses it)."""
        folded = {m.metadata.get("seq") for m in summarized}
        last: int | None = self._fold_last
        if self.omitted_count:
            # Rows between what was folded and the window were not summarised: the
            # checkpoint must stop before them, or they would be lost for good.
            return self._make_candidate(last, self._fold_summary or summary)
        for message in history:
            seq = message.metadata.get("seq")
            if not isinstance(seq, int):
                continue  # the previous summary
            if seq not in folded:
                break
            last = seq
        return self._make_candidate(last, summary)

    def _make_candidate(self, last: int | None, summary: ChatMessage
                        ) -> CheckpointCandidate | None:
        if last is None:
            return None
        return CheckpointCandidate(summary=summary.text, last_seq=last,
                                   token_count=self.counter.count_message(summary))


def _clamp(rows: int) -> int:
    return max(MIN_PAGE, min(MAX_PAGE, rows))


async def _count_before(session: Any, conversation_id: str, after: int, before: int) -> int:
    """History rows between the checkpoint and the oldest row read (one COUNT)."""
    stmt = select(func.count()).select_from(Message).where(
        Message.conversation_id == conversation_id,
        Message.seq > after,
        Message.seq < before,
        Message.role.in_(HISTORY_ROLES),
    )
    return int(await session.scalar(stmt) or 0)


def _slices(page: Sequence[HistoryRow]) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive slices of ``page``, each of at most
    ``INLINE_COUNT_ROWS`` rows and, unless one row alone is longer, at most
    ``INLINE_COUNT_CHARS`` characters of text."""
    out: list[tuple[int, int]] = []
    start = chars = 0
    for i, row in enumerate(page):
        size = len(row.content or "")
        if i > start and (i - start >= INLINE_COUNT_ROWS or chars + size > INLINE_COUNT_CHARS):
            out.append((start, i))
            start, chars = i, 0
        chars += size
    if start < len(page):
        out.append((start, len(page)))
    return out
