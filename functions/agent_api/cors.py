"""CORS for browser clients, from settings (``CORS_ALLOWED_ORIGINS``).

Behind API Gateway the OPTIONS preflight is answered by the gateway (template.yaml ``Cors``), so the browser needs
the app to send the same ``Access-Control-Allow-Origin`` on the actual responses; run locally (``make dev``) the app
answers the preflight itself. The allowed headers and methods are the ones the gateway answers with. Bearer tokens
travel in a header, never in cookies, so credentials are not allowed.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

ALLOWED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "Last-Event-ID")
EXPOSED_HEADERS = ("Next-Cursor",)
"""Response headers a page of a script may read: the next page's cursor of an export (``GET /admin/feedback``)."""
PREFLIGHT_MAX_AGE_S = 600


def install_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Answer preflights and add CORS headers for ``origins``; nothing at all when the list is empty."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=list(ALLOWED_METHODS),
        allow_headers=list(ALLOWED_HEADERS),
        allow_credentials=False,
        expose_headers=list(EXPOSED_HEADERS),
        max_age=PREFLIGHT_MAX_AGE_S,
    )
