"""A migration run in a process of its own, for tests that kill it: ``python -m tests.support.migration_driver
ENDPOINT TABLE LOG RATE_WCU``. Each write the table confirmed is appended to LOG (``PK|SK``, flushed at once), so
what a killed process did survives it; the run's report is printed as JSON when it ends. Its lease lasts 2 s, so a
process started after a kill does not wait long for it."""

from __future__ import annotations

import json
import sys

import boto3

from shared.adapters.aws.migration_runner import MigrationRunner, RunnerOptions
from tests.support.old_shapes import watch_puts

OPTIONS = {"segments": 4, "page_size": 50, "lease_s": 2.0}


def main(argv: list[str]) -> int:
    endpoint, table, log_path, rate = argv
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    with open(log_path, "a", encoding="utf-8", buffering=1) as log:

        def seen(key: tuple[str, str], written: bool) -> None:
            log.write(f"{key[0]}|{key[1]}|{'written' if written else 'refused'}\n")

        watch_puts(client, seen)
        report = MigrationRunner(table, client, RunnerOptions(rate_wcu=float(rate), **OPTIONS)).run_pending()
    print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
