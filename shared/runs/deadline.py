"""When the current invocation must be done: the deadline a run and a streaming response have to end before.

On Lambda the platform kills an invocation at its deadline ("Task timed out"), leaving a run mid-way. So a run ends
itself with ``RUN_ERROR`` ``run_deadline`` a margin before it, and a long-lived stream closes cleanly (the client
resumes with ``Last-Event-ID``). The deadline comes from the Lambda context:

- under the Lambda Web Adapter, the ``x-amzn-lambda-context`` request header (JSON of the runtime's context; its
  ``deadline`` is the invocation's deadline in epoch milliseconds);
- in a handler function, ``context.get_remaining_time_in_millis()``;
- otherwise (a server without Lambda) the configured function timeout from the start of the request.

The deadline travels as a parameter, a plain value: read where the invocation enters the code (an HTTP request's
``Deadline`` dependency, a handler's context) and passed down to the run service (``RunService.admit``,
``run_inline``), which falls back to the function timeout from now when it is None.
"""

from __future__ import annotations

import json
import time
from typing import Any

LAMBDA_CONTEXT_HEADER = "x-amzn-lambda-context"


def deadline_from_lambda_header(value: str | None) -> float | None:
    """The deadline (epoch seconds) in an ``x-amzn-lambda-context`` header; None when absent or unreadable."""
    if not value:
        return None
    try:
        context = json.loads(value)
    except ValueError:
        return None
    if not isinstance(context, dict):
        return None
    for name in ("deadline", "deadline_ms"):
        millis = context.get(name)
        if isinstance(millis, int | float) and not isinstance(millis, bool) and millis > 0:
            return float(millis) / 1000.0
    return None


def deadline_from_context(context: Any) -> float | None:
    """The deadline (epoch seconds) of a handler's Lambda context; None without one (tests, the local runner)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    try:
        millis = float(remaining())
    except (TypeError, ValueError):
        return None
    return time.time() + millis / 1000.0
