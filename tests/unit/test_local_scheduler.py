"""The local runner's scheduler: which schedules are due. A fire of a schedule stored in moto is an integration
test (tests/integration/test_local_scheduler_fires.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from devtools.local.scheduler import cron_matches, is_due

START = datetime(2026, 11, 30, 6, 0, 30, tzinfo=UTC)  # a Monday


def test_cron_six_fields_match_minute_hour_and_weekday() -> None:
    assert cron_matches("cron(0 6 * * ? *)", START.replace(second=0))
    assert not cron_matches("cron(0 7 * * ? *)", START.replace(second=0))
    assert cron_matches("cron(0/15 * ? * MON-FRI *)", START.replace(minute=45, second=0))
    assert not cron_matches("cron(0/15 * ? * SAT,SUN *)", START.replace(second=0))
    assert not cron_matches("cron(0 6 * * ?)", START)  # five fields never fire


def test_rate_is_due_after_its_interval() -> None:
    assert not is_due("rate(5 minutes)", START + timedelta(minutes=4), START)
    assert is_due("rate(5 minutes)", START + timedelta(minutes=5), START)
    assert is_due("rate(1 hour)", START + timedelta(hours=1), START)
