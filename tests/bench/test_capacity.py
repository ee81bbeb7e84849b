"""The capacity model against the code it prices, and the arithmetic it prints.

The first test is the one that keeps the model honest: a smoke-size run of the app is counted now and the
model's per-turn figures from the recorded counts (``bench/capacity_recorded.py``) must match the counted ones.
A change that adds a DynamoDB write, a Redis command per event or bytes to the model request fails it until the
figures are recorded again. The others run on the recorded figures, no process started.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bench import capacity
from bench.capacity_model import (
    FARGATE_STREAM_S,
    LAMBDA_STREAM_S,
    STREAM_HOST_MIN_TASKS,
    STREAM_HOST_TASK,
    Inputs,
    ask_for,
    bill,
    chosen_size,
    followers_break_even,
    held_followers,
    loads,
    per_turn,
    sizes,
)
from bench.capacity_recorded import RECORDED_CPU, RECORDED_FIGURES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_recorded_per_turn_figures_match_a_run_counted_now(capacity_smoke: capacity.CapacityResult) -> None:
    assert capacity_smoke.measured and capacity_smoke.drift
    off = {d.figure: f"{d.recorded:g} recorded, {d.measured:g} counted" for d in capacity_smoke.drifted()}
    assert not off, f"the capacity model's counts are out of date (re-record bench/capacity_recorded.py): {off}"
    counted = {d.figure: d.measured for d in capacity_smoke.drift}
    # the turn really ran through every service the bill prices
    assert counted["dynamodb write units"] > 0 and counted["dynamodb read units"] > 0
    assert counted["redis commands"] > 0 and counted["model bytes sent"] > 0 and counted["model bytes received"] > 0
    assert counted["events published"] == pytest.approx(1.0)  # one run-completed event per turn
    assert counted["streams: thread stream entries per turn"] > 0


def test_drift_flags_a_figure_that_moved_more_than_the_tolerance() -> None:
    moved = {phase: dict(values) for phase, values in RECORDED_FIGURES.items()}
    moved["turn:plain"]["dynamodb write units"] *= 1.2  # a plain turn writes a fifth more
    drift = capacity.drift(RECORDED_FIGURES, moved, RECORDED_CPU, Inputs())
    flagged = {d.figure for d in drift if d.off > capacity.TOLERANCE}
    assert flagged == {"dynamodb write units"}
    assert not [d for d in capacity.drift(RECORDED_FIGURES, RECORDED_FIGURES, RECORDED_CPU, Inputs()) if d.off]


def test_the_bill_adds_up_and_starts_with_the_tokens() -> None:
    inputs = Inputs()
    lines = bill(RECORDED_FIGURES, RECORDED_CPU, inputs)
    assert lines[0].usd_per_1000 == inputs.token_usd_per_1000
    assert all(line.usd_per_1000 >= 0 for line in lines)
    turn = per_turn(RECORDED_FIGURES, RECORDED_CPU, inputs)
    writes = next(line for line in lines if line.component == "DynamoDB writes")
    assert writes.usd_per_1000 == pytest.approx(1000 * turn["dynamodb write units"] * 0.625e-6)
    # the streaming function bills the whole turn: twice the memory, twice the duration line (CPU aside)
    double = bill(RECORDED_FIGURES, RECORDED_CPU, replace(inputs, memory_mb=2 * inputs.memory_mb))
    duration = [line.usd_per_1000 for line in (lines[1], double[1])]
    assert 1.9 < duration[1] / duration[0] <= 2.0


def test_peak_concurrency_grows_with_users_and_with_open_follow_streams() -> None:
    def lambda_need(inputs: Inputs) -> float:
        return loads(RECORDED_FIGURES, RECORDED_CPU, inputs)[0].need

    base = Inputs(dau=10_000)
    # Little's law: ten times the users, ten times the streams (the memory function is capped at 5 on top)
    streams = lambda_need(base) - 5
    assert lambda_need(replace(base, dau=100_000)) - 5 == pytest.approx(10 * streams)
    # every user holding GET /threads/{id}/events open holds an execution environment
    assert lambda_need(replace(base, follow_share=0.1)) == pytest.approx(lambda_need(base) + 1_000)


def test_at_100k_users_the_lambda_quota_is_the_one_to_raise_and_the_ask_covers_twice_the_peak() -> None:
    rows = loads(RECORDED_FIGURES, RECORDED_CPU, Inputs(dau=100_000))
    quota = max((row for row in rows if row.quota), key=lambda row: row.utilisation)
    assert quota.name.startswith("Lambda concurrency")
    assert 0.5 < quota.utilisation < 1.0
    asked = int(re.sub(r"[^0-9]", "", ask_for(quota).rsplit(":", 1)[1].split()[0]))
    assert asked >= 2 * quota.need
    assert (
        ask_for(
            max(
                (r for r in loads(RECORDED_FIGURES, RECORDED_CPU, Inputs(dau=1_000)) if r.quota),
                key=lambda r: r.utilisation,
            )
        )
        == "nothing yet"
    )


def test_the_memory_size_follows_the_measured_cpu() -> None:
    rows = sizes(RECORDED_FIGURES, RECORDED_CPU, Inputs())
    chosen = chosen_size(rows)
    assert chosen is not None
    assert all(not row.fits for row in rows if row.memory_mb < chosen.memory_mb)
    # an app needing a third of the CPU before its model request and at start-up would fit a smaller size
    lighter = replace(
        RECORDED_CPU,
        pre_model_cpu_s=RECORDED_CPU.pre_model_cpu_s / 3,
        cold_start_cpu_s=RECORDED_CPU.cold_start_cpu_s / 3,
    )
    smaller = chosen_size(sizes(RECORDED_FIGURES, lighter, Inputs()))
    assert smaller is not None and smaller.memory_mb < chosen.memory_mb


def test_the_deployed_memory_size_is_the_one_the_measurement_chooses() -> None:
    template = (REPO / "template.yaml").read_text()
    block = template.split("  StreamingApiFunction:\n", 1)[1].split("\n  BufferedApiFunction:", 1)[0]
    deployed = int(re.search(r"MemorySize: (\d+)", block).group(1))  # type: ignore[union-attr]
    chosen = chosen_size(sizes(RECORDED_FIGURES, RECORDED_CPU, Inputs()))
    assert chosen is not None
    assert deployed == chosen.memory_mb == Inputs().memory_mb


def _parameter_default(template: str, name: str) -> str:
    block = template.split(f"\n  {name}:\n", 1)[1]
    return re.search(r"    Default: \"?([^\"\n]+)", block).group(1)  # type: ignore[union-attr]


def test_the_follower_model_prices_the_template_s_fargate_option_and_lambda_s_stream_ceiling() -> None:
    template = (REPO / "template.yaml").read_text()
    vcpu, gb = STREAM_HOST_TASK
    assert int(_parameter_default(template, "StreamHostTaskCpu")) == vcpu * 1024
    assert int(_parameter_default(template, "StreamHostTaskMemory")) == gb * 1024
    assert int(_parameter_default(template, "StreamHostDesiredTasks")) == STREAM_HOST_MIN_TASKS
    assert float(_parameter_default(template, "StreamHostMaxStreamSeconds")) == FARGATE_STREAM_S
    block = template.split("  StreamingApiFunction:\n", 1)[1].split("\n  BufferedApiFunction:", 1)[0]
    assert float(re.search(r"Timeout: (\d+)", block).group(1)) == LAMBDA_STREAM_S  # type: ignore[union-attr]


def test_the_fargate_option_pays_from_a_couple_of_held_followers_and_its_tasks_follow_the_load() -> None:
    inputs = Inputs()
    # GIVEN the default prices: an ALB and two small tasks cost about what 1.3 followers held on Lambda cost
    assert followers_break_even(inputs) == 2
    one, two = held_followers(inputs, 1), held_followers(inputs, 2)
    assert one.ratio < 1 < two.ratio
    # Lambda's cost grows with each follower; the option's stays near its fixed cost until tasks are added
    many = held_followers(inputs, 10_000)
    assert many.lambda_usd == pytest.approx(10_000 * one.lambda_usd)
    assert many.tasks == 10_000 // inputs.followers_per_task and many.ratio > 1_000
    # WHEN the ALB costs ten times as much, or a task holds ten followers, the break-even moves, and it is found
    pricier = replace(inputs, prices={**inputs.prices, "alb_hour": 10 * inputs.price("alb_hour")})
    assert followers_break_even(pricier) == 6
    assert followers_break_even(replace(inputs, followers_per_task=10)) == 2
