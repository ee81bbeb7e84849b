"""The printed report of ``python -m bench.capacity``: one function per section, in the order they print."""

from __future__ import annotations

from dataclasses import fields, replace

from bench.capacity_model import (
    FIRST_TEXT_BUDGET_MS,
    HEARTBEAT_S,
    HOURS_PER_MONTH,
    INIT_BUDGET_S,
    INPUT_SOURCES,
    RSS_BUDGET,
    ask_for,
    chosen_size,
    loads,
    mean_turn_seconds,
    monthly,
)
from bench.capacity_prices import AS_OF, PRICES, QUOTAS
from bench.capacity_recorded import RECORDED_ON
from bench.capacity_result import COALESCED_TOLERANCE, TOLERANCE, CapacityResult
from bench.stats import machine, markdown_table


def _usd(value: float) -> str:
    return f"{value:,.4f}" if value < 1 else f"{value:,.2f}"


def markdown(result: CapacityResult) -> str:
    sections = (_inputs, _per_turn, _bill, _loads, _binding, _sizes, _platforms, _followers, _drift, _prices)
    return "\n\n".join(text for section in sections if (text := section(result)))


def _inputs(result: CapacityResult) -> str:
    inputs = result.inputs
    source = "measured now (bench.turn_counts)" if result.measured else f"recorded {RECORDED_ON}"
    rows = [
        [f.name, f"{value:g}" if isinstance(value := getattr(inputs, f.name), float) else value,
         INPUT_SOURCES.get(f.name, "")]
        for f in fields(inputs) if f.name != "prices"
    ]
    return "\n".join([
        f"machine: {machine()}; per-turn counts: {source}",
        f"prices: us-east-1 list prices as of {AS_OF} (bench/capacity_prices.py; * = read from a secondary source)",
        "",
        "Inputs:",
        "",
        markdown_table(["input", "value", "source"], rows),
    ])


def _per_turn(result: CapacityResult) -> str:
    inputs = result.inputs
    seconds = mean_turn_seconds(result.figures, result.cpu, inputs)
    return "\n".join([
        f"Per user turn (the mix of kinds, {seconds / HEARTBEAT_S:.2f} heartbeats, "
        f"{result.per_turn['memory records']:.2f} memory-function records):",
        "",
        markdown_table(["figure", "per turn"], [[k, v] for k, v in result.per_turn.items()]),
        "",
        f"Streaming function time per turn: {seconds:.2f} s (first token {inputs.first_token_s:g} s per model call, "
        f"{inputs.output_tokens:g} tokens at {inputs.tokens_per_s:g}/s)",
    ])


def _bill(result: CapacityResult) -> str:
    inputs = result.inputs
    total = result.usd_per_1000
    aws = total - result.lines[0].usd_per_1000
    table = markdown_table(
        ["component", "USD / 1,000 turns", "share", "basis"],
        [[line.component, _usd(line.usd_per_1000), f"{line.usd_per_1000 / total:.1%}", line.note]
         for line in result.lines]
        + [["**total**", f"**{_usd(total)}**", "100%", f"AWS: {_usd(aws)} ({aws / total:.1%})"]],
    )
    return "\n".join([
        "USD per 1,000 user turns:",
        "",
        table,
        "",
        f"At {inputs.dau:,.0f} daily users: {inputs.turns_per_month:,.0f} turns a month, "
        f"${monthly(result.lines, inputs):,.0f} a month.",
    ])


def _loads(result: CapacityResult) -> str:
    rows = [
        [f"{dau:,.0f}", load.name, f"{load.need:,.1f} {load.unit}", f"{load.limit:,.0f}", f"{load.utilisation:.1%}"]
        for dau, at in result.loads.items() for load in at
    ]
    return "\n".join([
        "Peak load against the limits of one account:",
        "",
        markdown_table(["daily users", "load", "need at the peak", "limit", "used"], rows),
    ])


def _binding(result: CapacityResult) -> str:
    inputs = result.inputs
    rows = []
    for dau, at in result.loads.items():
        top = max(at, key=lambda load: load.utilisation)
        quota = max((load for load in at if load.quota), key=lambda load: load.utilisation)
        rows.append([f"{dau:,.0f}", f"{top.name} ({top.utilisation:.0%}): {top.ask}",
                     f"{quota.name} ({quota.utilisation:.0%})", ask_for(quota)])
    follow = replace(inputs, follow_share=0.01)
    extra = loads(result.figures, result.cpu, follow)[0].need - loads(result.figures, result.cpu, inputs)[0].need
    hour_usd = inputs.memory_mb / 1024 * 3600 * inputs.price(f"lambda_gb_s_{inputs.arch}")
    return "\n".join([
        "Which limit binds first, and what to ask AWS for:",
        "",
        markdown_table(["daily users", "closest limit (used): what to do", "closest AWS quota (used)",
                        "ask AWS for"], rows),
        "",
        f"Open follow streams (GET /threads/{{id}}/events): each 1 % of {inputs.dau:,.0f} daily users holding one "
        f"at the peak adds {extra:,.0f} concurrent executions, and each open stream costs ${hour_usd:.3f} an hour "
        "on Lambda (plus an API Gateway request every 15 minutes).",
    ])


def _sizes(result: CapacityResult) -> str:
    chosen = chosen_size(result.sizes)
    rows = [
        [row.memory_mb, _usd(row.usd_per_1000), row.added_first_text_ms, row.cold_start_s, f"{row.rss_share:.0%}",
         ("**chosen**" if row is chosen else "yes") if row.fits else "no"]
        for row in result.sizes
    ]
    return "\n".join([
        "The streaming function's memory size (CPU share = MB / 1,769; fits: CPU before the model request "
        f"<= {FIRST_TEXT_BUDGET_MS:g} ms, init <= {INIT_BUDGET_S:g} s at that share, peak RSS <= {RSS_BUDGET:.0%}):",
        "",
        markdown_table(["memory MB", "compute USD / 1,000 turns", "CPU before the model request, ms",
                        "cold start init, s (worst)", "peak RSS / memory", "fits"], rows),
    ])


def _platforms(result: CapacityResult) -> str:
    rows = [
        [f"{users:,.0f}", platform.name, f"{platform.monthly_usd:,.0f}", platform.note]
        for users, on_each in result.platforms.items() for platform in on_each
    ]
    lines = [
        "The streaming path's compute and front door per month (tokens, DynamoDB, Redis, NAT are the same on each):",
        "",
        markdown_table(["daily users", "platform", "USD / month", "basis"], rows),
        "",
    ]
    for name, users in result.crossovers.items():
        lines.append(f"- {name} costs less than Lambda from "
                     + (f"{users:,.0f} daily users" if users is not None else "never, up to 10 M daily users"))
    return "\n".join(lines)


def _followers(result: CapacityResult) -> str:
    if not result.followers:
        return ""
    rows = [
        [f"{row.followers:,}", _usd(row.lambda_usd), _usd(row.fargate_usd), row.tasks, f"{row.ratio:,.2f}"]
        for row in result.followers
    ]
    users = result.followers_break_even
    one = result.followers[0]
    hours = one.fargate_usd / (one.lambda_usd / one.followers / HOURS_PER_MONTH)
    return "\n".join([
        f"Follow streams held open around the clock, per month: Lambda ({result.inputs.memory_mb} MB each, a "
        "reconnect every 15 minutes) against the Fargate option (template.yaml StreamHost: an ALB and "
        f"0.5 vCPU / 1 GB tasks, at least 2, {result.inputs.followers_per_task:,} followers each):",
        "",
        markdown_table(["concurrent followers", "Lambda USD", "Fargate option USD", "tasks", "Lambda / Fargate"],
                       rows),
        "",
        "- the Fargate option costs less than Lambda from "
        + (f"{users:,} concurrent followers" if users is not None else "never, up to 100,000 followers"),
        f"- its cost with one follower, {_usd(one.fargate_usd)} a month, is {hours:,.0f} follower-hours on Lambda: "
        f"{hours / HOURS_PER_MONTH:.2f} followers held on average",
    ])


def _drift(result: CapacityResult) -> str:
    if not result.drift:
        return ""
    bad = result.drifted()
    return "\n".join([
        f"Measured now against recorded ({RECORDED_ON}), per turn:",
        "",
        markdown_table(["figure", "recorded", "measured", "off"],
                       [[d.figure, d.recorded, d.measured, f"{d.off:.1%}"] for d in result.drift]),
        "",
        f"{len(bad)} figure(s) more than {TOLERANCE:.0%} off ({COALESCED_TOLERANCE:.0%} for the event streams): "
        + (", ".join(d.figure for d in bad) if bad else "the recorded figures hold"),
    ])


def _prices(result: CapacityResult) -> str:
    prices = result.inputs.prices
    rows: list[list[object]] = [[name + ("" if p.verified else " *"), f"{prices[name]:.10g}", p.unit, p.source]
                                for name, p in PRICES.items()]
    rows += [[name + ("" if q.verified else " *"), q.value, q.unit, q.source] for name, q in QUOTAS.items()]
    table = markdown_table(["name", "value", "unit", "source"], rows)
    return "\n".join(["Prices (* secondary source) and quotas:", "", table])
