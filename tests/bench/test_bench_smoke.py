"""Smoke mode of every benchmark in ``bench/``: the tiny configuration runs, and what it reports holds together.

No timing assertions (the machine is shared); only the shape and the invariants of each result.
"""

from __future__ import annotations

import inspect
import shutil

import pytest

from bench import (
    bill,
    capacity,
    cold_start,
    context_assembly,
    first_request,
    handler_init,
    input_tokens,
    mechanisms,
    memory_tokens,
    server_overhead,
    title_cost,
    turn_cpu,
)

pytestmark = pytest.mark.slow


def test_input_tokens_smoke_reports_every_policy_with_billed_never_above_raw() -> None:
    result = input_tokens.main(["--smoke"])
    assert list(result.reports) == [
        "today_yesterday",
        "last_n N=20",
        "last_n N=25",
        "blocked N=20 B=10",
        "blocked N=20 B=20",
        "blocked N=20 B=40",
    ]
    runs = result.traffic["runs"]
    assert runs > 0
    for report in result.reports.values():
        assert len(report.runs_input) == runs
        assert all(0 < billed <= raw for billed, raw in zip(report.runs_billed, report.runs_input, strict=True))
        assert all(0 <= cached <= raw for cached, raw in zip(report.runs_cached, report.runs_input, strict=True))
    assert max(result.reports["last_n N=20"].window_user_messages) <= 20
    assert max(result.reports["last_n N=25"].window_user_messages) <= 25
    blocked = result.reports["blocked N=20 B=20"].window_user_messages
    plain = result.reports["last_n N=20"].window_user_messages
    assert all(b >= p for b, p in zip(blocked, plain, strict=True))  # never fewer user messages than last-N
    assert all(row["today_yesterday"] == pytest.approx(1.0) for row in result.ttl_sensitivity.values())


def test_memory_tokens_smoke_coalescing_runs_less_often_on_less_input() -> None:
    result = memory_tokens.main(["--smoke"])
    turns = result.user_turns
    assert turns == result.traffic["runs"] > 0
    assert result.before.runs == turns, "before: one memory run per finished worker run"
    assert 0 < result.after.runs < result.before.runs
    assert sum(result.after.inputs) < sum(result.before.inputs)
    assert max(result.after.inputs) < max(result.before.inputs)
    # the goal: memory input per user turn at most a quarter of the worker's
    assert sum(result.after.inputs) / turns <= 0.25 * result.worker_per_turn


def test_coalesced_rule_fires_on_the_kth_user_message_or_after_a_quiet_period() -> None:
    from datetime import UTC, datetime, timedelta

    from shared.profiles import MemoryPolicy

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    # 8 turns 30 s apart, then a 10-minute pause, then 2 turns
    times = [t0 + timedelta(seconds=30 * i) for i in range(8)] + [t0 + timedelta(minutes=14 + i) for i in range(2)]
    turns = [memory_tokens.Turn(at, 3 * (i + 1)) for i, at in enumerate(times)]
    fired = memory_tokens.coalesced(turns, MemoryPolicy(idle_s=120, max_pending_user_messages=6), list(range(1, 11)))
    assert [f.upto for f in fired] == [18, 24, 30]
    assert fired[1].at == times[7] + timedelta(seconds=120)


def test_context_assembly_smoke_sends_identical_requests_for_every_thread_length() -> None:
    rows = context_assembly.main(["--smoke"])
    assert {r.size for r in rows} == {100, 1_000}
    assert all(context_assembly.flat(rows).values())
    for row in rows:
        assert row.store_requests == row.adapter_requests == row.queries_sent >= 1
        assert row.items_read >= row.window_messages
        assert row.rcu_computed >= row.queries_sent
    windows = {(r.policy, r.window_messages) for r in rows}
    assert len(windows) == len(context_assembly.POLICIES)  # same window for every length


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is installed by `make test`")
def test_server_overhead_smoke_measures_both_servers_side_by_side() -> None:
    result = server_overhead.main(["--smoke"])
    for kind in ("ours", "bare"):
        series = result.series[(kind, 1)]
        assert series.errors == 0
        assert len(series.samples) == 2
        for sample in series.samples:
            assert 0 < sample.ttfe <= sample.ttft <= sample.total
            assert sample.pre_model is not None and 0 < sample.pre_model < sample.ttft
    assert all(ratio > 0 for ratio in result.ratios(1, "ttft"))
    # each server's CPU over the pass, and the Redis connections ours opened (bare uses no Redis)
    assert result.cpu_s["ours"] > 0 and result.cpu_s["bare"] > 0
    assert result.redis_connections is not None and result.redis_connections >= 1
    assert "server CPU over the pass" in result.markdown()


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is installed by `make test`")
def test_redis_per_turn_counts_a_turns_commands_and_bytes_and_every_key_it_left_expires() -> None:
    from bench import redis_per_turn

    result = redis_per_turn.main(["--turns", "2", "--warmup", "1", "--chunks", "30", "--chunk-delay", "0.005"])
    assert result.commands["xadd"] > 0 and 0 < result.commands_per_turn < 150
    assert 0 < result.bytes_in < 40_000 * result.turns
    assert not any(name.startswith(("info", "config")) for name in result.commands)
    thread_keys = [k for k in result.keys if k["kind"] == "thread:events"]
    assert len(thread_keys) == 2 and all(k["xlen"] > 0 for k in thread_keys)
    assert all(0 < k["ttl"] <= 24 * 3600 for k in result.keys), result.keys


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is installed by `make test`")
def test_server_overhead_smoke_on_an_existing_thread_with_the_5_ms_store() -> None:
    result = server_overhead.main(["--smoke", "--existing-thread", "--store", "memory"])
    assert result.config["thread"] == "existing (second turn)"
    for kind in ("ours", "bare"):
        series = result.series[(kind, 1)]
        assert series.errors == 0 and len(series.samples) == 2
        for sample in series.samples:
            assert 0 < sample.ttfe <= sample.ttft <= sample.total
            assert sample.pre_model is not None and 0 < sample.pre_model < sample.ttft


def test_mechanisms_smoke_times_the_first_text_with_each_mechanism_of_this_tree_off() -> None:
    samples = mechanisms.main(["--smoke"])
    present = [name for name, _ in mechanisms.present()]
    assert set(samples) == {*present, "bare"}
    assert "all on" in present and "all off" in present
    assert all(len(values) == 2 and min(values) > 0 for values in samples.values())


def test_mechanisms_smoke_with_a_history_sends_each_request_as_the_next_turn_of_a_stored_thread() -> None:
    samples = mechanisms.main(["--smoke", "--history", "3"])
    assert set(samples) == {*(name for name, _ in mechanisms.present()), "bare"}
    assert all(len(values) == 2 and min(values) > 0 for values in samples.values())


def test_mechanisms_switches_patch_nothing_until_entered() -> None:
    """Listing the switches (``present``) must leave every mechanism on: a patch entered there and never left
    would switch a mechanism off in every configuration, "all on" included."""
    from shared import tokens
    from shared.executors import head_start

    before = (tokens._qwen_count, inspect.getattr_static(head_start.HeadStart, "open"))
    mechanisms.present()
    assert (tokens._qwen_count, inspect.getattr_static(head_start.HeadStart, "open")) == before
    with mechanisms._all_off():
        assert tokens._qwen_count is not before[0]
    assert tokens._qwen_count is before[0]


def test_cold_start_smoke_times_an_entry_module_against_its_libraries() -> None:
    results = cold_start.main(["--smoke"])
    (entry,) = results
    assert entry.module == "functions.automation.handler"
    assert entry.ours > 0 and entry.bare > 0 and entry.bare_packages > 0
    assert "pydantic" in entry.packages
    assert entry.heavy, "-X importtime found no library imports"


def test_cold_start_instruction_counts_repeat_exactly_enough_to_tell_one_percent() -> None:
    # `--instructions` (valgrind, installed by `make test`): the same program counts the same, and one more import
    # counts more. This is what makes the instruction ratio a figure that one run can give.
    start = [cold_start.instructions_of("pass") for _ in range(2)]
    assert abs(start[0] - start[1]) < 0.002 * start[0]
    assert cold_start.instructions_of("import json, decimal") > 1.01 * start[0]


def test_cold_start_instructions_only_counts_without_timed_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    # `--instructions-only`: INIT as a whole in instructions, with no timed round at all (the buffered entry: the
    # cheapest to count).
    (entry,) = cold_start.main(["--modules", "functions.agent_api.lambda_buffered", "--instructions-only"])
    assert entry.ours_s == [] and entry.bare_modules_s == []
    assert entry.ours_instructions and entry.bare_instructions and entry.ours_instructions > entry.bare_instructions
    assert "| all counted (INIT as a whole) |" in capsys.readouterr().out


def test_first_request_smoke_times_a_fresh_start_against_warm_requests() -> None:
    # A fresh instance started by run.sh: one first request and two warm ones, each to its first text.
    result = first_request.main(["--smoke"])
    assert len(result.first_ms) == 1 and len(result.warm_ms) == 2
    assert all(ms > 0 for ms in result.first_ms + result.warm_ms)
    assert result.ratio > 0


def test_bill_smoke_prices_worker_and_memory_runs_and_the_note_last_never_costs_more() -> None:
    result = bill.main(["--smoke"])
    assert result.user_turns == result.traffic["runs"] > 0
    assert 0 < result.memory_runs < result.user_turns
    base = result.row("today_yesterday", bill.NOTE_FIRST)
    assert result.relative(base) == pytest.approx(1.0)
    for row in result.rows:
        assert 0 <= row.worker.cached <= row.worker.input and 0 <= row.memory.cached <= row.memory.input
        assert row.memory.input > 0 and row.worker.output > 0
        # billed input can only fall when the per-run note moves after the history (same raw tokens, more cached)
        if row.placement == bill.NOTE_LAST:
            first = result.row(row.policy, bill.NOTE_FIRST)
            assert row.worker.input == first.worker.input
            assert row.worker.cached >= first.worker.cached
            assert result.relative(row) <= result.relative(first)


def test_handler_init_smoke_times_init_first_and_warm_invocations() -> None:
    # One fresh automation environment initialised as Lambda does: INIT, a first fire and a warm one.
    (result,) = handler_init.main(["--smoke"])
    assert result.function == "automation" and result.mode == "init"
    assert len(result.first_ms) == 1 and len(result.warm_ms) == 1 and result.init_ms[0] > 0
    assert result.first_built == [0]  # INIT built every service the fire uses
    assert result.ratio > 0


@pytest.mark.e2e
def test_capacity_smoke_counts_a_turn_and_prices_it_against_one_accounts_limits(
    capacity_smoke: capacity.CapacityResult,
) -> None:
    # One thread of 8 turns counted on the app (moto, redis-server, scripted model), then priced.
    result = capacity_smoke
    assert result.lines[0].component.startswith("model tokens")
    assert result.usd_per_1000 > result.lines[0].usd_per_1000  # AWS costs something on top of the tokens
    assert sorted(result.loads) == [1_000, 10_000, 100_000]
    for rows in result.loads.values():
        assert all(row.need >= 0 and row.limit > 0 for row in rows)
    # more users need more of every per-turn limit (the hottest partition is one thread's: it does not grow)
    small, large = result.loads[1_000], result.loads[100_000]
    assert large[0].need > small[0].need
    assert [row.memory_mb for row in result.sizes] == [256, 512, 768, 1024, 1769]
    assert {p.name for p in result.platforms[10_000]} >= {"Lambda + API Gateway (shipped)", "ECS Fargate + ALB"}
    assert "USD per 1,000 user turns" in capacity.markdown(result)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is installed by `make test`")
def test_turn_cpu_smoke_reads_the_cpu_of_a_fresh_instance_and_of_each_turn() -> None:
    result = turn_cpu.main(["--smoke"])
    assert len(result.cold_start_cpu_s) == 1 and result.cold_start_cpu_s[0] > 0
    assert sorted(result.turn_cpu_s) == ["clock", "doc", "plain"]
    assert all(cpu > 0 for values in result.turn_cpu_s.values() for cpu in values)
    # the CPU before the model request is part of the turn's
    assert 0 < max(result.pre_model_cpu_s) < max(result.turn_cpu_s["plain"])
    assert result.peak_rss_mb[0] >= result.rss_ready_mb[0] > 0


def test_title_cost_smoke_prices_a_bounded_title_and_one_read_per_later_event() -> None:
    result = title_cost.main(["--smoke"])
    assert [c.label for c in result.costs] == ["en", "de"]
    assert all(0 < c.output_tokens <= 32 and 0 < c.input_tokens < 1_000 and c.usd > 0 for c in result.costs)
    assert result.store.later_event == 1 and result.store.titling_event > 1
