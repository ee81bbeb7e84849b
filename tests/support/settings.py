"""The settings every test builds its services from: one table, one region, one token secret.

Tests import these from here rather than from tests/conftest.py, so no test module depends on a conftest.
"""

from __future__ import annotations

from typing import Any

from shared.settings import Settings

TEST_SECRET = "test-secret-for-hs256-tokens-0123456789"
TABLE = "agent-test"
REGION = "us-east-1"


def make_settings(**overrides: Any) -> Settings:
    """The test settings (moto's table and region, HS256 tokens, a short SSE ping), with ``overrides`` applied."""
    base: dict[str, Any] = {
        "table_name": TABLE,
        "aws_region": REGION,
        "jwt_secret": TEST_SECRET,
        "auth_mode": "hs256",
        "sse_ping_interval_s": 1.0,
    }
    base.update(overrides)
    return Settings(**base)
