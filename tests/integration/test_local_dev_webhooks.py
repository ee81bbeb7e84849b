"""``make dev`` delivers webhooks in-process: the app built as ``make dev`` builds it, with
``WEBHOOK_ALLOW_LOOPBACK``, POSTs a run's signed event to a receiver on loopback, retrying a 500 with backoff."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from standardwebhooks import Webhook

from devtools.local.embedded import EmbeddedAws
from devtools.local.runner import build_local_app
from tests.support.settings import make_settings
from tests.support.tokens import bearer
from tests.support.webhook_receiver import webhook_receiver


async def test_make_dev_delivers_a_signed_webhook_after_a_500() -> None:
    settings = make_settings(embedded=True, webhook_allow_loopback=True)
    aws = EmbeddedAws(settings)
    aws.start()
    try:
        app, services = build_local_app(settings)
        publisher: Any = services.run_completed_publisher
        queue = publisher._publisher  # the in-process webhook queue the runner installed
        queue._base_backoff_s = 0.01
        with webhook_receiver(codes=[500]) as receiver:
            body = {
                "threadId": "th-dev-wh",
                "runId": "run-dev-wh",
                "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                "tools": [],
                "context": [],
                "forwardedProps": {"webhook": receiver.url()},
            }
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://app", timeout=60
            ) as client:
                resp = await client.post("/api/v1/agent", json=body, headers=bearer())
            assert resp.status_code == 200
            await asyncio.wait_for(queue.drain(), timeout=30)
            first, second = receiver.received
        secret = await services.webhook_secrets.secret("tenant-1")
        event = Webhook(secret).verify(second.body, second.headers)
        assert event["type"] == "run.succeeded" and event["data"]["runId"] == "run-dev-wh"
        assert first.headers["webhook-id"] == second.headers["webhook-id"]
    finally:
        aws.stop()


async def test_make_dev_runs_a_background_run_in_its_own_process_and_reports_its_end_by_webhook() -> None:
    # GIVEN the app as `make dev` builds it (embedded AWS, the offline model, no background-run function)
    settings = make_settings(embedded=True, webhook_allow_loopback=True)
    aws = EmbeddedAws(settings)
    aws.start()
    try:
        app, services = build_local_app(settings)
        queue = services.run_completed_publisher._publisher  # type: ignore[union-attr]
        with webhook_receiver(codes=[]) as receiver:
            body = {
                "threadId": "th-dev-bg",
                "runId": "run-dev-bg",
                "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                "tools": [],
                "context": [],
                "forwardedProps": {"background": True, "webhook": receiver.url()},
            }
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://app", timeout=60
            ) as client:
                # WHEN a background run is posted
                accepted = await client.post("/api/v1/agent", json=body, headers=bearer())
                await asyncio.wait_for(services.queue_starter.wait_idle(), timeout=30)  # type: ignore[union-attr]
                doc = (await client.get("/api/v1/agent/runs/run-dev-bg", headers=bearer())).json()
            await asyncio.wait_for(queue.drain(), timeout=30)
            (delivery,) = receiver.received
        # THEN 202 at once, the run ran in this process, and its end was delivered signed
        assert accepted.status_code == 202 and accepted.json()["status"] == "queued"
        assert doc["status"] == "succeeded" and len(doc["messageIds"]) == 2
        secret = await services.webhook_secrets.secret("tenant-1")
        event = Webhook(secret).verify(delivery.body, delivery.headers)
        assert event["type"] == "run.succeeded" and event["data"]["runId"] == "run-dev-bg"
    finally:
        aws.stop()
