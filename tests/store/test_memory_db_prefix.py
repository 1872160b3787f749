"""DbMemory's summary request reuses the previous turn's call as its prefix (issue 29
item 3): the system prompt, the history as loaded up to the end of the fold, the tools,
the instruction last; the transcript request when that would not fit or fails."""

from __future__ import annotations

import pytest

from ctxstack.errors import LLMError
from ctxstack.llm import ScriptedLLM
from ctxstack.memory import DbMemory
from ctxstack.messages import ChatMessage
from ctxstack.store import NewMessage, SessionFactory, UserRecord, append_messages
from ctxstack.store import create_conversation as new_conversation
from tests.test_summary_prefix import TOOLS, is_prefix_request, is_transcript_request, wire

PROMPT = "You are a helpful assistant for a warehouse team."


async def _stored_chat(sf: SessionFactory, conv: str, turns: int) -> None:
    for i in range(turns):
        await append_messages(sf, conv, [
            NewMessage(role="user", content=f"Question {i} about ORD-{i}: " + "detail " * 40),
            NewMessage(role="assistant", content=f"ORD-{i} costs {i} EUR. " + "note " * 40)])


def _memory(sf: SessionFactory, conv: str, llm: ScriptedLLM | None, budget: int) -> DbMemory:
    return DbMemory(conv, session_factory=sf, budget=budget, compact_llm=llm,
                    system_prompt=PROMPT, tools=TOOLS)


@pytest.fixture
async def conv(sf: SessionFactory, alice: UserRecord) -> str:
    return (await new_conversation(sf, alice.id)).id


async def test_dbmemory_summary_request_begins_with_the_previous_turns_call(
    sf: SessionFactory, conv: str
) -> None:
    await _stored_chat(sf, conv, 14)
    # the previous turn: everything fitted, so its call sent the system prompt, the whole
    # history and its question
    before = await _memory(sf, conv, None, 64_000).get_messages()
    previous = [ChatMessage.system(PROMPT), *before]
    await append_messages(sf, conv, [NewMessage(role="user", content="And the totals?")])
    llm = ScriptedLLM(["Summary: ORD-0 to ORD-13 priced."])
    mem = _memory(sf, conv, llm, 1_500)
    await mem.get_messages()
    assert mem.method == "llm"
    [call] = llm.calls
    head = call.messages[:-1]
    assert wire(head) == wire(previous[: len(head)])
    assert len(head) > 2
    assert is_prefix_request(call.messages)
    assert call.tools == tuple(TOOLS)


@pytest.mark.parametrize("why", ["too_large", "failed"])
async def test_dbmemory_falls_back_to_the_transcript(
    sf: SessionFactory, conv: str, why: str
) -> None:
    await _stored_chat(sf, conv, 14)
    await append_messages(sf, conv, [NewMessage(role="user", content="And the totals?")])
    if why == "too_large":
        llm = ScriptedLLM(["Summary."], context_size=2_000, max_output_tokens=1_000)
    else:
        llm = ScriptedLLM([LLMError("prefix refused"), "Summary."])
    mem = _memory(sf, conv, llm, 1_500)
    history = await mem.get_messages()
    assert mem.method == "llm"
    assert is_transcript_request(llm.calls[-1].messages)
    assert history[0].kind == "summary"
    assert "Summary." in history[0].text


async def test_compact_now_asks_with_the_last_react_calls_prefix(
    sf: SessionFactory, conv: str, alice: UserRecord
) -> None:
    from ctxstack.budget import ModelBudget
    from ctxstack.server.compact_now import compact
    from ctxstack.server.tools import service_tool_specs
    from ctxstack.server.turn import SYSTEM_PROMPT
    from ctxstack.tokens import HEURISTIC

    await _stored_chat(sf, conv, 10)
    await append_messages(sf, conv, [
        NewMessage(role="user", content="Can you check?"),
        NewMessage(role="assistant", content="The turn failed.", metadata={"status": "failed"}),
    ])
    await _stored_chat(sf, conv, 4)
    # what the last ReAct call sent: the system prompt, the history as DbMemory loads it
    loaded = await DbMemory(conv, session_factory=sf, budget=64_000).get_messages()
    previous = [ChatMessage.system(SYSTEM_PROMPT), *loaded]
    llm = ScriptedLLM(["Summary: ORD-0 to ORD-9 priced."])
    out = await compact(sf, conv, alice.id, budget=ModelBudget(context_size=64_000,
                                                               max_output_tokens=8_000),
                        fast_llm=llm, counter=HEURISTIC)
    assert out.compact.method == "llm"
    [call] = llm.calls
    head = call.messages[:-1]
    assert len(head) > 10
    assert wire(head) == wire(previous[: len(head)])  # the failure notice left out
    assert is_prefix_request(call.messages)
    assert call.tools == tuple(service_tool_specs())


async def test_a_load_from_a_checkpoint_carries_the_archive_tools_the_turns_offered(
    sf: SessionFactory, conv: str
) -> None:
    from ctxstack.agent._recall import recall_spec
    from ctxstack.store import CheckpointCandidate, save_checkpoint

    await _stored_chat(sf, conv, 14)
    await append_messages(sf, conv, [NewMessage(role="user", content="And the totals?")])
    # no checkpoint yet: the turns before offered no recall
    llm = ScriptedLLM(["Summary."])
    mem = DbMemory(conv, session_factory=sf, budget=1_400, compact_llm=llm,
                   system_prompt=PROMPT, tools=TOOLS, archive_tools=[recall_spec()])
    await mem.get_messages()
    assert llm.calls[0].tools == tuple(TOOLS)
    # from a checkpoint: the turns since offered recall, so the request carries it
    await save_checkpoint(sf, conv, CheckpointCandidate(
        summary="[Conversation summary]\nEarlier orders were priced.", last_seq=4,
        token_count=12))
    llm = ScriptedLLM(["Summary."])
    mem = DbMemory(conv, session_factory=sf, budget=1_400, compact_llm=llm,
                   system_prompt=PROMPT, tools=TOOLS, archive_tools=[recall_spec()])
    await mem.get_messages()
    [call] = llm.calls
    assert call.tools == (*TOOLS, recall_spec())
    # the summary the turns started from, where they saw it
    assert wire(call.messages[:2]) == wire([ChatMessage.system(PROMPT), ChatMessage.summary(
        "[Conversation summary]\nEarlier orders were priced.")])
