"""Lambda entry point of the data migrations (``MigrationFunction``), invoked by an operator, never on a schedule.

``aws lambda invoke --function-name <stack>-migrate --invocation-type Event --payload '{"action": "run"}'`` runs
every pending migration (``shared.migrations.registry``) until a minute before the function's timeout (checked with
``context.get_remaining_time_in_millis()`` before each page), then invokes itself again, asynchronously, with the
same event and ``hop`` + 1, and returns: the next invocation goes on from the checkpoints. So a migration of any size
finishes without anyone's laptop or credentials staying up. The chain ends when every migration completed, when a
run stops for another reason (another runner holds the lease, a pass left failed items: see the log and ``status``),
when an invocation made no progress at all, or after ``MAX_HOPS`` invocations.

Events: ``{"action": "run" | "dry-run" | "status"}``, optionally ``segments``, ``page_size``, ``rate_wcu`` (beat the
``MIGRATION_*`` settings). A dry run writes nothing and is not continued: it counts until its time is up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple

from shared.adapters.aws.migration_runner import RunnerOptions
from shared.container import container_services, run_in_container
from shared.wiring import Services
from shared.wiring.settings import MigrateSettings

logger = logging.getLogger(__name__)

STOP_BEFORE_TIMEOUT_MS = 60_000
"""Stop starting pages this long before the timeout: the pages in flight, the lease's release and the next
invocation must fit (more when a page of every segment takes longer to write at the rate)."""
MAX_HOPS = 200
"""Invocations of one chain at most (200 x 15 minutes: 50 hours)."""
ACTIONS = ("run", "dry-run", "status")


class MigrationRequest(NamedTuple):
    action: str
    hop: int
    options: RunnerOptions

    @classmethod
    def from_event(cls, event: Mapping[str, Any], services: Services) -> MigrationRequest:
        action = str(event.get("action", "run"))
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
        settings = services.settings
        options = RunnerOptions(
            segments=int(event.get("segments", settings.migration_segments)),
            page_size=int(event.get("page_size", settings.migration_page_size)),
            rate_wcu=float(event.get("rate_wcu", settings.migration_rate_wcu)),
        )
        return cls(action, int(event.get("hop", 0)), options)


async def handle(event: Mapping[str, Any], context: Any, services: Services) -> dict[str, Any]:
    request = MigrationRequest.from_event(event, services)
    runner = services.migration_runner(request.options, owner=f"lambda-{context.aws_request_id}")
    if request.action == "status":
        return {"action": "status", "migrations": await asyncio.to_thread(runner.status)}
    margin_ms = max(STOP_BEFORE_TIMEOUT_MS, 2_000 * request.options.page_time_s())

    def out_of_time() -> bool:
        return bool(context.get_remaining_time_in_millis() < margin_ms)

    dry_run = request.action == "dry-run"
    report = await asyncio.to_thread(runner.run_pending, stop=out_of_time, dry_run=dry_run)
    result = {"action": request.action, "hop": request.hop, **report.as_dict(), "reinvoked": False}
    if report.out_of_time and not dry_run:
        result["reinvoked"] = await _continue(event, context, services, request, report.pages)
    return result


async def _continue(
    event: Mapping[str, Any], context: Any, services: Services, request: MigrationRequest, pages: int
) -> bool:
    """Hand the rest to a new invocation of this function; False (and an error in the log) when it should not."""
    if pages == 0 or request.hop + 1 >= MAX_HOPS:
        logger.error(
            "migration chain stopped before the migrations finished",
            extra={"hop": request.hop, "pages": pages, "reason": "no progress" if pages == 0 else "too many hops"},
        )
        return False
    await services.function_invoker.invoke_async(context.invoked_function_arn, {**event, "hop": request.hop + 1})
    logger.info("migration continues in a new invocation", extra={"hop": request.hop + 1})
    return True


def lambda_handler(event: Mapping[str, Any], context: Any, services: Services | None = None) -> dict[str, Any]:
    """``services`` is for tests; Lambda passes only the event and the context. The result is also logged: an
    asynchronous invocation's result reaches nobody, so the log is where an operator follows a run."""
    if services is None:
        _json_logs()
    result = run_in_container(handle(event, context, services or container_services(MigrateSettings)))
    logger.info("migration invocation ended", extra={"result": result})
    return result


@cache
def _json_logs() -> None:
    from shared.observability import configure_logging

    configure_logging()


handler = lambda_handler
"""The name template.yaml points at (``functions.migrate.handler.handler``)."""
