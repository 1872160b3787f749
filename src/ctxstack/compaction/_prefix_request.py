"""Cache-aligned summary requests: the summariser call as the conversation's continuation.

Providers cache the prefix of a prompt and bill a cached token at about a tenth of a fresh
one (and, since 2026, charge for writing the cache). The transcript request
(:func:`ctxstack.compaction._summarize.build_request`: a fresh system prompt around a
re-serialised transcript) shares nothing with the conversation's own calls, so all of it
is billed fresh, and written to the cache for nothing. The *prefix request* built here
starts exactly like the conversation's previous model call:

* the messages that call sent ahead of the compacted list (:attr:`CallPrefix.before`: a
  system prompt a memory leaves out of its history);
* the compacted messages up to the end of the fold, in the order the model last saw them
  and as it saw them (:attr:`CallPrefix.seen`: before a mask cleared tool outputs), the
  previous summary where it stood, tool calls and results as they were;
* then one user message, the summary instruction
  (:func:`ctxstack.compaction._prompts.summary_instruction`);

and it carries the same ``tools`` the conversation's calls carried (with ``tool_choice``
``"none"``, see :mod:`ctxstack.compaction._summarize`). Everything but the instruction is
then a byte-identical prefix of the previous call, read from the cache.

It is only a request when it is one a provider accepts and the summariser can read: it
must end at a valid boundary (no assistant tool call without all its results, no orphan
result — :func:`ctxstack.messages.tool_turns_valid`), hold something to summarise, carry
no file or audio part, and fit the summariser's input. Otherwise :func:`prefix_request`
says why, and the caller sends the transcript request instead (which cuts messages and
bounds itself; this one never cuts, since a cut message would no longer be the cached
prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxstack.messages import ChatMessage, tool_turns_valid
from ctxstack.protocol import ToolSpec
from ctxstack.tokens import TokenCounter
from ctxstack.tokens._counter import tool_specs_tokens


@dataclass(frozen=True, slots=True)
class CallPrefix:
    """What the conversation's previous model call carried, as far as a summary reuses it.

    Attributes:
        before: messages that call sent ahead of the list being compacted (DbMemory's
            history leaves the system prompt out; the agent adds it). Empty when the list
            starts with them itself (the guard's case).
        seen: the list being compacted as the model saw it, position for position (the
            pipeline's input, before a mask replaced tool outputs with placeholders);
            ``None``: the list itself.
        tools: the ``tools`` the conversation's calls carried; ``None``: none, or unknown.
        enabled: ``False`` when the previous call cannot be rebuilt (DbMemory's image
            placeholders, not yet the data the model saw): the transcript request only.
    """

    before: tuple[ChatMessage, ...] = ()
    seen: tuple[ChatMessage, ...] | None = None
    tools: tuple[ToolSpec, ...] | None = None
    enabled: bool = True

    @classmethod
    def of(cls, *, before: Sequence[ChatMessage] = (),
           seen: Sequence[ChatMessage] | None = None,
           tools: Sequence[ToolSpec] | None = None, enabled: bool = True) -> CallPrefix:
        """A prefix from any sequences (copied into tuples; empty tools mean none)."""
        return cls(tuple(before), None if seen is None else tuple(seen),
                   tuple(tools) if tools else None, enabled)

    def seeing(self, messages: Sequence[ChatMessage]) -> CallPrefix:
        """This prefix with ``seen`` set to ``messages`` unless it is set already."""
        return self if self.seen is not None else replace(self, seen=tuple(messages))

    def view(self, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        """``messages`` as the model saw them: :attr:`seen` when it stands for them one to
        one (same length; same role and tool-call id at every position — a mask or a cut
        replaces a message by one of the same shape), else ``messages`` themselves (a
        repaired or reordered list: what was seen can no longer be told)."""
        seen = self.seen
        if seen is None or seen is messages or len(seen) != len(messages):
            return messages
        for old, new in zip(seen, messages, strict=True):
            if old is not new and (old.role != new.role or old.tool_call_id != new.tool_call_id):
                return messages
        return seen


@dataclass(frozen=True, slots=True)
class PrefixRequest:
    """A cache-aligned summary request: its messages (the instruction last) and tools."""

    messages: list[ChatMessage]
    tools: list[ToolSpec] | None


def prefix_request(
    head: Sequence[ChatMessage],
    instruction: str,
    tools: Sequence[ToolSpec] | None,
    *,
    limit: int,
    counter: TokenCounter,
) -> tuple[PrefixRequest | None, str | None]:
    """``(request, None)``, or ``(None, reason)`` when ``head`` cannot start one.

    ``head`` is the previous call's start up to the end of the fold; ``limit`` what the
    summariser can read (tool specs included). Reasons: ``"nothing_to_fold"`` (only system
    messages), ``"dangling_tool_call"`` (the fold ends inside a tool group: a call whose
    results are not all in it, or a result whose call is not), ``"binary_parts"`` (a file
    or audio part: the summariser, often another model, may not take them, and the
    transcript names them instead of sending their bytes), ``"too_large"``.
    """
    if all(m.role == "system" for m in head):
        return None, "nothing_to_fold"
    if any(m.binary_parts for m in head):
        return None, "binary_parts"
    if not tool_turns_valid(head):
        return None, "dangling_tool_call"
    messages = [*head, ChatMessage.user(instruction)]
    specs = list(tools) if tools else None
    size = counter.count_messages(messages) + (tool_specs_tokens(specs, counter) if specs else 0)
    if size > limit:
        return None, "too_large"
    return PrefixRequest(messages, specs), None


__all__ = ["CallPrefix", "PrefixRequest", "prefix_request"]
