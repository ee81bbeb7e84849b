"""The operators' command line of the data migrations, on the table named by ``TABLE_NAME`` (or ``--table``):

    python -m functions.migrate list                      the migrations of this code, in order
    python -m functions.migrate status                    completed or not, and the progress of a stopped run
    python -m functions.migrate dry-run                   what a run would change (scans, writes nothing)
    python -m functions.migrate run [--time-budget S]     run the pending ones; stopped, it goes on where it stopped

``--segments``, ``--page-size`` and ``--rate-wcu`` beat the ``MIGRATION_*`` settings. Credentials and region come
from the usual AWS environment; ``DYNAMODB_ENDPOINT_URL`` (or ``--endpoint-url``) points at a local emulation.
Output is JSON. Exit status: 0 when done (for ``run``: every migration completed), 1 when not, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from shared.adapters.aws.migration_runner import MigrationRunner, never_stop
from shared.migrations.registry import MIGRATIONS
from shared.settings import Settings
from shared.wiring import Services
from shared.wiring.settings import LoadedSettings, MigrateSettings, load_settings, parse_structured_settings


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m functions.migrate", description="Versioned data migrations.")
    cli.add_argument("command", choices=("list", "status", "dry-run", "run"))
    cli.add_argument("--table", help="the table (default: TABLE_NAME)")
    cli.add_argument("--endpoint-url", help="a DynamoDB endpoint (default: DYNAMODB_ENDPOINT_URL, else AWS)")
    cli.add_argument("--segments", type=int, help="parallel scan segments of a first run (MIGRATION_SEGMENTS)")
    cli.add_argument("--page-size", type=int, help="items per scan page (MIGRATION_PAGE_SIZE)")
    cli.add_argument("--rate-wcu", type=float, help="write units per second (MIGRATION_RATE_WCU)")
    cli.add_argument("--time-budget", type=float, help="stop starting pages after this many seconds")
    return cli


def settings_for(args: argparse.Namespace, env: Settings) -> Settings:
    update: dict[str, Any] = {
        "table_name": args.table,
        "dynamodb_endpoint_url": args.endpoint_url,
        "migration_segments": args.segments,
        "migration_page_size": args.page_size,
        "migration_rate_wcu": args.rate_wcu,
    }
    return env.model_copy(update={k: v for k, v in update.items() if v is not None})


def list_migrations() -> list[dict[str, Any]]:
    return [
        {"migration": m.label, "kind": m.items.kind, "to_version": m.to_version, "description": m.description}
        for m in MIGRATIONS
    ]


def time_budget(seconds: float | None) -> Callable[[], bool]:
    if seconds is None:
        return never_stop
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


def run(args: argparse.Namespace, runner: MigrationRunner) -> tuple[Any, bool]:
    if args.command == "status":
        rows = runner.status()
        return rows, all(row["completed"] for row in rows)
    report = runner.run_pending(stop=time_budget(args.time_budget), dry_run=args.command == "dry-run")
    done = report.finished or (args.command == "dry-run" and not report.out_of_time)
    return report.as_dict(), done


def main(argv: Sequence[str] | None = None, *, env: Settings | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "list":
        print(json.dumps(list_migrations(), indent=2))
        return 0
    loaded = load_settings(MigrateSettings) if env is None else LoadedSettings(env, parse_structured_settings(env))
    services = Services(settings_for(args, loaded.settings), structured=loaded.structured)
    output, done = run(args, services.migration_runner())
    print(json.dumps(output, indent=2))
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
