"""One table from error type to HTTP status, and the one JSON error shape."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared import errors

logger = logging.getLogger(__name__)

STATUS_BY_TYPE: tuple[tuple[type[errors.AgentError], int], ...] = (
    (errors.InvalidRequest, 422),
    (errors.Unauthenticated, 401),
    (errors.Forbidden, 403),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.PayloadTooLarge, 413),
    (errors.TooManyRequests, 429),
    (errors.ServiceUnavailable, 503),
    (errors.ModelError, 502),
    (errors.ConfigurationError, 500),
)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def status_for(exc: errors.AgentError) -> int:
    for kind, status in STATUS_BY_TYPE:
        if isinstance(exc, kind):
            return status
    return 500


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.AgentError)
    async def _agent_error(_request: Request, exc: errors.AgentError) -> JSONResponse:
        status = status_for(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if isinstance(exc, errors.TooManyRequests):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()
        ]
        return JSONResponse(error_body("invalid_request", "request is not valid", details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return JSONResponse(error_body("internal_error", "internal error"), status_code=500)
