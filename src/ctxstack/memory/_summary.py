"""``SummaryMemory``: past a message-count threshold, older messages become one summary.

When more than ``threshold`` non-system, unpinned messages are held (or, with a token ``budget``,
when the held messages exceed it), everything but the newest ``keep_recent`` messages is
folded into one ``[Conversation summary]`` system message placed right after the system
prompt. The summary is rolling: the next compaction folds the previous summary in, so
there is never more than one. Tool groups are never split and the kept part opens with a
user turn — the same boundary rules as :func:`ctxstack.compaction._llm_compact`, through the
same code (:func:`ctxstack.compaction._groups.choose_fold`,
:mod:`ctxstack.compaction._summarize`). Pinned messages are never folded.

If the summariser fails (exception, timeout, empty answer) the messages that would have
been folded are dropped instead (logged at WARNING); an earlier summary is kept.

A memory keeps receiving messages, so two more rules apply: compaction waits while the
newest assistant tool call still awaits results, and the kept part always holds the
current turn's user message (kept alone, as an anchor, when the turn is a long tool loop),
so later assistant and tool messages never follow the summary directly.

What :meth:`~SummaryMemory.get_messages` returns is always a valid request: messages
added from a broken log are repaired (:func:`ctxstack.messages.repair_tool_turns`).

Compaction runs inside ``add_message`` under an ``asyncio.Lock``, so concurrent adds are
serialised and never lose or duplicate a message.

Given the ``system_prompt`` (and ``tools``) of the agent it serves, the summariser is asked
with the agent's previous call as its prefix — that system prompt, the held messages up to
the end of the fold, the tools, the instruction last — which the provider has cached
(:mod:`ctxstack.compaction._prefix_request`); the transcript request is its fallback, and
the only request without them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from ctxstack.compaction import smart_truncate
from ctxstack.compaction._groups import choose_fold, split_layout
from ctxstack.compaction._llm_compact import check_keep_recent, summary_sizes
from ctxstack.compaction._options import check_timeout
from ctxstack.compaction._prompts import check_hint
from ctxstack.compaction._summarize import build_summary_message, previous_text, summarize
from ctxstack.compaction._truncate import check_budget
from ctxstack.errors import ConfigError
from ctxstack.memory._base import HeldMemory
from ctxstack.messages import ChatMessage, repair_tool_turns
from ctxstack.protocol import LLM, ToolSpec, Usage
from ctxstack.tokens import DEFAULT_COUNTER, TokenCounter
from ctxstack.tokens._counter import effective_budget

logger = logging.getLogger("ctxstack.memory")

DEFAULT_SUMMARY_TOKENS = 1_024
"""Answer size asked of the summariser when no ``budget`` sizes it."""
DEFAULT_FACTS_TOKENS = 256


class SummaryMemory(HeldMemory):
    """Summarising memory. See the module docstring.

    Args:
        llm: the summariser.
        threshold: compact when more than this many non-system, unpinned messages are
            held (pinned messages are never folded, so they do not count).
        keep_recent: newest messages kept verbatim (at least; whole tool groups); must be
            smaller than ``threshold``.
        hint: compaction prompt (see :mod:`ctxstack.compaction._prompts`).
        system_prompt: that of the agent this memory serves (its calls send the system
            prompt, then these messages, with ``tools``): summaries reuse that prefix
            (see the module doc). ``None``: the transcript request only.
        tools: the tools that agent's calls carry (with ``system_prompt``).
        budget: optional token budget: also compact when the held messages exceed it,
            size the summary in proportion to it, and never return more than it from
            :meth:`get_messages` (``smart_truncate`` as a last resort).
        prompt: as for :func:`ctxstack.compaction.llm_compact`.
        timeout: as for :func:`ctxstack.compaction.llm_compact`.
        counter: as for :func:`ctxstack.compaction.llm_compact`.

    Attributes ``usage`` (summariser usage so far), ``compactions`` and ``last_reason``
    (why the last compaction fell back, or None) are for reporting.
    """

    def __init__(
        self,
        llm: LLM,
        threshold: int,
        keep_recent: int = 4,
        hint: str = "general",
        budget: int | None = None,
        *,
        prompt: str | None = None,
        timeout: float | None = None,
        counter: TokenCounter | None = None,
        system_prompt: str | None = None,
        tools: Sequence[ToolSpec] | None = None,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ConfigError(f"threshold: must be a positive integer, got {threshold!r}")
        check_keep_recent(keep_recent)
        check_timeout(timeout)
        if keep_recent >= threshold:
            raise ConfigError(
                f"keep_recent: must be smaller than threshold ({threshold}), got {keep_recent}"
            )
        if budget is not None:
            check_budget(budget, "budget")
        super().__init__()
        self.llm = llm
        self.threshold = threshold
        self.keep_recent = keep_recent
        self.hint = check_hint(hint)
        self.budget = budget
        self.prompt = prompt
        self.timeout = timeout
        self.counter = counter or DEFAULT_COUNTER
        self.system_prompt = system_prompt
        self.tools = list(tools) if tools else None
        self.usage = Usage()
        self.compactions = 0
        self.last_reason: str | None = None

    async def _added(self) -> None:
        if self._over():
            await self._compact()

    async def get_messages(self) -> list[ChatMessage]:
        async with self._lock:
            out = repair_tool_turns(self._messages)
        if self.budget is not None:
            out = smart_truncate(out, self.budget, counter=self.counter)
        return out

    def _over(self) -> bool:
        held = sum(1 for m in self._messages if m.role != "system" and not m.pinned)
        if held > self.threshold:
            return True
        return self.budget is not None and self.counter.count_messages(
            self._messages) > effective_budget(self.budget, self.counter)

    def _awaiting_results(self) -> bool:
        """Whether the newest message opens a tool group whose results have not all arrived.

        Folding it now would leave the results, when they come, without their call.
        """
        msgs = self._messages
        i = len(msgs) - 1
        while i >= 0 and msgs[i].role == "tool":
            i -= 1
        calls = msgs[i].tool_calls if i >= 0 else None
        if not calls:
            return False
        answered = {m.tool_call_id for m in msgs[i + 1 :]}
        return not {c.id for c in calls} <= answered

    async def _compact(self) -> None:
        if self._awaiting_results():
            return  # compact once the open tool call is answered
        msgs = self._messages
        layout = split_layout(msgs, self.counter)
        units = layout.units
        summaries = layout.summaries()
        plan = choose_fold(
            layout,
            keep_recent=self.keep_recent,
            fixed_tokens=0,
            target_tokens=0,
            limit_tokens=sys.maxsize,
            limit_messages=self.threshold - 1,
            open_ended=True,
        )
        if not plan.fold:
            return  # only pinned or recent messages: nothing a summary could replace
        fold = [m for i in plan.fold for m in msgs[units[i].start : units[i].stop]]
        previous = "\n\n".join(previous_text(msgs[units[i].start]) for i in summaries) or None
        if self.budget is not None:
            answer_tokens, facts_tokens = summary_sizes(self.budget, self.llm)
        else:
            answer_tokens, facts_tokens = DEFAULT_SUMMARY_TOKENS, DEFAULT_FACTS_TOKENS
        head = None
        if self.system_prompt is not None:
            end = max(units[i].stop for i in (*plan.fold, *summaries))
            head = [*([ChatMessage.system(self.system_prompt)] if self.system_prompt else []),
                    *msgs[:end]]
        outcome = await summarize(
            fold,
            previous,
            self.llm,
            hint=self.hint,
            prompt=self.prompt,
            timeout=self.timeout,
            answer_tokens=answer_tokens,
            counter=self.counter,
            head=head,
            tools=self.tools,
        )
        self.usage += outcome.usage
        self.compactions += 1
        self.last_reason = outcome.reason
        head = list(msgs[: layout.prompt_end])
        if outcome.text is not None:
            head.append(
                build_summary_message(
                    outcome.text,
                    fold,
                    previous,
                    hint=self.hint,
                    answer_tokens=answer_tokens,
                    facts_tokens=facts_tokens,
                    counter=self.counter,
                )
            )
        else:
            logger.warning(
                "SummaryMemory: summariser failed (%s); dropping %d oldest messages",
                outcome.reason,
                len(fold),
            )
            head.extend(msgs[units[i].start] for i in summaries)
        rest = [
            m
            for i, unit in enumerate(units)
            if not unit.summary and (i in plan.keep or unit.pinned)
            for m in msgs[unit.start : unit.stop]
        ]
        self._messages = head + rest
