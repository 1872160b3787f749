"""Shared fixtures for tests that run a ``ctxstack serve`` process against the stub LLM.

Registered for every test module in ``tests/conftest.py``. A module that uses them
provides ``stub`` (the :class:`~ctxstack.llm.stub.StubServer` the service calls) and
``server`` (its :class:`~tests.service_support.ServerProcess`); then:

* ``rule`` — a fresh :class:`~tests.service_support.ServiceRule` answering for the stub
  during the test (removed afterwards);
* ``client`` — an ``httpx.Client`` on the service, closed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ctxstack.llm.stub import StubServer
from tests.service_support import ServerProcess, ServiceRule


@pytest.fixture
def rule(stub: StubServer) -> Iterator[ServiceRule]:
    rule = ServiceRule()
    stub.rule = rule
    yield rule
    stub.rule = None


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c
