"""Persisted token-count calibration: per model, survives a restart, shared by workers."""

from __future__ import annotations

import asyncio

import pytest

from ctxstack.errors import InputError
from ctxstack.llm import ScriptedLLM
from ctxstack.server.settings import Settings
from ctxstack.server.state import LLMProvider
from ctxstack.store.calibration import load_calibration, save_calibration
from ctxstack.store.db import SessionFactory
from ctxstack.tokens import CalibratingCounter


def _learnt(factor: float, calls: int = 5) -> CalibratingCounter:
    counter = CalibratingCounter(model="gpt-4o", smoothing=1.0)
    for _ in range(calls):
        assert counter.observe(1000, int(1000 * factor))
    return counter


async def test_state_round_trips_per_model(sf: SessionFactory) -> None:
    assert await load_calibration(sf, "gpt-4o") is None
    await save_calibration(sf, "gpt-4o", _learnt(1.25).export_state())
    await save_calibration(sf, "other", _learnt(1.5).export_state())
    fresh = CalibratingCounter(model="gpt-4o")
    state = await load_calibration(sf, "gpt-4o")
    assert state is not None
    fresh.load_state(state)
    assert fresh.factor() == pytest.approx(1.25)
    assert fresh.samples() == 5
    # saving again replaces (the last writer wins), other models untouched
    await save_calibration(sf, "gpt-4o", _learnt(1.1).export_state())
    again = CalibratingCounter(model="gpt-4o")
    again.load_state(await load_calibration(sf, "gpt-4o") or {})
    assert again.factor() == pytest.approx(1.1)
    other = CalibratingCounter(model="gpt-4o")
    other.load_state(await load_calibration(sf, "other") or {})
    assert other.factor() == pytest.approx(1.5)


async def test_bad_model_names_and_bad_state_are_refused(sf: SessionFactory) -> None:
    with pytest.raises(InputError, match="model"):
        await save_calibration(sf, "", {})
    with pytest.raises(InputError, match="model"):
        await load_calibration(sf, "x" * 201)
    counter = CalibratingCounter(max_factor=2.0)
    counter.load_state({"factors": {"": 99.0, "m": "nan", "n": float("inf")}, "samples": {}})
    assert counter.factor() == 2.0  # clamped, never trusted beyond the bounds
    assert counter.factor("m") == 2.0  # ignored: the unnamed factor applies
    assert counter.factor("n") == 2.0


async def test_the_service_loads_at_start_and_saves_after_learning(sf: SessionFactory) -> None:
    settings = Settings()
    first = LLMProvider(settings, main=ScriptedLLM(), fast=ScriptedLLM())
    await first.persist_calibration(sf)
    counter = first.counter("main")
    assert counter is not None
    assert counter.factor() == 1.0
    for _ in range(3):
        counter.observe(1000, 1400)
    await first.aclose()  # waits for the pending save
    learnt = counter.factor()
    assert learnt > 1.0
    # a restarted (or another) worker starts from what the first one learnt
    second = LLMProvider(settings, main=ScriptedLLM(), fast=ScriptedLLM())
    await second.persist_calibration(sf)
    restored = second.counter("main")
    assert restored is not None
    assert restored.factor() == pytest.approx(learnt)
    assert second.counter("fast") is not None
    assert second.counter("fast").factor() == 1.0  # type: ignore[union-attr]
    await asyncio.sleep(0)
    await second.aclose()
