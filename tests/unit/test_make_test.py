"""``make test``'s stage driver: every stage is timed and reported, a failure anywhere fails the run, an empty pytest
tier does not, and the closing line counts what pytest ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools import make_test
from devtools.make_test import Counts, Report

SAMPLE = """
import pytest

def test_passes():
    pass

def test_fails():
    assert False

@pytest.mark.skip(reason="shown")
def test_skipped():
    pass
"""


def test_a_failed_stage_is_reported_and_an_allowed_code_is_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    report = Report()
    assert report.run("passes", [sys.executable, "-c", "pass"]) is True
    assert report.run("fails", [sys.executable, "-c", "raise SystemExit(1)"]) is False
    assert report.run("empty tier", [sys.executable, "-c", "raise SystemExit(5)"], also_ok=(5,)) is True
    report.print_table()
    table = capsys.readouterr().out
    assert [s.ok for s in report.stages] == [True, False, True]
    assert "fails" in table and "FAILED" in table
    assert table.rstrip().splitlines()[-1] == "pytest: 0 passed, 0 failed, 0 skipped"


def test_the_counts_come_from_pytests_own_junit_report(tmp_path: Path) -> None:
    # GIVEN a pytest run of one passing, one failing and one skipped test
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    # THEN the driver reads the same three outcomes
    assert make_test._junit_counts(junit) == Counts(passed=1, failed=1, skipped=1)
    assert make_test._junit_counts(tmp_path / "missing.xml") is None


def test_the_closing_line_sums_every_tier(capsys: pytest.CaptureFixture[str]) -> None:
    report = Report()
    report.run("a stage", [sys.executable, "-c", "pass"])
    report.counts.add(Counts(passed=3, failed=1, skipped=0))
    report.counts.add(Counts(passed=2, failed=0, skipped=1))
    report.print_table()
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == "pytest: 5 passed, 1 failed, 1 skipped"
