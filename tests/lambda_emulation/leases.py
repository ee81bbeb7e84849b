"""The run lease and heartbeat the emulated instances run with: short, so a test sees a lease expire in seconds."""

from __future__ import annotations

LEASE_S = 6.0
HEARTBEAT_S = 2.0
LEASED = {"SSE_PING_INTERVAL_S": "1", "RUN_LEASE_S": str(LEASE_S), "RUN_HEARTBEAT_S": str(HEARTBEAT_S)}
"""The variables that set them (and a ping a second), added to `tests.support.lambda_instance.function_env`."""
