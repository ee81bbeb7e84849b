"""Whether the tests run in CI: there a missing tool or server fails the test instead of skipping it."""

from __future__ import annotations

import os


def running_in_ci() -> bool:
    """True when ``CI`` is set to anything but empty, 0, false or no."""
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false", "no"}
