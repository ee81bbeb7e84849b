"""In-memory run ledger: the reference fake of ``RunLedger`` (shared/ports/runs.py).

It runs the same contract suite as ``DynamoDBRunLedger`` (tests/contract/test_run_ledger_contract.py). Every method
does its work without awaiting in between, so each call is atomic on the event loop; the meter's yield before the
work stands in for the network round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from shared.adapters.in_memory.meter import RequestMeter
from shared.errors import NotFound
from shared.models import Run, RunStatus, Usage, utc_now
from shared.ports.runs import RunPosition


class InMemoryRunLedger:
    """Run records keyed by (tenant, run id)."""

    def __init__(self, meter: RequestMeter | None = None) -> None:
        self._runs: dict[tuple[str, str], Run] = {}
        self._meter = meter or RequestMeter()

    @property
    def request_count(self) -> int:
        return self._meter.request_count

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        await self._meter.request()
        key = (run.tenant_id, run.run_id)
        if key in self._runs:
            await self._meter.request()
            return self._runs[key].model_copy(deep=True), False
        self._runs[key] = run.model_copy(deep=True)
        return run, True

    async def get_run(self, tenant_id: str, run_id: str) -> Run | None:
        await self._meter.request()
        run = self._runs.get((tenant_id, run_id))
        return run.model_copy(deep=True) if run else None

    def _existing_run(self, tenant_id: str, run_id: str) -> Run:
        run = self._runs.get((tenant_id, run_id))
        if run is None:
            raise NotFound("run not found")
        return run

    async def finish_run(
        self,
        tenant_id: str,
        run_id: str,
        *,
        status: str,
        usage: list[Usage],
        last_stream_id: str | None,
        error_code: str | None = None,
        pending_tool_call_ids: Sequence[str] = (),
        interrupts: Sequence[dict[str, Any]] = (),
    ) -> None:
        await self._meter.request()
        run = self._existing_run(tenant_id, run_id)
        updates: dict[str, Any] = {
            "status": RunStatus(status),
            "usage": [u.model_copy() for u in usage],
            "updated_at": utc_now(),
            "pending_tool_call_ids": list(pending_tool_call_ids),
            "interrupts": [dict(i) for i in interrupts],
        }
        if last_stream_id:
            updates["last_stream_id"] = last_stream_id
        if error_code:
            updates["error_code"] = error_code
        self._runs[(tenant_id, run_id)] = run.model_copy(update=updates)

    async def heartbeat(self, tenant_id: str, run_id: str, *, last_stream_id: str | None) -> Run:
        await self._meter.request()
        run = self._existing_run(tenant_id, run_id)
        updates: dict[str, Any] = {"heartbeat_at": utc_now()}
        if last_stream_id:
            updates["last_stream_id"] = last_stream_id
        self._runs[(tenant_id, run_id)] = run.model_copy(update=updates)
        return self._runs[(tenant_id, run_id)].model_copy(deep=True)

    async def request_cancel(self, tenant_id: str, run_id: str) -> None:
        await self._meter.request()
        run = self._existing_run(tenant_id, run_id)
        self._runs[(tenant_id, run_id)] = run.model_copy(update={"cancel_requested": True})

    async def list_stale_runs(self, *, stale_before: datetime, limit: int) -> list[Run]:
        """Running runs of every tenant whose last heartbeat is older than ``stale_before``, stalest first."""
        await self._meter.request()
        stale = sorted(
            (r for r in self._runs.values() if r.status is RunStatus.RUNNING and r.heartbeat_at < stale_before),
            key=lambda r: (r.heartbeat_at, r.run_id),
        )
        return [r.model_copy(deep=True) for r in stale[:limit]]

    async def abandon_run(self, tenant_id: str, run_id: str, *, stale_before: datetime, error_code: str) -> bool:
        """Mark a stale running run failed; False when it is not running or its heartbeat is recent."""
        await self._meter.request()
        run = self._runs.get((tenant_id, run_id))
        if run is None or run.status is not RunStatus.RUNNING or not run.heartbeat_at < stale_before:
            return False
        self._runs[(tenant_id, run_id)] = run.model_copy(
            update={"status": RunStatus.FAILED, "error_code": error_code, "updated_at": utc_now()}
        )
        return True

    async def list_runs_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[Run]:
        """Oldest first, as the DynamoDB index sorts them."""
        await self._meter.request()
        runs = sorted(
            (r for (tenant, _), r in self._runs.items() if tenant == tenant_id and r.thread_id == thread_id),
            key=lambda r: (r.created_at.isoformat(), r.run_id),
        )
        return [r.model_copy(deep=True) for r in runs[:limit]]

    async def page_thread_runs(
        self, tenant_id: str, thread_id: str, *, limit: int, below: RunPosition | None = None
    ) -> list[Run]:
        """Newest first, in the DynamoDB index's order (creation time, then run id)."""
        await self._meter.request()
        runs = sorted(
            (r for (tenant, _), r in self._runs.items() if tenant == tenant_id and r.thread_id == thread_id),
            key=lambda r: (r.created_at.isoformat(), r.run_id),
            reverse=True,
        )
        if below is not None:
            cut = (below.created_at.isoformat(), below.run_id)
            runs = [r for r in runs if (r.created_at.isoformat(), r.run_id) < cut]
        return [r.model_copy(deep=True) for r in runs[:limit]]
