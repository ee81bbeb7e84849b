"""``make dev``: the whole system on one machine with embedded defaults (no cloud account, no API key).

DynamoDB, the Scheduler and the attachment bucket (S3) are emulated in-process by moto; events go to an in-process
Redis-compatible store unless REDIS_URL is set; without LLM_BASE_URL the built-in offline model answers (and says
so). The memory worker and the scheduler run in the same process: run-completed events are extracted in the
background, and stored schedules fire as the Scheduler would fire them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI

from devtools.local.dev_tokens import DEV_TENANT_ID, install_dev_tokens
from devtools.local.embedded import EmbeddedAws, embedded_stream_client
from functions.agent_api.app import create_app
from shared.settings import LOCAL_JWT_SECRET, Settings
from shared.wiring import ServiceOverrides, Services
from shared.wiring.settings import StructuredSettings, load_settings

# The page's token is for the local tenant; its chats run on chat_playground (chat_default narrowed to the page's
# front-end tool, confirm_booking), so the front-end tool demo works under `make dev`. Set PROFILE_ROLLOUT to change it.
PLAYGROUND_ROLLOUT = json.dumps({"tenants": {DEV_TENANT_ID: {"chat_default": "chat_playground"}}})
LOCAL_ATTACHMENTS_BUCKET = "agent-attachments-local"


def local_environment() -> dict[str, str]:
    """What ``make dev`` sets unless the environment does: the local token secret, a short memory quiet period
    (120 s by the profile), the playground and its rollout, and the attachment bucket in moto's in-process S3, whose
    URLs no browser can open: history gives the API's authenticated parts route instead of presigned GETs."""
    return {
        "JWT_SECRET": LOCAL_JWT_SECRET,
        "MEMORY_IDLE_S": "5",
        "PLAYGROUND_ENABLED": "true",
        "PROFILE_ROLLOUT": PLAYGROUND_ROLLOUT,
        "ATTACHMENTS_BUCKET": LOCAL_ATTACHMENTS_BUCKET,
        "ATTACHMENT_PRESIGNED_URLS": "false",
    }


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    for name, value in local_environment().items():
        os.environ.setdefault(name, value)
    loaded = load_settings(Settings)
    settings = loaded.settings.model_copy(update={"embedded": True})
    aws = EmbeddedAws(settings)
    aws.start()
    app, services = build_local_app(settings, structured=loaded.structured)
    port = int(os.environ.get("PORT", "8000"))
    url = f"http://127.0.0.1:{port}"
    playground = f"{url}/playground" if settings.playground_enabled else "off"
    logging.getLogger(__name__).info(
        "serving", extra={"url": url, "playground": playground, "model": type(services.model).__name__}
    )
    print(f"Serving {url} (playground: {playground})", flush=True)
    try:
        uvicorn.run(app, host=os.environ.get("HOST", "127.0.0.1"), port=port, log_level="info")
    finally:
        aws.stop()


def build_local_app(
    settings: Settings, *, structured: StructuredSettings | None = None
) -> tuple[FastAPI, Services]:
    """The app of ``make dev`` on an already started ``EmbeddedAws``: the in-process stream store unless
    REDIS_URL is set, the memory worker and the schedule runner in the same process; ``structured``: the structured
    settings as they loaded (default: parsed from ``settings``)."""
    overrides = ServiceOverrides()
    if not settings.redis_url:
        from shared.adapters.redis_stream import RedisEventStream

        stream = RedisEventStream(embedded_stream_client(), ttl_s=settings.event_stream_ttl_s)
        overrides = ServiceOverrides(stream=stream)
    services = Services(settings, overrides=overrides, structured=structured)
    # The memory worker runs in-process: run-completed events go to the same coalescer the memory Lambda runs,
    # and its delayed "extraction due" messages are in-process timers (MEMORY_IDLE_S long).
    # Webhooks too: the same run-ended events are delivered in the background, with backoff (webhook_worker).
    from devtools.local.memory_worker import InProcessMemoryWorker
    from devtools.local.webhook_worker import InProcessWebhookQueue
    from shared.memory.trigger import RunCompletedPublisher

    queue = InProcessWebhookQueue(services, InProcessMemoryWorker(services))
    services.use_run_completed_publisher(RunCompletedPublisher(queue))
    app = local_app(services)
    _run_local_scheduler(app, services)
    return app, services


def local_app(services: Services) -> FastAPI:
    """The app as ``make dev`` serves it: the deployed app plus the playground's dev-token route, which exists only
    here (the deployed entry points build the app with ``create_app`` alone)."""
    app = create_app(services)
    if services.settings.playground_enabled and services.settings.auth_mode == "hs256" and services.settings.jwt_secret:
        install_dev_tokens(app, services.settings.jwt_secret)
    return app


def _run_local_scheduler(app: FastAPI, services: Services) -> None:
    """Fire the automation schedules stored in moto's Scheduler from the server's event loop."""
    import boto3

    from devtools.local.scheduler import LocalScheduler
    from functions.automation.handler import handle
    from shared.adapters.aws.clients import serialised

    scheduler = LocalScheduler(
        serialised(boto3.client("scheduler", region_name=services.settings.aws_region)),
        services.settings.scheduler_group_name or "default",
        lambda event: handle(event, None, services),
    )
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[None]:
        async with inner(a):
            task = asyncio.create_task(scheduler.run_forever())
            try:
                yield
            finally:
                task.cancel()

    app.router.lifespan_context = lifespan


if __name__ == "__main__":
    main()
