"""One smoke-size capacity run per test session, shared by the smoke test and the drift test (it takes ~30 s)."""

from __future__ import annotations

import shutil

import pytest

from bench import capacity


@pytest.fixture(scope="session")
def capacity_smoke() -> capacity.CapacityResult:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is installed by `make test`")
    return capacity.main(["--smoke"])
