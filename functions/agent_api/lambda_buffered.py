"""Entry point of the buffered API function: Mangum behind API Gateway (REST, proxy integration).

Mangum collects a whole response before returning it, so the SSE routes run on the streaming function instead
(``run.sh`` under the Lambda Web Adapter); see docs/deployment.md. In a Lambda execution environment the app, its
services and their clients are built while this module is imported (the INIT phase), so the first invocation builds
nothing; anywhere else (tests, the import-time benchmark) on the first invocation.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from mangum import Mangum

from shared.container import init_container
from shared.startup_heap import freeze_startup_heap

logger = logging.getLogger(__name__)


def _at_init() -> Mangum | None:
    # Mangum runs an app's lifespan on every invocation, hence ``lifespan="off"`` and the warm-up done here.
    services = init_container("api")
    if services is None:
        return None
    from functions.agent_api.app import create_app

    built = Mangum(create_app(services), lifespan="off")
    _exercise(built)
    freeze_startup_heap()  # again: the app and what the two invocations built
    return built


def _exercise(built: Mangum) -> None:
    """Two invocations through Mangum during INIT, so what Mangum, FastAPI and the auth dependency build on the
    first request is built here: the health check, and a thread list without a token (refused with 401 before
    anything is read)."""
    for path in ("/healthz", "/api/v1/threads"):
        headers = {"Host": "init.invalid"}
        event = {
            "resource": "/{proxy+}",
            "path": path,
            "httpMethod": "GET",
            "headers": headers,
            "multiValueHeaders": {k: [v] for k, v in headers.items()},
            "queryStringParameters": None,
            "multiValueQueryStringParameters": None,
            "pathParameters": {"proxy": path.lstrip("/")},
            "stageVariables": None,
            "requestContext": {
                "resourcePath": "/{proxy+}",
                "httpMethod": "GET",
                "path": f"/prod{path}",
                "stage": "prod",
                "requestId": "init",
                "identity": {"sourceIp": "127.0.0.1"},
            },
            "body": None,
            "isBase64Encoded": False,
        }
        try:
            built(event, SimpleNamespace(aws_request_id="init", get_remaining_time_in_millis=lambda: 30_000))
        except Exception:
            logger.info("an init invocation failed; the first request builds what it would have", exc_info=True)


_handler: Mangum | None = _at_init()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _handler
    if _handler is None:
        from functions.agent_api.app import create_app

        _handler = Mangum(create_app(), lifespan="off")
    response: dict[str, Any] = _handler(event, context)
    return response
