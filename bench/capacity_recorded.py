"""The figures the capacity model prices by default: one full run of each measuring benchmark.

Recorded on the date in :data:`RECORDED_ON` with the commands below, on the machine docs/benchmarks.md §7 names;
``tests/bench/test_capacity.py`` fails when a new smoke-size count of the code no longer matches them (within
:data:`bench.capacity.TOLERANCE` per turn), so a change that adds or removes a write, a command or a byte shows
up as a failing test until these are recorded again::

    .venv/bin/python -m bench.turn_counts --json counts.json   # RECORDED_FIGURES (3 threads, one cycle each)
    .venv/bin/python -m bench.turn_cpu                         # RECORDED_CPU (3 starts, medians; peak RSS: max)
"""

from __future__ import annotations

from bench.capacity_model import CpuFigures

RECORDED_ON = "2026-12-07"

RECORDED_FIGURES: dict[str, dict[str, float]] = {
    "turn:plain": {
        "dynamodb requests": 9.1333,
        "dynamodb transactions": 2,
        "dynamodb read units": 14.5333,
        "dynamodb write units": 33,
        "dynamodb index write units": 7,
        "dynamodb stored bytes": 4792.2,
        "redis commands": 25.9333,
        "redis bytes in": 7374.5333,
        "redis bytes out": 632.7333,
        "model requests": 1,
        "model bytes sent": 31544.4,
        "model bytes received": 48594.8,
        "events published": 1,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 35.5333,
        "user's threads index units": 2,
        "running-runs index units": 2,
    },
    "turn:clock": {
        "dynamodb requests": 15.1667,
        "dynamodb transactions": 4,
        "dynamodb read units": 27.1667,
        "dynamodb write units": 46,
        "dynamodb index write units": 7,
        "dynamodb stored bytes": 7225.5,
        "redis commands": 30.1667,
        "redis bytes in": 8683.6667,
        "redis bytes out": 725.8333,
        "model requests": 2,
        "model bytes sent": 64445,
        "model bytes received": 50695,
        "events published": 1,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 60.1667,
        "user's threads index units": 2,
        "running-runs index units": 2,
    },
    "turn:doc": {
        "dynamodb requests": 18,
        "dynamodb transactions": 5,
        "dynamodb read units": 28,
        "dynamodb write units": 63,
        "dynamodb index write units": 7,
        "dynamodb stored bytes": 14223,
        "redis commands": 34.6667,
        "redis bytes in": 15235.6667,
        "redis bytes out": 825.6667,
        "model requests": 2,
        "model bytes sent": 64619,
        "model bytes received": 52800,
        "events published": 1,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 77,
        "user's threads index units": 2,
        "running-runs index units": 2,
    },
    "run:heartbeat": {
        "dynamodb requests": 1,
        "dynamodb transactions": 0,
        "dynamodb read units": 0,
        "dynamodb write units": 4,
        "dynamodb index write units": 2,
        "dynamodb stored bytes": 0,
        "redis commands": 0,
        "redis bytes in": 0,
        "redis bytes out": 0,
        "model requests": 0,
        "model bytes sent": 0,
        "model bytes received": 0,
        "events published": 0,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 0,
        "user's threads index units": 0,
        "running-runs index units": 0,
    },
    "memory:run-completed": {
        "dynamodb requests": 7.3333,
        "dynamodb transactions": 0,
        "dynamodb read units": 5.8333,
        "dynamodb write units": 3,
        "dynamodb index write units": 0,
        "dynamodb stored bytes": 368,
        "redis commands": 0,
        "redis bytes in": 0,
        "redis bytes out": -0.4167,
        "model requests": 0,
        "model bytes sent": 0,
        "model bytes received": 0,
        "events published": 0,
        "queue messages sent": 1,
        "sqs requests by the code": 1,
        "thread partition units": 6.8333,
        "user's threads index units": 0,
        "running-runs index units": 0,
    },
    "memory:due-superseded": {
        "dynamodb requests": 4,
        "dynamodb transactions": 0,
        "dynamodb read units": 2,
        "dynamodb write units": 2,
        "dynamodb index write units": 0,
        "dynamodb stored bytes": 371,
        "redis commands": 0,
        "redis bytes in": 0,
        "redis bytes out": 0,
        "model requests": 0,
        "model bytes sent": 0,
        "model bytes received": 0,
        "events published": 0,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 1,
        "user's threads index units": 0,
        "running-runs index units": 0,
    },
    "memory:due-extraction": {
        "dynamodb requests": 24,
        "dynamodb transactions": 0,
        "dynamodb read units": 19.5,
        "dynamodb write units": 21,
        "dynamodb index write units": 7,
        "dynamodb stored bytes": 7994.5,
        "redis commands": 21,
        "redis bytes in": 5974,
        "redis bytes out": 493.8333,
        "model requests": 2,
        "model bytes sent": 24464,
        "model bytes received": 24879.5,
        "events published": 0,
        "queue messages sent": 0,
        "sqs requests by the code": 0,
        "thread partition units": 19.5,
        "user's threads index units": 0,
        "running-runs index units": 2,
    },
    "streams": {
        "worker run stream bytes": 0,
        "worker run stream entries": 0,
        "memory run stream bytes": 4784,
        "control stream bytes": 4772,
        "thread stream bytes per entry": 302.6413,
        "thread stream entries per turn": 25.0833,
    },
}
"""Per occurrence of each phase (``python -m bench.turn_counts``), and the streams' sizes after the runs."""

RECORDED_CPU = CpuFigures(
    cold_start_cpu_s=2.33,
    turn_cpu_s={"plain": 0.176, "clock": 0.204, "doc": 0.232},
    pre_model_cpu_s=0.0173,
    peak_rss_mb=183.0,
)
"""``python -m bench.turn_cpu`` (inside ``python -m bench.capacity``), the model paced at 10 ms a token. CPU per turn
is per event, not per second. Recorded again on 2026-12-07 after the event path's changes (deltas batched over
50 ms, one write per event, issue 41): 176 / 204 / 232 ms per plain / clock / doc turn, against 400 / 448 / 472
before; the cold start is kept from the earlier record (2.33 s; this run measured 1.49 s on a less loaded machine,
a change the event path does not explain), so the bill moves only by what changed. The machine's load moves these
by about 15 %."""
