"""The run lease and heartbeat the emulated instances run with: short, so a test sees a lease expire in seconds."""

from __future__ import annotations

LEASE_S = 6.0
HEARTBEAT_S = 2.0
