"""The whole bill of a user turn and the capacity of one account: ``python -m bench.capacity``.

Prices a user turn, tokens and every AWS service it touches, per 1,000 turns and by share; sizes the peak
(concurrent executions, DynamoDB units and the hottest partition, Redis memory and ECPU) for a number of daily
users; says which limit one account reaches first at 1k, 10k and 100k daily users and what to ask AWS for; compares
memory sizes for the streaming function and the same work on AgentCore Runtime and ECS Fargate behind an ALB; and
from how many follow streams held open the stack's Fargate option (template.yaml ``StreamHost``) costs less than
holding them on Lambda.

The per-turn counts come from a measured run (:mod:`bench.turn_counts`: the app on moto, a redis-server and the
scripted model; the CPU figures from :mod:`bench.turn_cpu`), and the model (:mod:`bench.capacity_model`) prices
them. By default the command measures first (about 3 minutes: counts, then CPU) and prints the measured figures
against the recorded ones (:mod:`bench.capacity_recorded`, the figures docs/benchmarks.md §7 shows);
``--no-measure`` prices the recorded figures at once (for trying other inputs); ``--smoke`` measures the counts on
one thread only and keeps the recorded CPU figures (what ``make test`` runs). Every input is an option with its
default's source (``--help``); ``--price NAME=VALUE`` replaces a price (``--list-prices`` names them).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from bench.capacity_model import (
    FOLLOWER_STEPS,
    INPUT_SOURCES,
    CpuFigures,
    Figures,
    Inputs,
    at_users,
    bill,
    binding,
    crossover,
    followers_break_even,
    held_followers,
    loads,
    per_turn,
    platforms,
    sizes,
)
from bench.capacity_prices import PRICES
from bench.capacity_recorded import RECORDED_CPU, RECORDED_FIGURES
from bench.capacity_report import markdown as report
from bench.capacity_result import (
    TOLERANCE as TOLERANCE,  # re-exported: the drift test and the recorded figures name it here
)
from bench.capacity_result import CapacityResult, Drift

STEPS = (1_000, 10_000, 100_000)
def model(figures: Figures, cpu: CpuFigures, inputs: Inputs, *, measured: bool) -> CapacityResult:
    steps = sorted({*STEPS, inputs.dau})
    names = [p.name for p in platforms(figures, cpu, inputs)][1:]
    return CapacityResult(
        inputs=inputs,
        figures=figures,
        cpu=cpu,
        measured=measured,
        per_turn=per_turn(figures, cpu, inputs),
        lines=bill(figures, cpu, inputs),
        loads={dau: loads(figures, cpu, at_users(inputs, dau)) for dau in steps},
        sizes=sizes(figures, cpu, inputs),
        platforms={dau: platforms(figures, cpu, at_users(inputs, dau)) for dau in steps},
        crossovers={name: crossover(figures, cpu, inputs, name) for name in names},
        followers=[held_followers(inputs, n) for n in FOLLOWER_STEPS],
        followers_break_even=followers_break_even(inputs),
    )


def drift(recorded: Figures, measured: Figures, cpu: CpuFigures, inputs: Inputs) -> list[Drift]:
    """The model's per-turn counts from the recorded figures against the same from a measured run."""
    before, now = per_turn(recorded, cpu, inputs), per_turn(measured, cpu, inputs)
    out = [Drift(key, before[key], now.get(key, 0.0)) for key in before]
    for key, value in recorded["streams"].items():
        out.append(Drift(f"streams: {key}", value, measured["streams"].get(key, 0.0)))
    return out


# ---------------------------------------------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------------------------------------------


def markdown(result: CapacityResult) -> str:
    """The whole report (``bench.capacity_report`` writes each section)."""
    return report(result)


# ---------------------------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="count one thread (8 turns); CPU figures recorded")
    parser.add_argument("--no-measure", action="store_true", help="price the recorded figures, measure nothing")
    defaults = Inputs()
    for f in fields(Inputs):
        if f.name == "prices":
            continue
        value = getattr(defaults, f.name)
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(value), default=value,
                            help=f"default {value} ({INPUT_SOURCES.get(f.name, '')})")
    parser.add_argument("--price", action="append", default=[], metavar="NAME=VALUE",
                        help="replace a price (USD per the unit --list-prices shows)")
    parser.add_argument("--list-prices", action="store_true", help="print the prices and their sources, then exit")
    return parser


def _inputs(args: argparse.Namespace) -> Inputs:
    prices = {k: p.value for k, p in PRICES.items()}
    for item in args.price:
        name, _, value = item.partition("=")
        if name not in prices:
            raise SystemExit(f"unknown price {name!r}; known: {', '.join(sorted(prices))}")
        prices[name] = float(value)
    values: dict[str, Any] = {f.name: getattr(args, f.name) for f in fields(Inputs) if f.name != "prices"}
    if values["arch"] not in ("arm64", "x86"):
        raise SystemExit("--arch is arm64 or x86")
    return Inputs(**values, prices=prices)


def measure_figures(*, smoke: bool) -> tuple[Figures, CpuFigures]:
    """Count per-turn figures now (and, unless ``smoke``, the CPU figures too)."""
    from bench import turn_counts, turn_cpu

    counts = turn_counts.measure(threads=1 if smoke else 3, cycles=1)
    print(counts.markdown(), "\n")
    if smoke:
        return counts.figures(), RECORDED_CPU
    cpu = turn_cpu.measure(starts=3, cycles=1)
    print(cpu.markdown(), "\n")
    return counts.figures(), cpu_figures(cpu)


def cpu_figures(result: Any) -> CpuFigures:
    """The medians of a :class:`bench.turn_cpu.CpuResult`."""
    import statistics

    return CpuFigures(
        cold_start_cpu_s=statistics.median(result.cold_start_cpu_s),
        turn_cpu_s={kind: statistics.median(values) for kind, values in result.turn_cpu_s.items()},
        pre_model_cpu_s=statistics.median(result.pre_model_cpu_s),
        peak_rss_mb=max(result.peak_rss_mb),
    )


def main(argv: Sequence[str] | None = None) -> CapacityResult:
    args = _parser().parse_args(argv)
    if args.list_prices:
        for name, price in PRICES.items():
            checked = "" if price.verified else "; unverified"
            print(f"{name} = {price.value:.10g}  ({price.unit}; {price.source}{checked})")
        raise SystemExit(0)
    inputs = _inputs(args)
    figures: Mapping[str, Mapping[str, float]] = RECORDED_FIGURES
    cpu = RECORDED_CPU
    measured = not args.no_measure
    if measured:
        figures, cpu = measure_figures(smoke=args.smoke)
    result = model(figures, cpu, inputs, measured=measured)
    if measured:
        result.drift = drift(RECORDED_FIGURES, figures, RECORDED_CPU, inputs)
    print(markdown(result))
    return result


def with_users(result: CapacityResult, dau: float) -> CapacityResult:
    """The same figures priced for another number of daily users."""
    return model(result.figures, result.cpu, replace(result.inputs, dau=dau), measured=result.measured)


__all__ = ["CapacityResult", "binding", "main", "model", "with_users"]


if __name__ == "__main__":
    main()
