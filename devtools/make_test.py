"""``make test`` as timed stages: install, lint, the scripted evaluations and the pytest tiers, with a table at the end.

Why a driver and not a make recipe: CI gives a fresh clone 90 minutes, and a fresh machine spends a quarter of them
building the llama.cpp server that only the real-model tier needs. Here that build starts in the background as soon
as its compiler is installed, at a lower priority, and the other stages run beside it; the real-model tier waits
for it last. Each stage's wall time is printed at the end, failed or not, so a slow stage is seen before it costs a
landing (docs/testing.md).

The pytest tiers:

- ``parallel``: every test not marked ``serial`` or ``real_model``, spread over pytest-xdist workers (``--dist
  loadfile``: a file's tests share one worker, so module-scoped servers start once). Each worker is its own session,
  with its own redis-server, moto and ports (tests/conftest.py).
- ``serial``: tests marked ``serial``, one at a time: they measure time or load, or build what one machine-wide lock
  guards, and a busy neighbour would make them flaky or slow.
- ``real model``: llama.cpp's server with a tiny model (tests/real_model), once the background build is done.

Stdlib only: it runs before any venv exists. Usage::

    python3 -m devtools.make_test                  # what `make test` runs
    python3 -m devtools.make_test --workers 2      # fewer xdist workers (TEST_WORKERS, default 3)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "test-output"
PY = os.environ.get("VENV", ".venv") + "/bin/python"
NO_TESTS_COLLECTED = 5
DEFAULT_WORKERS = 3
"""On 2 cores: most tests wait on sockets and child processes, so a third worker fills the gaps (docs/testing.md)."""


@dataclass
class Stage:
    name: str
    seconds: float
    ok: bool
    note: str = ""


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped


@dataclass
class Report:
    stages: list[Stage] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)

    def run(self, name: str, argv: Sequence[str], *, also_ok: tuple[int, ...] = ()) -> bool:
        print(f"\n=== {name}: {' '.join(argv)}", flush=True)
        started = time.monotonic()
        code = subprocess.run(list(argv), cwd=ROOT, check=False).returncode
        ok = code == 0 or code in also_ok
        self.stages.append(Stage(name, time.monotonic() - started, ok))
        return ok

    def pytest(self, tier: str, args: Sequence[str]) -> bool:
        OUT.mkdir(exist_ok=True)
        junit = OUT / f"junit-{tier.replace(' ', '-')}.xml"
        junit.unlink(missing_ok=True)
        argv = [PY, "-m", "pytest", "-q", f"--junitxml={junit}", "--durations=25", *args]
        # pytest exits 5 when a selection holds no test: an empty tier is no failure, and the counts show it.
        ok = self.run(f"pytest: {tier}", argv, also_ok=(NO_TESTS_COLLECTED,))
        tier_counts = _junit_counts(junit)
        if tier_counts is not None:
            self.counts.add(tier_counts)
            self.stages[-1].note = f"{tier_counts.passed} passed, {tier_counts.failed} failed"
        return ok

    def print_table(self) -> None:
        width = max(len(s.name) for s in self.stages)
        print("\n=== make test: wall time per stage")
        for s in self.stages:
            status = "ok" if s.ok else "FAILED"
            print(f"  {s.name:<{width}}  {s.seconds:8.1f} s  {status:<6}  {s.note}".rstrip())
        total = sum(s.seconds for s in self.stages if not s.name.endswith("(background)"))
        print(f"  {'total':<{width}}  {total:8.1f} s")
        c = self.counts
        print(f"pytest: {c.passed} passed, {c.failed} failed, {c.skipped} skipped", flush=True)


def _junit_counts(path: Path) -> Counts | None:
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = Counts()
    for suite in suites:
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        counts.add(Counts(tests - failed - skipped, failed, skipped))
    return counts


class BackgroundBuild:
    """``make llama-server`` in the background at a low priority, its output kept in a log file."""

    def __init__(self) -> None:
        OUT.mkdir(exist_ok=True)
        self.log = OUT / "llama-build.log"
        self.started = time.monotonic()
        self.finished = self.started
        with open(self.log, "w") as sink:
            self.proc = subprocess.Popen(
                ["nice", "-n", "10", "make", "--no-print-directory", "llama-server"],
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        self.proc.wait()
        self.finished = time.monotonic()

    def wait(self, report: Report) -> bool:
        waited_from = time.monotonic()
        self.watcher.join()
        code = self.proc.returncode
        waited = max(0.0, self.finished - waited_from)
        report.stages.append(Stage("llama.cpp build (background)", self.finished - self.started, code == 0))
        report.stages.append(Stage("waiting for the llama.cpp build", waited, code == 0))
        if code != 0:
            print(self.log.read_text()[-4000:], file=sys.stderr)
        return code == 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", DEFAULT_WORKERS)))
    args = parser.parse_args(argv)
    report = Report()
    try:
        return _stages(report, args.workers)
    finally:
        if report.stages:
            report.print_table()


def _stages(report: Report, workers: int) -> int:
    make = ["make", "--no-print-directory"]
    if not (
        report.run("installs: python venv", [*make, "install-test"])
        and report.run("installs: system packages", [*make, "system-deps"])
    ):
        return 1
    build = BackgroundBuild()
    if not (
        report.run("installs: node packages", [*make, "node-deps", "playground"])
        and report.run("installs: SAM tools", [*make, "sam-tools"])
    ):
        return 1
    ok = report.run("lint and types", [*make, "lint"])
    for variant in ("A", "B"):
        intent = ["-m", "devtools.intent.regression", "--scripted", "--variant", variant, "--min-accuracy", "1.0"]
        ok = report.run(f"intent regression {variant}", [PY, *intent]) and ok
    memory = ["-m", "devtools.memory_evaluation", "--scripted", "--min-recall", "1.0"]
    ok = report.run("memory evaluation", [PY, *memory]) and ok
    parallel = ["-n", str(workers), "--dist", "loadfile", "-m", "not serial and not real_model"]
    ok = report.pytest("parallel", parallel) and ok
    ok = report.pytest("serial", ["-m", "serial and not real_model"]) and ok
    built = build.wait(report)
    ok = built and report.pytest("real model", ["-m", "real_model"]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
