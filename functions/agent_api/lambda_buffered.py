"""Entry point of the buffered API function: Mangum behind API Gateway (REST, proxy integration).

Mangum collects a whole response before returning it, so the SSE routes run on the streaming function instead
(``run.sh`` under the Lambda Web Adapter); see docs/deployment.md. The app and its clients are created on the
first invocation, not at import, so the cold start pays only for imports.
"""

from __future__ import annotations

from typing import Any

from mangum import Mangum

_handler: Mangum | None = None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _handler
    if _handler is None:
        from functions.agent_api.app import create_app

        _handler = Mangum(create_app(), lifespan="off")
    response: dict[str, Any] = _handler(event, context)
    return response
