"""The client's one stream over several upstream rounds (``ClientStream``), event by event:
what is held back, what is released, how indexes continue (pure: no HTTP)."""

from __future__ import annotations

from typing import Any

from ctxstack.compaction import HistoryArchive
from ctxstack.proxy.chat_wire import RecallRun
from ctxstack.proxy.recall import RECALL_TOOL, UpstreamUsage
from ctxstack.proxy.responses_recall import WIRE
from ctxstack.proxy.responses_rounds import ClientStream
from ctxstack.tokens import DEFAULT_COUNTER

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "x"}
RECALL = {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": RECALL_TOOL,
          "arguments": "{}"}


def _item(kind: str, index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": f"response.output_item.{kind}", "output_index": index, "item": item,
            "sequence_number": 0}


def _response(rid: str, output: list[dict[str, Any]], tools: list[Any]) -> dict[str, Any]:
    return {"id": rid, "status": "completed", "output": output, "tools": tools,
            "usage": {"input_tokens": 10, "output_tokens": 2,
                      "input_tokens_details": {"cached_tokens": 4}}}


def _run() -> RecallRun:
    return RecallRun(WIRE, HistoryArchive(), DEFAULT_COUNTER, {}, fits=1000, tokens=0)


def test_an_item_shown_before_a_recall_call_is_finished_and_kept() -> None:
    """A message streamed before the recall call whose end came after it began: the end
    still reaches the client, the item stays in the final output, the next round's
    items continue its indexes, the lifecycle keeps the first id, usage is summed."""
    view = ClientStream()
    tools = [{"type": "function", "name": RECALL_TOOL}]
    sent = view.feed({"type": "response.created", "sequence_number": 0,
                      "response": _response("resp_a", [], tools)})
    assert sent[0]["response"]["tools"] == []
    assert view.feed(_item("added", 0, MESSAGE))[0]["output_index"] == 0
    assert view.feed(_item("added", 1, RECALL)) == []
    assert view.feed(_item("done", 0, MESSAGE)) == []  # held: a recall call is pending
    view.feed({"type": "response.completed", "sequence_number": 9,
               "response": _response("resp_a", [MESSAGE, RECALL], tools)})
    assert view.recall_round() is not None
    released = view.next_round()
    assert [(e["type"], e["output_index"]) for e in released] == [
        ("response.output_item.done", 0)]
    assert view.feed({"type": "response.created", "response": {"id": "resp_b"}}) == []
    second = {**MESSAGE, "id": "msg_2"}
    assert view.feed(_item("added", 0, second))[0]["output_index"] == 1
    view.feed(_item("done", 0, second))
    view.feed({"type": "response.completed", "sequence_number": 3,
               "response": _response("resp_b", [second], tools)})
    run = _run()
    run.rounds = 1
    run.usage = UpstreamUsage(20, 4, 8, 0, 2)
    final = view.finish(run)[-1]["response"]
    assert final["id"] == "resp_a"
    assert [o["id"] for o in final["output"]] == ["msg_1", "msg_2"]
    assert final["usage"]["input_tokens"] == 20
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 8
    assert final["tools"] == []
    assert view.seq == 6  # created, two added, two done, completed: numbered in order


def test_a_reasoning_item_is_held_only_until_the_next_item_shows_no_recall() -> None:
    view = ClientStream()
    assert view.feed(_item("added", 0, REASONING)) == []
    assert view.feed(_item("done", 0, REASONING)) == []
    out = view.feed(_item("added", 1, MESSAGE))
    assert [(e["type"], e["output_index"]) for e in out] == [
        ("response.output_item.added", 0), ("response.output_item.done", 0),
        ("response.output_item.added", 1)]
    assert view.feed(_item("done", 1, MESSAGE))[0]["output_index"] == 1
