"""Runs the registry's migrations over the table: parallel segments, checkpoints, one runner at a time, throttled.

``MigrationRunner.run_pending`` runs each migration the table has not recorded as completed, in order, and stops
at the first one that does not complete (the next may rely on it). One migration's run:

1. takes the run's lease (``MigrationStateTable.begin``; a second runner gets ``migration_busy``) and reads its
   checkpoints: a stopped run goes on where each segment stopped;
2. scans the table in ``segments`` parallel segments (one thread each, ``Segment``/``TotalSegments``), ``page_size``
   items per page, migrating each returned item with a conditional write (``migration_segment``) and saving the
   segment's checkpoint after each page; every write spends the shared :class:`WriteBudget` (``rate_wcu``);
3. stops before the next page once ``stop()`` says so (the CLI's time budget, the Lambda's remaining time), and
   gives the lease back;
4. when every segment finished the pass with no failed item, records the migration as completed in the registry
   item (what ``/healthz`` and the memory store read). A pass with failed items leaves it pending; the next run
   starts another pass (what was migrated is filtered out, so only the rest is written).

A dry run takes no lease and writes nothing (no item, no checkpoint): it scans every segment to the end, or until
``stop()``, and counts what it would change.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from threading import Event
from typing import TYPE_CHECKING, Any, Literal

from shared.adapters.aws.migration_segment import ScanPlan, SegmentWorker
from shared.adapters.aws.migration_state import Counts, MigrationStateTable, RunState, SegmentProgress
from shared.adapters.aws.write_budget import WriteBudget
from shared.errors import Conflict
from shared.migrations.model import CompletedMigration, Migration
from shared.migrations.registry import MIGRATIONS
from shared.models import utc_now

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

Outcome = Literal["completed", "already_completed", "stopped", "incomplete", "busy", "lease_lost", "dry_run"]


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """How hard a run may work. ``segments`` only counts for a migration's first run (its checkpoints are per
    segment of that scan); ``lease_s`` must outlast one page of every segment at ``rate_wcu``."""

    segments: int = 4
    page_size: int = 200
    rate_wcu: float = 100.0
    lease_s: float = 120.0

    def page_time_s(self) -> float:
        """The longest a page of every segment can take to write at the rate (each item at least one unit)."""
        return self.segments * self.page_size / self.rate_wcu


@dataclass(slots=True)
class MigrationReport:
    migration: str
    outcome: Outcome
    counts: Counts = field(default_factory=Counts)
    pass_no: int = 0
    pages: int = 0
    """Pages read by this run (the counts include earlier runs of the same pass)."""
    segments_done: int = 0
    total_segments: int = 0
    write_units: int = 0
    waited_s: float = 0.0
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["waited_s"], data["elapsed_s"] = round(self.waited_s, 3), round(self.elapsed_s, 3)
        return data


@dataclass(slots=True)
class RunReport:
    migrations: list[MigrationReport]

    @property
    def finished(self) -> bool:
        """Every migration is completed (nothing left for another run)."""
        return all(r.outcome in ("completed", "already_completed") for r in self.migrations)

    @property
    def out_of_time(self) -> bool:
        """A migration stopped only because ``stop()`` said so: a new run goes on from its checkpoints."""
        return any(r.outcome == "stopped" for r in self.migrations)

    @property
    def pages(self) -> int:
        """Pages read by this run, all migrations together (0: it made no progress)."""
        return sum(r.pages for r in self.migrations)

    def as_dict(self) -> dict[str, Any]:
        return {"finished": self.finished, "migrations": [r.as_dict() for r in self.migrations]}


def never_stop() -> bool:
    """The default stop check: a run that nothing asks to stop."""
    return False


class MigrationRunner:
    def __init__(
        self,
        table: str,
        client: DynamoDBClient,
        options: RunnerOptions | None = None,
        *,
        owner: str | None = None,
    ) -> None:
        self._table, self._client = table, client
        self.options = options or RunnerOptions()
        self.owner = owner or f"runner-{uuid.uuid4().hex[:12]}"
        self.state = MigrationStateTable(table, client)

    def run_pending(
        self,
        migrations: Sequence[Migration] = MIGRATIONS,
        *,
        stop: Callable[[], bool] = never_stop,
        dry_run: bool = False,
    ) -> RunReport:
        """Each migration not recorded as completed, in order; after one that does not complete, none (a dry run
        looks at every pending one, each on today's items)."""
        completed = self.state.completed()
        reports: list[MigrationReport] = []
        for migration in migrations:
            if migration.id in completed:
                reports.append(MigrationReport(migration.label, "already_completed"))
                continue
            report = self.dry_run(migration, stop=stop) if dry_run else self.run(migration, stop=stop)
            reports.append(report)
            if report.outcome not in ("completed", "dry_run"):
                break
        return RunReport(reports)

    def dry_run(self, migration: Migration, *, stop: Callable[[], bool] = never_stop) -> MigrationReport:
        """What a run would change, counted on a scan to the end (or until ``stop()``); writes nothing."""
        state = RunState(migration.id, self.options.segments, 1, {})
        report = self._scan(migration, state, stop=stop, dry_run=True)
        report.outcome = "dry_run" if state.all_done else "stopped"
        return report

    def run(self, migration: Migration, *, stop: Callable[[], bool] = never_stop) -> MigrationReport:
        """One run of ``migration`` under its lease, from its checkpoints; see the module docstring."""
        try:
            state = self.state.begin(
                migration, total_segments=self.options.segments, owner=self.owner, lease_s=self.options.lease_s
            )
        except Conflict:
            return MigrationReport(migration.label, "busy")
        try:
            if state.all_done and state.completed_at is None:
                state = self.state.start_pass(state, owner=self.owner)
            report = self._scan(migration, state, stop=stop, dry_run=False)
            report.outcome = self._conclude(migration, state, report)
        finally:
            self.state.release(migration.id, owner=self.owner)
        logger.info("migration run ended", extra={"migration": migration.label, "outcome": report.outcome})
        return report

    def _conclude(self, migration: Migration, state: RunState, report: MigrationReport) -> Outcome:
        if report.outcome == "lease_lost":
            return "lease_lost"
        if not state.all_done:
            return "stopped"
        totals = state.totals()
        if totals.failed:
            return "incomplete"
        now = utc_now()
        if state.completed_at is None:
            self.state.finish(migration.id, owner=self.owner, at=now)
        self.state.record_completed(
            CompletedMigration(migration.id, migration.name, now, totals.changed, totals.scanned)
        )
        return "completed"

    def _scan(
        self, migration: Migration, state: RunState, *, stop: Callable[[], bool], dry_run: bool
    ) -> MigrationReport:
        started = time.monotonic()
        budget = WriteBudget(self.options.rate_wcu)
        halt = Event()
        plan = ScanPlan(self._table, migration, state.total_segments, self.options.page_size, dry_run)
        worker = SegmentWorker(
            self._client,
            plan,
            budget,
            save=None if dry_run else self._saver(migration.id),
            stop=lambda: halt.is_set() or stop(),
        )
        lost = self._run_segments(worker, state, halt)
        return MigrationReport(
            migration.label,
            "lease_lost" if lost else "stopped",
            counts=state.totals(),
            pass_no=state.pass_no,
            pages=worker.pages,
            segments_done=sum(state.segment(n).done for n in range(state.total_segments)),
            total_segments=state.total_segments,
            write_units=budget.spent,
            waited_s=budget.waited_s,
            elapsed_s=time.monotonic() - started,
        )

    def _run_segments(self, worker: SegmentWorker, state: RunState, halt: Event) -> bool:
        """Every unfinished segment on a thread of its own; True when the lease was lost. Any other error stops
        the other segments at their next page and is raised once they have stopped."""
        todo = [n for n in range(state.total_segments) if not state.segment(n).done]
        errors: list[BaseException] = []

        def run_segment(segment: int) -> None:
            try:
                worker.run(segment, state.segment(segment))
            except BaseException as exc:
                halt.set()
                errors.append(exc)

        with ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="migration") as pool:
            list(pool.map(run_segment, todo))
        lost = [e for e in errors if isinstance(e, Conflict) and e.code == "migration_lease_lost"]
        others = [e for e in errors if e not in lost]
        if others:
            raise others[0]
        return bool(lost)

    def _saver(self, migration_id: int) -> Callable[[int, SegmentProgress], None]:
        def save(segment: int, progress: SegmentProgress) -> None:
            self.state.checkpoint(migration_id, segment, progress, owner=self.owner, lease_s=self.options.lease_s)

        return save

    def status(self, migrations: Sequence[Migration] = MIGRATIONS) -> list[dict[str, Any]]:
        """Per migration: completed or not, and the progress of its current run (for the CLI and the function)."""
        completed = self.state.completed()
        rows: list[dict[str, Any]] = []
        for migration in migrations:
            row: dict[str, Any] = {"migration": migration.label, "completed": migration.id in completed}
            if migration.id in completed:
                row["completed_at"] = completed[migration.id].completed_at.isoformat()
                row["changed"] = completed[migration.id].changed
            state = self.state.load(migration.id)
            if state is not None and migration.id not in completed:
                row["pass_no"] = state.pass_no
                row["segments_done"] = sum(state.segment(n).done for n in range(state.total_segments))
                row["total_segments"] = state.total_segments
                row["counts"] = asdict(state.totals())
            rows.append(row)
        return rows
