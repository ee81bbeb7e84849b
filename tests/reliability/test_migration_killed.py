"""A migration process killed mid-way (``kill -9``: a Lambda timeout or an out-of-memory kill looks the same to the
table), then another process resumes it: no item is written twice, none is missed.

Both processes run ``tests/support/migration_driver.py`` against one moto server, as two Lambda environments share
one table; each logs every write the table confirmed, flushed line by line, so the killed one's log holds what it
did. A write in flight at the kill may have reached the table without its answer reaching the log: at most one per
segment, and the table's state tells them apart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from shared.adapters.aws.memory_store import _to_item
from shared.adapters.aws.migration_state import MigrationStateTable
from shared.adapters.aws.table_schema import create_table
from tests.support.migration_driver import OPTIONS
from tests.support.moto_server import moto_server
from tests.support.old_shapes import Seeded, seed
from tests.support.settings import REGION, TABLE

pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
SEGMENTS = int(OPTIONS["segments"])


@pytest.fixture
def table() -> Iterator[tuple[str, Any]]:
    with moto_server() as endpoint:
        client = boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint)
        create_table(client, TABLE)
        yield endpoint, client


def driver(endpoint: str, log: Path, rate: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.migration_driver", endpoint, TABLE, str(log), str(rate)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def writes(log: Path) -> Counter[str]:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return Counter(line.rsplit("|", 1)[0] for line in lines if line.endswith("|written"))


def test_a_killed_run_is_resumed_by_another_process_without_writing_any_item_twice(
    table: tuple[str, Any], tmp_path: Path
) -> None:
    endpoint, client = table
    # GIVEN 2,000 memories, 840 of them active in the old shape
    seeded = Seeded(2_000)
    seed(client, TABLE, seeded.items)
    expected = {f"{pk}|{sk}" for pk, sk in seeded.needs_change}
    # WHEN a migration process, throttled to 200 write units a second, is killed after 150 confirmed writes
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = driver(endpoint, first_log, rate=200)
    deadline = time.monotonic() + 60
    while sum(writes(first_log).values()) < 150:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.stderr else ""
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = writes(first_log)
    # THEN it left the migration pending, part-way
    state = MigrationStateTable(TABLE, client)
    assert state.completed() == {} and 150 <= sum(killed.values()) < len(expected)
    # WHEN another process runs it while the dead one's lease lasts, THEN it is refused
    busy = driver(endpoint, tmp_path / "busy.log", rate=10_000)
    (refused,) = json.loads(busy.communicate(timeout=60)[0])["migrations"]
    assert refused["outcome"] == "busy"
    # WHEN it runs again once the lease (2 s) has expired
    time.sleep(2.5)
    second = driver(endpoint, second_log, rate=10_000)
    out, err = second.communicate(timeout=120)
    resumed, *later = json.loads(out)["migrations"]
    # THEN it went on from the checkpoints and completed the migration (and the later ones)
    assert resumed["outcome"] == "completed", err
    assert all(report["outcome"] == "completed" for report in later), err
    assert state.completed()[1].changed > 0
    # AND no item was written twice, by one process or across the two, and nothing but the old active memories
    both = killed + writes(second_log)
    assert [key for key, n in both.items() if n > 1] == []
    assert set(both) <= expected
    # AND every old active memory is migrated; those not in a log were in flight at the kill (one per segment at most)
    unlogged = expected - set(both)
    assert len(unlogged) <= SEGMENTS
    pages = client.get_paginator("scan").paginate(TableName=TABLE)
    stored = {(i["PK"]["S"], i["SK"]["S"]): i for page in pages for i in page["Items"]}
    for key in seeded.needs_change:
        assert stored[key] == _to_item(seeded.memories[key])
    # AND the second process did not start over: it read fewer pages than a whole pass
    assert resumed["pages"] < resumed["total_segments"] * (len(seeded.items) // SEGMENTS // int(OPTIONS["page_size"]))
