"""The ``/playground`` page: static files built from ``web/playground`` by ``make playground`` (esbuild).

``page_router`` serves the page's files. ``create_app`` includes it only when the ``PLAYGROUND_ENABLED`` setting
is on (``make dev`` turns it on; a deployed stack has it off unless its parameter says otherwise). The files are
public code, like ``/docs``; everything the page shows comes from the API under the caller's bearer token, checked
by the same verifier as any other client.

The route that mints a local token for the page (``devtools.local.dev_tokens``) is not here: only the local runner
adds it, and the functions do not ship it, so it exists in no app a deployed entry point builds, whatever the
settings say.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

from shared.errors import NotFound

STATIC_DIR = Path(__file__).parent / "playground_static"
PAGE_FILES = {"app.js": "text/javascript", "app.css": "text/css"}

# The page runs only its own bundle: no inline script, nothing from another origin. Images may be blob: URLs: a
# message's stored images are read with the bearer token (fetch, same origin) and shown through object URLs.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

page_router = APIRouter(include_in_schema=False)


def _built_file(name: str) -> Path:
    path = STATIC_DIR / name
    if not path.is_file():
        raise NotFound(f"the playground is not built: run `make playground` ({name} is missing)")
    return path


@page_router.get("/playground")
async def playground_page() -> Response:
    return FileResponse(_built_file("index.html"), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@page_router.get("/playground/")
async def playground_page_slash() -> Response:
    return RedirectResponse("/playground", status_code=308)


@page_router.get("/playground/config.json")
async def playground_config(request: Request) -> JSONResponse:
    """What the page needs to know about this server: whether it may mint its own token (``make dev`` only)."""
    dev_tokens = bool(getattr(request.app.state, "playground_dev_tokens", False))
    return JSONResponse({"devTokens": dev_tokens}, headers=PAGE_HEADERS)


@page_router.get("/playground/assets/{name}")
async def playground_asset(name: str) -> Response:
    media_type = PAGE_FILES.get(name)
    if media_type is None:
        raise NotFound("no such playground file")
    return FileResponse(_built_file(name), media_type=media_type, headers=PAGE_HEADERS)
