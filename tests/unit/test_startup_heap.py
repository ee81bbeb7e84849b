"""What start-up built is frozen out of the garbage collector's reach in a serving process, and only there."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from functions.agent_api import app as app_module
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.settings import Settings
from shared.startup_heap import freeze_startup_heap
from shared.wiring import ServiceOverrides, Services


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # this test process keeps its collector as it was


def test_freezing_moves_every_live_object_out_of_the_generations() -> None:
    held = [object() for _ in range(1000)]
    assert gc.get_freeze_count() == 0
    frozen = freeze_startup_heap()
    assert frozen == gc.get_freeze_count() > len(held)
    left = [len(gc.get_objects(generation)) for generation in range(3)]
    assert sum(left) < 100  # every tracked object but the few made since is frozen


@pytest.mark.parametrize(("freeze_heap", "expected"), [(True, 1), (False, 0), (None, 0)])
def test_the_app_freezes_at_the_end_of_its_start_up_when_it_serves(
    monkeypatch: pytest.MonkeyPatch, freeze_heap: bool | None, expected: int
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(app_module, "freeze_startup_heap", lambda: calls.append("frozen") or 0)
    services = Services(
        Settings(auth_mode="hs256", jwt_secret="s" * 32),
        overrides=ServiceOverrides(store=InMemoryStore(), stream=InMemoryEventStream()),
    )
    # WHEN an app starts (lifespan) with its services given, as tests and benchmarks build it
    with TestClient(app_module.create_app(services, freeze_heap=freeze_heap)) as client:
        assert client.get("/healthz").status_code == 200
    # THEN it froze its start-up heap only when told it is a serving process (the deployed factory always is)
    assert len(calls) == expected
