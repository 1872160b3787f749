"""``CompactionResult``: what one compaction did (every strategy returns one)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ctxstack.messages import ChatMessage
from ctxstack.protocol import Usage

Method = Literal["none", "mask", "llm", "truncate"]


class CompactionResult(BaseModel):
    """Everything a compaction did, for callers that report or persist it.

    ``summarized`` are the original messages folded into ``summary`` (earlier summaries
    included), in original order; a storage layer checkpoints on their
    ``metadata["seq"]``. It is a contiguous run of the history except when an *anchor*
    user message was kept (a long tool loop whose user turn is not pinned).
    ``reason`` says why the summariser was not used (``"no_llm"``,
    ``"nothing_to_summarize"``, ``"timeout"``, ``"empty_summary"``, ``"llm_error: …"``);
    it is None for ``"none"`` and successful ``"llm"`` results.
    """

    model_config = ConfigDict(frozen=True)

    messages: list[ChatMessage]
    method: Method
    reason: str | None = None
    usage: Usage = Usage()
    summary: ChatMessage | None = None
    summarized: tuple[ChatMessage, ...] = ()
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    previous_summary: str | None = None
    masked: int = 0
    """Tool outputs cleared (stage "mask", also before an "llm" or "truncate" result)."""
    archived: int = 0
    """Messages handed to the archive by this compaction."""

    @property
    def compacted(self) -> bool:
        """Whether anything was changed (``method != "none"``)."""
        return self.method != "none"
