# expect: the custom strategy ran first and the context fits
"""A compaction strategy of your own, run before the built-in ones.

Agents often call the same tool with the same arguments again (polling a build, re-reading
a file). Only the newest of those outputs matters; the older copies are dead weight. This
example writes a :class:`~ctxstack.compaction.Compactor` that clears them — cheaper and
less lossy than anything the built-in pipeline would do next — and puts it first::

    CompactionOptions(strategies=[ClearRepeatedToolOutputs(), *DEFAULT_STRATEGIES])

A strategy has a ``name``, the kind of loss it makes (``method``: ``"mask"``, ``"llm"`` or
``"truncate"``, which reports and the chat service show) and one method,
``async compact(messages, ctx)``, returning a result or ``None`` ("not enough: nothing
done"). A result that still does not fit is progress: the next strategy goes on from it.
The pipeline always ends within budget (a truncation is its last resort).

Run: ``python examples/custom_strategy.py`` (offline, no model).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Literal

from ctxstack import ChatMessage, CompactionEvent, CompactionOptions, ContextGuard, ToolCall
from ctxstack.compaction import DEFAULT_STRATEGIES, CompactionContext, CompactionResult

BUDGET = 2_500


class ClearRepeatedToolOutputs:
    """Replace every output of a (tool, arguments) call that was made again later with a
    one-line note; the newest output of each stays whole."""

    name = "clear-repeated-tool-outputs"
    method: Literal["mask"] = "mask"

    async def compact(
        self, messages: list[ChatMessage], ctx: CompactionContext
    ) -> CompactionResult | None:
        calls = {c.id: c for m in messages for c in (m.tool_calls or [])}
        seen: set[tuple[str, str]] = set()
        out = list(messages)
        cleared = 0
        for i in range(len(out) - 1, -1, -1):  # newest first: the first seen is kept
            m = out[i]
            call = calls.get(m.tool_call_id or "")
            if m.role != "tool" or call is None:
                continue
            key = (call.name, json.dumps(call.arguments, sort_keys=True))
            if key in seen:
                note = f"[older output of {call.name}: superseded by a later identical call]"
                out[i] = m.model_copy(update={"content": note})
                cleared += 1
            seen.add(key)
        if not cleared:
            return None  # nothing repeated: let the next strategy work
        return ctx.result(messages, out, "mask", masked=cleared)


def conversation() -> list[ChatMessage]:
    """A CI-watching agent that polled the same build 20 times, then a question."""
    msgs = [ChatMessage.system("You watch CI builds and report their status.")]
    msgs.append(ChatMessage.user("Tell me when build 4411 is green."))
    for i in range(20):
        call = ToolCall(id=f"c{i}", name="build_status", arguments={"build": 4411})
        log = {"build": 4411, "poll": i, "state": "green" if i == 19 else "running",
               "log_tail": [f"step {j}: ok" for j in range(40)]}
        msgs += [ChatMessage.assistant("Checking.", tool_calls=[call]),
                 ChatMessage.tool(f"c{i}", json.dumps(log), name="build_status")]
    msgs.append(ChatMessage.user("Is it green now?", pinned=True, metadata={"kind": "query"}))
    return msgs


async def main() -> int:
    events: list[CompactionEvent] = []
    guard = ContextGuard(
        default_budget=BUDGET,
        options=CompactionOptions(strategies=[ClearRepeatedToolOutputs(),
                                              *DEFAULT_STRATEGIES]),
        on_compact=events.append,
    )
    msgs = conversation()
    fitted = await guard.check_and_compact(msgs)
    tokens = guard.counter.count_messages(fitted)
    superseded = sum("superseded" in (m.text or "") for m in fitted)
    newest = fitted[-2].text or ""
    print(f"{len(msgs)} messages -> {len(fitted)}; {tokens} tokens (budget {BUDGET}); "
          f"method {events[0].method}; {superseded} older outputs cleared")
    ok = (tokens <= BUDGET and superseded == 19 and '"state": "green"' in newest
          and len(fitted) == len(msgs))
    print("the custom strategy ran first and the context fits" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
