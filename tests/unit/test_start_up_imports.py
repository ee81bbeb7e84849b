"""What a function's start-up loads: code that only a rare path runs is loaded on that path (docs/architecture.md,
"What a module costs at import")."""

import subprocess
import sys

_START_UP = """
import sys
import functions.automation.handler
from shared.settings import Settings
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.wiring import ServiceOverrides, Services
overrides = ServiceOverrides(store=InMemoryStore(), stream=InMemoryEventStream())
services = Services(Settings(embedded=True), overrides=overrides)
built = services.warm_up("automation")
assert "runs" in built, built
print("shared.runs.sweeper" in sys.modules)
"""


def test_the_automation_start_up_builds_the_run_service_without_loading_the_sweeper() -> None:
    # The repair that ends a run whose lease expired is imported by the first takeover, not by INIT's warm-up.
    done = subprocess.run([sys.executable, "-c", _START_UP], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
