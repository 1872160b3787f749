"""The units memo: a resent history is converted once, and reusing it changes nothing.

For each wire, a conversation converted reusing an earlier request's units must be the
conversation a full conversion makes — the same chat views, the same units — whatever the
client did to the history in between: appended to it, moved its cache marker, edited,
inserted or removed an earlier message, or sent items whose view depends on later ones
(a hosted call answered later, an output before its call, an unknown item). The memo
never answers one owner with another's conversation, and stays within its bounds.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from ctxstack.proxy.anthropic.units import RequestUnits, remembered_units, to_units
from ctxstack.proxy.request import WireConversation
from ctxstack.proxy.responses_view import ResponsesConversation, remembered
from ctxstack.proxy.sessions import conversation_hash, prefix_hash
from ctxstack.proxy.unit_memo import Remembered, UnitMemo, common_prefix
from ctxstack.tokens import DEFAULT_COUNTER

Edit = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]

SYSTEM = [{"type": "text", "text": "You are the operations assistant.",
           "cache_control": {"type": "ephemeral"}}]


# --------------------------------------------------------------------------- generic
def test_common_prefix_finds_the_first_difference() -> None:
    old = [{"a": i} for i in range(10)]
    assert common_prefix(old, [*old, {"a": 10}]) == 10  # appended
    assert common_prefix(old, [*old[:9], {"a": 9, "cache_control": 1}]) == 9  # last moved
    assert common_prefix(old, [*old[:3], {"a": -1}, *old[4:]]) == 3  # an early edit
    assert common_prefix(old, old[:4]) == 4  # shortened
    assert common_prefix(old, []) == 0
    assert common_prefix(old, [{"a": 5}, *old[1:]]) == 0


def test_the_memo_never_answers_another_owner_and_stays_bounded() -> None:
    memo: UnitMemo[str] = UnitMemo(max_entries=3, per_owner=2, max_size=100)
    messages = [{"role": "user", "content": "hello"}]
    memo.remember("alice", Remembered("sys", messages, "alice's units", size=10))
    assert memo.find("bob", "sys", messages) == (None, 0)
    assert memo.find("alice", "another system", messages) == (None, 0)
    found, same = memo.find("alice", "sys", [*messages, {"role": "user", "content": "more"}])
    assert found is not None
    assert found.units == "alice's units"
    assert same == 1
    for n in range(3):  # alice keeps her newest two conversations
        memo.remember("alice", Remembered("sys", [{"n": n}], f"a{n}", size=10))
    assert memo.find("alice", "sys", messages) == (None, 0)
    assert memo.find("alice", "sys", [{"n": 2}])[0] is not None
    memo.remember("carol", Remembered("sys", [{"n": 9}], "c", size=95))  # over the size
    assert memo.find("alice", "sys", [{"n": 2}]) == (None, 0)  # evicted, oldest first
    assert memo.find("carol", "sys", [{"n": 9}])[0] is not None
    memo.remember("dave", Remembered("sys", [{"n": 1}], "d", size=101))  # never kept
    assert memo.find("dave", "sys", [{"n": 1}]) == (None, 0)


# --------------------------------------------------------------------------- anthropic
def _anthropic_history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out += [
            {"role": "user", "content": f"Turn {t}: check day {t}."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": f"Day {t} then.", "signature": f"sig{t}"},
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": f"tu_{t}", "name": "read_log",
                 "input": {"path": f"d{t}", "lines": 1}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"tu_{t}",
                 "content": [{"type": "text", "text": f"log of day {t}"}]},
                {"type": "text", "text": "Go on."}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Day {t}: ok."}]},
        ]
    return out


def _anthropic_edits() -> dict[str, Edit]:
    def marker(m: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = copy.deepcopy(m)
        out[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return out

    def edit(m: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = copy.deepcopy(m)
        out[1]["content"][1]["text"] = "Reading it again."
        return out

    return {
        "appended": lambda m: [*m, {"role": "user", "content": "And now?"}],
        "same": lambda m: copy.deepcopy(m),
        "marker-moved": marker,
        "edited-early": edit,
        "inserted-early": lambda m: [*m[:4], *_anthropic_history(1), *m[4:]],
        "removed-early": lambda m: [*m[:4], *m[8:]],
        "shortened": lambda m: m[:-3],
        "new-system-unchanged-messages": lambda m: list(m),
    }


def _same_units(a: RequestUnits, b: RequestUnits) -> None:
    assert a.dicts == b.dicts
    assert a.per_message == b.per_message
    assert a.opaque == b.opaque
    assert [(u.kind, u.msg, u.blocks, u.opaque, u.call_ids) for u in a.units] == [
        (u.kind, u.msg, u.blocks, u.opaque, u.call_ids) for u in b.units]
    assert a.messages == b.messages


@pytest.mark.parametrize("change", list(_anthropic_edits()))
def test_anthropic_units_reused_are_the_units_a_full_conversion_makes(change: str) -> None:
    memo: UnitMemo[RequestUnits] = UnitMemo()
    before = _anthropic_history(6)
    first, _ = remembered_units(memo, "owner", SYSTEM, before, 1000)
    after = _anthropic_edits()[change](before)
    system = "Another prompt." if change.startswith("new-system") else SYSTEM
    found, same = memo.find("owner", system, after)
    units, _hashes = remembered_units(memo, "owner", system, after, 1000)
    _same_units(units, to_units(system, after))
    if change in ("appended", "same", "marker-moved"):
        assert found is not None
        assert same >= len(before) - 1
        assert units.dicts[5] is first.dicts[5]  # reused, not converted again
    if change == "new-system-unchanged-messages":
        assert found is None


@pytest.mark.parametrize("change", list(_anthropic_edits()))
def test_a_prefix_hash_carried_over_is_the_hash_of_the_new_units(change: str) -> None:
    memo: UnitMemo[RequestUnits] = UnitMemo()
    before = _anthropic_history(6)
    units, hashes = remembered_units(memo, "owner", SYSTEM, before, 1000)
    conv = units.conversation()
    conv.hashes = hashes
    covered = len(conv)
    old = conversation_hash(conv, "session", covered)  # what a stored view was hashed by
    after = _anthropic_edits()[change](before)
    system = "Another prompt." if change.startswith("new-system") else SYSTEM
    units2, hashes2 = remembered_units(memo, "owner", system, after, 1000)
    conv2 = units2.conversation()
    conv2.hashes = hashes2
    n = min(covered, len(conv2))
    assert conversation_hash(conv2, "session", n) == prefix_hash(conv2.messages, "session", n)
    extends = conversation_hash(conv2, "session", covered) == old if covered <= len(
        conv2) else False
    # Only a history whose covered units are unchanged may extend the stored view.
    assert extends == (change in ("appended", "same", "marker-moved"))


def test_counts_are_carried_over_only_for_the_counter_that_made_them() -> None:
    memo: UnitMemo[ResponsesConversation] = UnitMemo()
    before = _responses_history(5)
    first, _ = remembered(memo, "owner", before, "Instructions.", 1000)
    first.conversation.tokens(DEFAULT_COUNTER)
    conv, _ = remembered(memo, "owner", [*before, {"role": "user", "content": "Next."}],
                         "Instructions.", 1000)
    known = conv.conversation.known_counts
    assert known is not None
    assert known[0] == DEFAULT_COUNTER.cache_key
    assert len(known[1]) == len(first.conversation.messages)

    class Doubled:
        """Another counter: every message twice what the default counts."""

        cache_key = "doubled"

        def count_message(self, message: Any) -> int:
            return 2 * DEFAULT_COUNTER.count_message(message)

    doubled = conv.conversation.tokens(Doubled())  # type: ignore[arg-type]
    assert doubled == 2 * ResponsesConversation(conv.items, "Instructions.").conversation \
        .tokens(DEFAULT_COUNTER)


def test_anthropic_validation_skips_only_what_was_validated_before() -> None:
    from ctxstack.proxy.anthropic.wire import validate_messages
    from ctxstack.proxy.errors import ProxyError

    memo: UnitMemo[RequestUnits] = UnitMemo()
    history = _anthropic_history(3)
    remembered_units(memo, "owner", SYSTEM, history, 1000)
    # A new result answering a call made in the reused prefix is valid …
    grown = [*history, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "again"}]}]
    found, same = memo.find("owner", SYSTEM, grown)
    assert found is not None
    assert same == len(history)
    validate_messages(grown, same, found.units.calls_before(same))
    # … one answering no call is refused, though everything before it was reused.
    bad = [*history, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_nope", "content": "x"}]}]
    found, same = memo.find("owner", SYSTEM, bad)
    assert found is not None
    with pytest.raises(ProxyError) as refused:
        validate_messages(bad, same, found.units.calls_before(same))
    assert refused.value.status == 400


# --------------------------------------------------------------------------- responses
def _responses_history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "developer", "content": "Be brief."}]
    for t in range(turns):
        out += [
            {"role": "user", "content": f"Turn {t}: check day {t}."},
            {"type": "reasoning", "id": f"rs_{t}", "summary": [],
             "encrypted_content": f"gAAA{t}"},
            {"type": "function_call", "id": f"fc_{t}", "call_id": f"call_{t}",
             "name": "read_log", "arguments": json.dumps({"path": f"d{t}"})},
            {"type": "function_call_output", "call_id": f"call_{t}", "output": f"log {t}"},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"Day {t}: ok.", "annotations": []}]},
        ]
    return out


def _responses_edits() -> dict[str, Edit]:
    def edit(m: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = copy.deepcopy(m)
        out[4]["output"] = "log 0, edited"
        return out

    hosted = {"type": "local_shell_call", "id": "ls_1", "call_id": "shell_1",
              "action": {"type": "exec", "command": ["ls"]}, "status": "completed"}
    early_output = {"type": "function_call_output", "call_id": "call_late", "output": "x"}
    unknown = {"type": "additional_tools", "tools": []}
    next_question = {"role": "user", "content": "Next."}
    return {
        "appended": lambda m: [*m, {"role": "user", "content": "And now?"}],
        "same": lambda m: copy.deepcopy(m),
        "model-turn-continued": lambda m: [*m, {"type": "reasoning", "id": "rs_x",
                                                "summary": []}],
        "unknown-item-after": lambda m: [*m, unknown],
        "edited-early": edit,
        "inserted-early": lambda m: [*m[:6], *_responses_history(1)[1:], *m[6:]],
        "removed-early": lambda m: [*m[:6], *m[11:]],
        "shortened": lambda m: m[:-2],
        # Views that depend on later items: a hosted call (a tool call only once
        # answered) and an output sent before its call.
        "hosted-call-answered-later": lambda m: [*m, hosted, next_question],
        "output-before-its-call": lambda m: [*m, early_output, next_question],
    }


def _then(change: str) -> Edit:
    """A second change after the first (the hosted call answered, the late call made)."""
    answer = {"type": "local_shell_call_output", "call_id": "shell_1", "output": "a b"}
    late_call = {"type": "function_call", "call_id": "call_late", "name": "read_log",
                 "arguments": "{}"}
    more = {"role": "user", "content": "More."}
    if change == "hosted-call-answered-later":
        return lambda m: [*m, more, answer]
    if change == "output-before-its-call":
        return lambda m: [*m, more, late_call]
    return lambda m: [*m, {"role": "user", "content": "Next."}]


def _same_conversation(a: ResponsesConversation, b: ResponsesConversation) -> None:
    assert a.conversation.messages == b.conversation.messages
    assert [(u.kind, u.items, u.main) for u in a.units] == [
        (u.kind, u.items, u.main) for u in b.units]


@pytest.mark.parametrize("change", list(_responses_edits()))
def test_responses_units_reused_are_the_units_a_full_reading_makes(change: str) -> None:
    memo: UnitMemo[ResponsesConversation] = UnitMemo()
    before = _responses_history(5)
    remembered(memo, "owner", before, "Instructions.", 1000)[0].conversation.tokens(
        DEFAULT_COUNTER)
    after = _responses_edits()[change](before)
    conv, _ = remembered(memo, "owner", after, "Instructions.", 1000)
    _same_conversation(conv, ResponsesConversation(after, "Instructions."))
    conv.conversation.tokens(DEFAULT_COUNTER)
    later = _then(change)(after)
    conv, _ = remembered(memo, "owner", later, "Instructions.", 1000)
    fresh = ResponsesConversation(later, "Instructions.")
    _same_conversation(conv, fresh)
    # Counts carried over from the earlier conversation are the counts of these units.
    assert conv.conversation.tokens(DEFAULT_COUNTER) == fresh.conversation.tokens(
        DEFAULT_COUNTER)
    assert conv.conversation.counts == fresh.conversation.counts
    if change in ("appended", "same"):
        assert conv.reused_units > 0
    # Rendering the untouched view gives the client's own items back.
    assert conv.render(conv.conversation.messages) == later


@pytest.mark.parametrize("change", list(_responses_edits()))
def test_responses_prefix_hash_carried_over_only_for_unchanged_units(change: str) -> None:
    memo: UnitMemo[ResponsesConversation] = UnitMemo()
    before = _responses_history(5)
    conv, _ = remembered(memo, "owner", before, "Instructions.", 1000)
    covered = len(conv.conversation)
    old = conversation_hash(conv.conversation, "session", covered)
    after = _responses_edits()[change](before)
    conv2, _ = remembered(memo, "owner", after, "Instructions.", 1000)
    chat: WireConversation = conv2.conversation
    if covered <= len(chat):
        assert conversation_hash(chat, "session", covered) == prefix_hash(
            chat.messages, "session", covered)
        extends = conversation_hash(chat, "session", covered) == old
    else:
        extends = False
    # Only units unchanged over the covered prefix keep its hash (a unit the new items
    # join — a model turn continued, an unknown item carried — is changed).
    assert extends == (change in ("appended", "same", "output-before-its-call"))
