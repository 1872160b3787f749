# requires: sqlalchemy, aiosqlite, alembic
# expect: every load fitted its budget and kept its contract
"""DbMemory (layer 4) on a temporary SQLite file: load a long history within a budget.

The chat service stores every message; ``DbMemory`` is how a turn reads them back. This
script creates a throw-away SQLite database (migrations applied), stores a 120-message
conversation plus the user's new question, and then:

1. loads it at a 1,500-token budget with an offline summariser (a ``ScriptedLLM``): the
   oldest history is folded into one ``[Conversation summary]``, the trailing user message
   (the current question) is held apart, and a checkpoint is offered;
2. saves that checkpoint, as the service does after a turn, stores one more exchange, and
   loads again: the load starts from the checkpoint, reads only the newer rows and needs
   no summariser call;
3. loads once more without a summariser: ``smart_truncate`` instead.

Run: ``python examples/dbmemory_sqlite.py`` (needs the ``server`` extra:
``pip install 'ctxstack[server]'``). Exits 1 if a load breaks its contract.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from ctxstack import ChatMessage, DbMemory
from ctxstack.store import (
    NewMessage,
    append_messages,
    create_conversation,
    create_engine_from_url,
    create_user,
    session_factory,
    upgrade,
)
from ctxstack.store.files import FileStore
from ctxstack.testing import ScriptedLLM, first_sentence_summarizer
from ctxstack.tokens import estimate_messages_tokens

BUDGET = 1_500


def exchange(i: int) -> list[NewMessage]:
    return [
        NewMessage(role="user", content=f"Question {i}: what is the status of shipment "
                                        f"SHP-{5000 + i}? It left the Rotterdam dock."),
        NewMessage(role="assistant", content=f"Shipment SHP-{5000 + i} is in transit. It "
                                             f"should arrive on day {i % 28 + 1}, costing "
                                             f"{120 + i} EUR in fees."),
    ]


def report(label: str, memory: DbMemory, history: list[ChatMessage]) -> None:
    print(f"\n== {label}")
    print(f"method={memory.method} compacted={memory.was_compacted} "
          f"messages {memory.original_count} -> {memory.compacted_count}, "
          f"rows read {memory.rows_read}, tokens {estimate_messages_tokens(history):,} "
          f"(budget {BUDGET:,})")
    if memory.checkpoint is not None:
        print(f"started from the checkpoint covering seq <= {memory.checkpoint.last_seq}")
    if memory.trailing_message is not None:
        print(f"current question held apart: {memory.trailing_message.text!r}")
    first = history[0] if history else None
    if first is not None and first.metadata.get("kind") == "summary":
        print(f"first message: {first.text.splitlines()[0]} … "
              f"({len(first.text):,} characters)")


async def main(directory: Path) -> int:
    url = f"sqlite+aiosqlite:///{directory / 'example.db'}"
    await upgrade(url)
    engine = create_engine_from_url(url)
    factory = session_factory(engine)
    files = FileStore(factory, directory / "files")
    problems: list[str] = []
    try:
        user, _token = await create_user(factory, "example")
        conversation = await create_conversation(factory, user.id, "Shipments")
        stored = [m for i in range(1, 61) for m in exchange(i)]
        stored.append(NewMessage(role="user", content="Which shipment left first?"))
        await append_messages(factory, conversation.id, stored)
        print(f"stored {len(stored)} messages in {url}")

        summariser = ScriptedLLM(handler=first_sentence_summarizer)
        memory = DbMemory(conversation.id, session_factory=factory, budget=BUDGET,
                          compact_llm=summariser, user_id=user.id, file_store=files)
        history = await memory.get_messages()
        report("load 1: over budget, summarised", memory, history)
        if memory.method != "llm" or memory.checkpoint_candidate is None:
            problems.append("load 1 should summarise and offer a checkpoint")
        if estimate_messages_tokens(history) > BUDGET:
            problems.append("load 1 is over budget")
        if memory.trailing_message is None or "left first" not in memory.trailing_message.text:
            problems.append("load 1 did not hold the current question apart")
        saved = await memory.save_checkpoint()
        print(f"checkpoint saved: covers seq <= {saved.last_seq if saved else None}")

        await append_messages(factory, conversation.id, [
            NewMessage(role="assistant", content="SHP-5001 left first."),
            NewMessage(role="user", content="And the last one?"),
        ])
        calls_before = len(summariser.calls)
        again = DbMemory(conversation.id, session_factory=factory, budget=BUDGET,
                         compact_llm=summariser, user_id=user.id, file_store=files)
        history = await again.get_messages()
        report("load 2: from the checkpoint", again, history)
        new_calls = len(summariser.calls) - calls_before
        print(f"summariser calls for load 2: {new_calls}")
        if again.checkpoint is None or again.rows_read >= memory.rows_read:
            problems.append("load 2 did not start from the checkpoint")
        if not history or history[0].metadata.get("kind") != "summary":
            problems.append("load 2 lost the checkpoint's summary")

        plain = DbMemory(conversation.id, session_factory=factory, budget=BUDGET,
                         use_checkpoints=False, user_id=user.id, file_store=files)
        history = await plain.get_messages()
        report("load 3: no summariser, no checkpoint: smart_truncate", plain, history)
        if plain.method != "truncate" or estimate_messages_tokens(history) > BUDGET:
            problems.append("load 3 should truncate to the budget")
        if history and history[0].role != "user":
            problems.append("load 3 does not open with a user turn")
    finally:
        await engine.dispose()
    for p in problems:
        print(f"FAILED: {p}", file=sys.stderr)
    if not problems:
        print("\nevery load fitted its budget and kept its contract")
    return 1 if problems else 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="ctxstack-example-") as tmp:
        code = asyncio.run(main(Path(tmp)))
    raise SystemExit(code)
