"""The first invocation of a fresh execution environment against a warm one, for the functions that are not the
streaming API (the automation function, the memory function, the buffered API function):
``python -m bench.handler_init``.

Each round starts a fresh process as the Lambda Python runtime does (``tests/support/handler_runtime.py``): the
handler module is imported (INIT, timed on its own), then the handler is invoked with ``1 + --warm`` events, each
one new work (a new fire of an automation task, a new run-completed record for a thread, ``GET /api/v1/threads``),
on a moto server and a redis-server with the offline model. The ratio is the median first invocation over the
median warm invocation. ``--mode init`` is the shipped behaviour (``AWS_LAMBDA_FUNCTION_NAME`` set: services built
during INIT); ``--mode lazy`` is a plain import, the services built on the first invocation (the behaviour before).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import machine, markdown_table
from tests.support import handler_runtime
from tests.support.moto_server import moto_server
from tests.support.redis_server import redis_server

FUNCTIONS = ("automation", "memory", "buffered")


@dataclass
class HandlerTimes:
    function: str
    mode: str
    init_ms: list[float] = field(default_factory=list)
    first_ms: list[float] = field(default_factory=list)
    warm_ms: list[float] = field(default_factory=list)
    first_built: list[int] = field(default_factory=list)
    """Services members built during each first invocation (0 when INIT built them all)."""

    @property
    def ratio(self) -> float:
        return statistics.median(self.first_ms) / statistics.median(self.warm_ms)

    def row(self) -> list[Any]:
        return [
            self.function,
            self.mode,
            len(self.first_ms),
            statistics.median(self.init_ms),
            statistics.median(self.first_ms),
            statistics.median(self.warm_ms),
            round(self.ratio, 2),
            max(self.first_built),
        ]


def run(*, functions: Sequence[str], modes: Sequence[str], rounds: int, warm: int) -> list[HandlerTimes]:
    results = {(f, m): HandlerTimes(f, m) for f in functions for m in modes}
    with moto_server() as moto, redis_server() as redis_url, tempfile.TemporaryDirectory() as work:
        env, seeds = handler_runtime.prepare(moto, redis_url)
        start = 0
        for _ in range(rounds):
            for (function, mode), times in results.items():  # alternate, so every mode sees the same noise
                events = handler_runtime.events_for(function, seeds, 1 + warm, start=start)
                start += 1 + warm
                report = handler_runtime.run_handler(function, events, env, Path(work), in_lambda=mode == "init")
                times.init_ms.append(report.init["ms"])
                times.first_ms.append(report.first["ms"])
                times.first_built.append(len(report.first["built"]))
                times.warm_ms.extend(inv["ms"] for inv in report.invocations[1:])
    return list(results.values())


def table(results: Sequence[HandlerTimes]) -> str:
    headers = ["function", "mode", "rounds", "INIT ms", "first ms", "warm ms", "first / warm", "built on first"]
    return markdown_table(headers, [r.row() for r in results])


def main(argv: Sequence[str] | None = None) -> list[HandlerTimes]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one round of the automation function, one warm call")
    parser.add_argument("--rounds", type=int, default=5, help="fresh execution environments per function and mode")
    parser.add_argument("--warm", type=int, default=5, help="warm invocations after each first one")
    parser.add_argument("--functions", nargs="*", default=list(FUNCTIONS), choices=FUNCTIONS)
    parser.add_argument("--mode", nargs="*", default=["init", "lazy"], choices=["init", "lazy"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        results = run(functions=["automation"], modes=["init"], rounds=1, warm=1)
    else:
        results = run(functions=args.functions, modes=args.mode, rounds=args.rounds, warm=args.warm)
    if args.json:
        print(json.dumps([{**vars(r), "ratio": round(r.ratio, 2)} for r in results] + [{"machine": machine()}]))
    else:
        print(table(results))
        print(f"\n({machine()})")
    return results


if __name__ == "__main__":
    main()
