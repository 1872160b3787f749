"""DbMemory on real-shape history (fixtures: ``tests/realdata``), SQLite and PostgreSQL.

A long multi-session dialogue in several languages, stored as the chat service stores
it, loaded back through layer 4: order kept, the trailing query dropped, the result within
budget by o200k_base and opening with a user turn; text with NUL bytes and lone
surrogates (both appear in real logs) stored and loaded without crashing.
"""

from __future__ import annotations

import pytest

from ctxstack.memory import DbMemory
from ctxstack.messages._model import scrub_surrogates
from ctxstack.messages._tool_turns import tool_turn_problems
from ctxstack.store import (
    NewMessage,
    SessionFactory,
    UserRecord,
    append_messages,
    create_conversation,
)
from ctxstack.tokens import TiktokenCounter
from tests import realdata

pytest.importorskip("tiktoken")
O200K = TiktokenCounter("o200k_base")


@pytest.fixture
async def conv(sf: SessionFactory, alice: UserRecord) -> str:
    return (await create_conversation(sf, alice.id)).id


def _dialogue() -> list[NewMessage]:
    wire = realdata.multi_session_dialogue(25)
    return [NewMessage(role=m["role"], content=m["content"]) for m in wire
            if m["role"] in ("user", "assistant")]


@pytest.mark.parametrize("budget", [4_000, 16_000])
async def test_multi_session_history_loads_within_budget(
    sf: SessionFactory, conv: str, budget: int
) -> None:
    stored = _dialogue()
    await append_messages(sf, conv, stored)
    memory = DbMemory(conv, session_factory=sf, budget=budget)
    loaded = await memory.get_messages()
    assert O200K.count_messages(loaded) <= budget
    assert tool_turn_problems(loaded) == []
    assert loaded[0].role == "user"
    texts = [m.content for m in stored[:-1]]  # the trailing query is dropped
    assert [m.text for m in loaded] == texts[len(texts) - len(loaded):]
    assert memory.was_compacted
    assert memory.original_count == len(stored) - 1


@pytest.mark.parametrize("key", ["nul", "surrogate", "zwj_rtl", "ar", "emoji"])
async def test_hazardous_text_is_stored_and_loaded(
    sf: SessionFactory, conv: str, key: str
) -> None:
    """Every backend stores the same thing: NUL and lone surrogates become U+FFFD (so
    PostgreSQL, which refuses NUL, and UTF-8 encoding, which refuses surrogates, never fail
    a batch), every other character is kept exactly."""
    text = realdata.MULTILINGUAL[key]
    await append_messages(sf, conv, [NewMessage(role="user", content=text),
                                     NewMessage(role="assistant", content="ok " + text),
                                     NewMessage(role="user", content="next")])
    loaded = await DbMemory(conv, session_factory=sf, budget=8_000).get_messages()
    assert [m.role for m in loaded] == ["user", "assistant"]
    assert loaded[0].text.replace("\ufffd", "") != ""
    expected = scrub_surrogates(text.replace("\x00", "\ufffd"))
    assert loaded[0].text == expected
    assert loaded[1].text == "ok " + expected
