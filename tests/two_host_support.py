"""Helpers for the two-host test (issue 31, item 3): a stub-model rule that holds a turn
open until the test releases it, and an SSE reader that runs in its own thread.

A held turn makes the test independent of the machine's speed: instead of a model
that is "slow enough" for the test to act while the turn runs, the agent keeps calling
a tool until an inject carrying :data:`RELEASE` reaches it. Everything the test does
while the turn is held therefore happens while it surely runs, and the inject that ends
it is at the same time the proof that injects sent to one host reach a turn running on
the other.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from tests.test_server_streams import frames

HOLD = "[hold]"
"""In a question: the agent keeps calling a tool until an inject holds :data:`RELEASE`."""
RELEASE = "[release]"
QUESTION = re.compile(r"^Q\d+:")
"""Every question of these tests starts ``Q<n>:`` (injects never do), so the rule finds
the current question in the model's messages — after the history, before the steps."""
HOLD_STEP_SECONDS = 0.15
"""The stub's pause per held tool call: keeps a held turn from spinning the CPU."""
ANSWER_WORDS = 60


def redis_db_url(url: str, db: int) -> str:
    """``url`` with its database number replaced (the two-host test keeps its keys apart
    from the other tests' in a database of its own)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


class HoldingRule:
    """A stub-model rule playing every role of a ReAct turn (see the module docstring).

    * compaction prompts → a short summary;
    * the agent (a request with tools): a question marked :data:`HOLD` gets one more
      tool call (with different arguments each time, so no cycle warning) until a user
      message after it holds :data:`RELEASE`; otherwise a tool call first, then a brief
      answer;
    * the streamed synthesis → an answer that names the question (``Answer to Q<n>``)
      followed by :data:`ANSWER_WORDS` words, in small chunks.
    """

    def __call__(self, request: Any) -> Any:
        from ctxstack.compaction._prompts import LANGUAGE_INSTRUCTION
        from ctxstack.llm.stub import StubReply

        messages = request.messages
        system = "\n".join(m.text for m in messages if m.role == "system")
        if system.rstrip().endswith(LANGUAGE_INSTRUCTION):
            return StubReply.text("Summary: earlier questions were answered.")
        if request.tools:
            at = max((i for i, m in enumerate(messages)
                      if m.role == "user" and QUESTION.match(m.text)), default=0)
            question = messages[at].text if messages else ""
            after = messages[at + 1:]
            steps = sum(1 for m in after if m.role == "tool")
            released = any(m.role == "user" and RELEASE in m.text for m in after)
            if (HOLD in question and not released) or steps == 0:
                return StubReply.tool_call("calculate", {"expression": f"{steps}+1"},
                                           delay=HOLD_STEP_SECONDS if HOLD in question else 0)
            return StubReply.text(f"Brief: {steps} tool steps for {question[:40]}")
        prompt = request.last_user_text
        question = prompt.split("Request:\n", 1)[-1].split("\n", 1)[0]
        label = QUESTION.match(question)
        body = " ".join(f"word{i}" for i in range(ANSWER_WORDS))
        return StubReply.text(f"Answer to {label.group(0) if label else '?'} {body}",
                              chunk_size=12)


@dataclass(frozen=True)
class Frame:
    """One SSE frame: its id, event name and JSON payload."""

    id: str | None
    event: str
    data: Any

    @property
    def seq(self) -> int:
        """The frame's number in its turn (``<turn>.<n>``)."""
        return int(str(self.id).rsplit(".", 1)[1])

    @property
    def turn(self) -> str:
        return str(self.id).rsplit(".", 1)[0]


@dataclass
class StreamReader:
    """One SSE request read in a background thread, so the test can act meanwhile and
    wait for what it needs to have seen (:meth:`wait_for`).

    ``error`` holds the transport error that ended the read (a killed server), if any.
    """

    base_url: str
    method: str
    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    frames: list[Frame] = field(default_factory=list)
    status: int | None = None
    body: str = ""
    error: BaseException | None = None
    finished: bool = False

    def __post_init__(self) -> None:
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True,
                                        name=f"sse {self.method} {self.path}")
        self._thread.start()

    def _update(self, **values: Any) -> None:
        with self._changed:
            for name, value in values.items():
                setattr(self, name, value)
            self._changed.notify_all()

    def _read(self) -> None:
        try:
            with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(90)) as client, \
                    client.stream(self.method, self.path, **self.kwargs) as response:
                if response.status_code != 200:
                    response.read()
                    self._update(status=response.status_code, body=response.text)
                    return
                self._update(status=200)
                for frame_id, event, data in frames(response):
                    with self._changed:
                        self.frames.append(Frame(frame_id, event, json.loads(data)))
                        self._changed.notify_all()
        except httpx.HTTPError as exc:
            self._update(error=exc)
        finally:
            self._update(finished=True)

    def events(self) -> list[str]:
        with self._changed:
            return [f.event for f in self.frames]

    def wait_for(self, condition: Callable[[StreamReader], bool], what: str,
                 timeout: float = 60.0) -> None:
        """Wait until ``condition(self)`` holds; fail (naming ``what``) when the stream
        ended without it or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self):
                left = deadline - time.monotonic()
                if self.finished or left <= 0:
                    raise AssertionError(
                        f"{self.method} {self.path}: never saw {what} (status {self.status}, "
                        f"error {self.error!r}, events {[f.event for f in self.frames]}, "
                        f"body {self.body[:300]!r})")
                self._changed.wait(min(left, 1.0))

    def wait_started(self) -> None:
        """Wait for the response's status (the turn's claim is taken before it)."""
        self.wait_for(lambda r: r.status is not None, "a response")
        assert self.status == 200, (self.status, self.body)

    def join(self, timeout: float = 90.0) -> list[Frame]:
        """Wait for the end of the stream; its frames."""
        self.wait_for(lambda r: r.finished, "the end of the stream", timeout)
        self._thread.join(10)
        return list(self.frames)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0,
               pause: float = 0.2) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(pause)
