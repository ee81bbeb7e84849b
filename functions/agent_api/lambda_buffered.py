"""Entry point of the buffered API function: Mangum behind API Gateway (REST, proxy integration).

Mangum collects a whole response before returning it, so the SSE routes run on the streaming function instead
(``run.sh`` under the Lambda Web Adapter); see docs/deployment.md. In a Lambda execution environment the app, its
services and their clients are built while this module is imported (the INIT phase), so the first invocation builds
nothing; anywhere else (tests, the import-time benchmark) on the first invocation.
"""

from __future__ import annotations

from typing import Any

from mangum import Mangum

from shared.container import init_container


def _at_init() -> Mangum | None:
    # Mangum runs an app's lifespan on every invocation, hence ``lifespan="off"`` and the warm-up done here.
    services = init_container("api")
    if services is None:
        return None
    from functions.agent_api.app import create_app

    return Mangum(create_app(services), lifespan="off")


_handler: Mangum | None = _at_init()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _handler
    if _handler is None:
        from functions.agent_api.app import create_app

        _handler = Mangum(create_app(), lifespan="off")
    response: dict[str, Any] = _handler(event, context)
    return response
