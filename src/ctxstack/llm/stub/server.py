"""StubServer: the stub app on 127.0.0.1 and a free port, in a background thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import uvicorn

from ctxstack.llm.stub.app import StubState, create_app
from ctxstack.llm.stub.replies import DEFAULT_MODEL, ReplyLike, Rule, StubReply, StubRequest

if TYPE_CHECKING:
    from ctxstack.llm.openai import OpenAICompatibleLLM


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for uvicorn to serve on.

    ``IPPROTO_TCP`` is named explicitly: asyncio turns Nagle's algorithm off
    (``TCP_NODELAY``) only on sockets whose ``proto`` says TCP, and accepted connections
    inherit the listener's. With ``proto`` 0 every answer written in two parts (headers,
    then body) waited for the client's delayed ACK, about 40 ms per request on Linux —
    which made every model call in the tests and benchmarks 40 ms slower than scripted.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the server thread runs on: uvloop's when installed (the ``server``
    extra installs it), else asyncio's default.

    The stub shares the machine with whatever it is measured against (the load benchmark
    runs it on the same two cores as the service's workers): on asyncio's pure-Python
    loop its own CPU per model call was a visible share of that contention, issue 15.
    ``ctxstack stub-llm`` gets uvloop from uvicorn (``--loop auto``) already.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class StubServer:
    """The stub on 127.0.0.1 and a free port, served by uvicorn in a background thread.

    Use as a context manager (``with`` or ``async with``) or call :meth:`start` /
    :meth:`stop`. The script can be changed at any time from the test's thread; the
    server has its own event loop, so one server can outlive many test event loops.

    Args:
        replies: initial reply queue (strings are text answers).
        rule: answers when the queue is empty: ``rule(request) -> StubReply | str``.
        delay: seconds added before every answer.
        model: the model name ``/v1/models`` lists.
        api_key: when set, requests must send ``Authorization: Bearer <api_key>``
            (else 401); when ``None`` any key is accepted.
        max_recorded: keep only the newest this many requests (see :class:`StubState`);
            ``None``, the default, keeps all of them.
    """

    def __init__(self, replies: Iterable[ReplyLike] = (), *, rule: Rule | None = None,
                 delay: float = 0.0, model: str = DEFAULT_MODEL, api_key: str | None = None,
                 host: str = "127.0.0.1", port: int = 0,
                 max_recorded: int | None = None) -> None:
        self.state = StubState(model=model, api_key=api_key, replies=replies, rule=rule,
                               delay=delay, max_recorded=max_recorded)
        self.host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 10.0) -> StubServer:
        """Bind, start serving, and return once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = listening_socket(self.host, self._port)
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(self.state), log_level="warning", log_config=None,
                                lifespan="off", timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        self._server = server

        def run() -> None:
            async def serve() -> None:
                self._loop = asyncio.get_running_loop()
                self.state.stopping = asyncio.Event()
                await server.serve(sockets=[sock])

            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(serve())
            sock.close()

        self._thread = threading.Thread(target=run, name=f"stub-llm-{self._port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"stub LLM server did not start on {self.base_url}")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving; pending delayed answers are cut short."""
        if self._server is None or self._thread is None:
            return
        loop, stopping = self._loop, self.state.stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._server = self._thread = self._loop = None
        self.state.stopping = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> StubServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # ------------------------------------------------------------------ addresses
    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self._port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        return f"{self.url}/v1"

    # ------------------------------------------------------------------ script
    def push(self, *replies: ReplyLike) -> StubServer:
        """Queue replies (strings are text answers), consumed one per request."""
        self.state.push(*replies)
        return self

    @property
    def rule(self) -> Rule | None:
        return self.state.rule

    @rule.setter
    def rule(self, rule: Rule | None) -> None:
        self.state.rule = rule

    @property
    def fault(self) -> StubReply | None:
        """When set, every request gets this reply (queue and rule are bypassed)."""
        return self.state.fault

    @fault.setter
    def fault(self, reply: StubReply | None) -> None:
        self.state.fault = reply

    @property
    def delay(self) -> float:
        return self.state.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self.state.delay = seconds

    @property
    def pending(self) -> int:
        """Replies still queued."""
        return self.state.pending

    @property
    def requests(self) -> list[StubRequest]:
        """Every chat request received so far, oldest first (a copy)."""
        return self.state.requests

    @property
    def last_request(self) -> StubRequest:
        requests = self.state.requests
        if not requests:
            raise LookupError("the stub has not received any request yet")
        return requests[-1]

    def reset(self) -> None:
        """Forget the queue, rule, fault, delay and recorded requests."""
        self.state.reset()

    def client(self, **kwargs: Any) -> OpenAICompatibleLLM:
        """An :class:`~ctxstack.llm.openai.OpenAICompatibleLLM` pointed at this stub."""
        from ctxstack.llm.openai import OpenAICompatibleLLM

        kwargs.setdefault("api_key", self.state.api_key or "stub-key")
        kwargs.setdefault("model", self.state.model)
        return OpenAICompatibleLLM(base_url=self.base_url, **kwargs)
