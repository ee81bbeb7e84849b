"""The cost and capacity model: counted figures per turn, priced and scaled to a number of daily users.

Inputs are the per-occurrence figures of :mod:`bench.turn_counts` (DynamoDB units, Redis commands and bytes,
model bytes, events and queue messages, for each kind of turn and each memory-function record), the CPU figures
of :mod:`bench.turn_cpu`, and :class:`Inputs` (users, traffic shape, model speed, memory size, prices). Nothing
here measures; every derived figure is arithmetic on those, written out so it can be argued with:

- **a turn** is the traffic's mix of kinds (:data:`bench.turn_scenario.TRAFFIC_MIX`), plus the memory
  function's records it causes (:data:`MEMORY_RATES`), plus one heartbeat per ``run_heartbeat_s`` (10 s) of the run;
- **the streaming function's time** per turn is the model's (first token per model call, the answer's tokens at
  the output rate, a tool's run) plus the app's: each DynamoDB request as if sequential (an upper bound: admission
  sends several at once), and the CPU before the model request, stretched by the memory size's CPU share;
- **the memory function's time** per record is its requests and, for an extraction, two memory-model calls, plus
  :data:`MEMORY_HANDLER_CPU_S` of CPU stretched the same way;
- **peaks** follow from the daily turns, the busiest hour's share and a burst factor for the busiest minute;
  concurrency is arrivals per second times the time each one holds (Little's law).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from bench.capacity_prices import COLD_START_SHARE, INIT_LIMIT_S, LAMBDA_MB_PER_VCPU, PRICES, QUOTAS
from bench.turn_scenario import CLOCK, DOC, PLAIN, TRAFFIC_MIX

Figures = Mapping[str, Mapping[str, float]]
"""``phase -> figure -> value`` per occurrence, as :meth:`bench.turn_counts.TurnCounts.figures` returns."""

MEMORY_RATES = {"memory:run-completed": 1.0, "memory:due-superseded": 0.785, "memory:due-extraction": 0.215}
"""Memory-function records per user turn, from the coalescing rule (idle 120 s, 6 pending user messages) applied to
the seed-7 traffic: of 14,357 turns, 1,842 extract at once in their run-completed record and the other 12,515 send
an "extraction due" message, of which 1,243 extract after the quiet period and 11,272 find a later turn. The
immediate extractions are priced as due-message extractions (3,085 in all: 0.215 per turn)."""
HEARTBEAT_S = 10.0
"""``run_heartbeat_s``: a running run renews its lease this often (one ``UpdateItem``)."""
MEMORY_HANDLER_CPU_S = 0.05
"""CPU of one memory-function record outside its requests and model calls, at one vCPU (an assumption, below the
warm memory invocation of docs/benchmarks.md §6b, 98-213 ms with its store calls, on a loaded 2-core machine)."""
MEMORY_FUNCTION_MB = 512
"""template.yaml: the memory function runs at the Globals' memory size."""
RUN_STREAM_TTL_H = 24.0
"""``EVENT_STREAM_TTL_S`` (template.yaml ``EventStreamTtlSeconds``): every stream expires 24 h after its last write."""
CONTROL_STREAM_TTL_H = 300 / 3600
HOURS_PER_MONTH = 730.0
DAYS_PER_MONTH = 30.42
TOOL_CALL_TOKENS = 20
"""Output tokens of an assistant message that only calls tools (its JSON arguments)."""
_CALLS = {PLAIN: 1, CLOCK: 2, DOC: 2}


@dataclass(frozen=True)
class CpuFigures:
    """What :mod:`bench.turn_cpu` measured (seconds of one core of the measuring machine)."""

    cold_start_cpu_s: float
    turn_cpu_s: Mapping[str, float]
    pre_model_cpu_s: float
    peak_rss_mb: float

    def per_turn(self) -> float:
        return sum(share * self.turn_cpu_s.get(kind, 0.0) for kind, share in TRAFFIC_MIX.items())


@dataclass(frozen=True)
class Inputs:
    """Every assumption of the model, with its default's source in :data:`INPUT_SOURCES`."""

    dau: float = 10_000
    turns_per_user: float = 19.2
    peak_share: float = 0.085
    burst: float = 2.0
    first_token_s: float = 0.55
    tokens_per_s: float = 45.0
    output_tokens: float = 256
    tool_s: float = 0.3
    store_latency_s: float = 0.006
    transaction_latency_s: float = 0.0125
    memory_first_token_s: float = 0.4
    memory_tokens_per_s: float = 100.0
    memory_output_tokens: float = 50
    memory_mb: int = 1024
    arch: str = "arm64"
    follow_share: float = 0.0
    thread_span_h: float = 12.0
    batch_fill: float = 1.0
    nat_gateways: int = 2
    interface_endpoints: int = 6
    token_usd_per_1000: float = 2.4596
    followers_per_task: int = 5_000
    prices: Mapping[str, float] = field(default_factory=lambda: {k: p.value for k, p in PRICES.items()})

    def price(self, name: str) -> float:
        return float(self.prices[name])

    @property
    def turns_per_day(self) -> float:
        return self.dau * self.turns_per_user

    @property
    def turns_per_month(self) -> float:
        return self.turns_per_day * DAYS_PER_MONTH

    @property
    def peak_turns_per_s(self) -> float:
        return self.turns_per_day * self.peak_share / 3600 * self.burst


INPUT_SOURCES = {
    "dau": "sizing input (daily active users)",
    "followers_per_task": "idle follow streams one 0.5 vCPU / 1 GB streams task holds: bench.held_followers "
                          "(2026-12-07) measured 37.6 KB and 0.47 % of a vCPU per 1,000 on one process (176 MB after "
                          "a turn), so 5,000 keep it under half of 1 GB; the break-even does not depend on it",
    "turns_per_user": "bench.traffic seed 7: 14,357 turns over 746 active user-days",
    "peak_share": "bench.traffic seed 7: the busiest hour of the day (15:00 Asia/Shanghai) holds 8.5 % of turns",
    "burst": "assumption: the busiest minute against the busiest hour's mean",
    "first_token_s": "assumption: a hosted Qwen model's first token in 0.3-0.8 s",
    "tokens_per_s": "assumption: a hosted Qwen model streams 30-60 tokens/s",
    "output_tokens": "bench.bill: worker output per turn (docs/benchmarks.md, the bill per user turn)",
    "tool_s": "assumption: a server tool (document search) takes 0.3 s; the clock takes none",
    "store_latency_s": "FACTS: a DynamoDB call takes 4-8 ms from Lambda",
    "transaction_latency_s": "FACTS: a transaction takes 10-15 ms",
    "memory_first_token_s": "assumption: qwen3.5-flash's first token",
    "memory_tokens_per_s": "assumption: qwen3.5-flash's output rate",
    "memory_output_tokens": "bench.bill: 50 output tokens per memory run (assumed there too)",
    "memory_mb": "template.yaml StreamingApiFunction, kept after bench.turn_cpu (docs/benchmarks.md §7)",
    "arch": "template.yaml Globals: arm64",
    "follow_share": "share of daily users holding a GET /threads/{id}/events stream open at the peak (the "
                    "playground does while a thread is shown); 0: the product's client does not",
    "thread_span_h": "assumption: a turn's entries on its thread's stream outlive the stream's 24 h TTL by this "
                     "much on average (the TTL counts from the thread's last write: a thread used over a day "
                     "keeps its morning turns until the next evening)",
    "batch_fill": "memory-queue records per memory-function invocation (BatchSize 2; 1 at low traffic)",
    "nat_gateways": "template.yaml: one NAT gateway per AZ in prod (2)",
    "interface_endpoints": "template.yaml: EventBridge, Scheduler, Secrets Manager endpoints in 2 AZs",
    "token_usd_per_1000": (
        "bench.bill: chat_default (plain last 20, note last; 1.5446 on chat_cache_blocks), memory runs included"
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# per turn
# ---------------------------------------------------------------------------------------------------------------


def cpu_stretch(memory_mb: float) -> float:
    """How much longer CPU work takes at ``memory_mb`` than on one full vCPU."""
    return max(1.0, LAMBDA_MB_PER_VCPU / memory_mb)


def turn_seconds(figures: Figures, cpu: CpuFigures, inputs: Inputs, kind: str) -> float:
    """The streaming function's time for one turn of ``kind``: the model's, then the app's."""
    phase = figures[f"turn:{kind}"]
    calls = _CALLS[kind]
    model = calls * inputs.first_token_s + inputs.output_tokens / inputs.tokens_per_s
    if calls > 1:
        model += TOOL_CALL_TOKENS / inputs.tokens_per_s + (inputs.tool_s if kind == DOC else 0.0)
    transactions = phase["dynamodb transactions"]
    store = (phase["dynamodb requests"] - transactions) * inputs.store_latency_s
    store += transactions * inputs.transaction_latency_s
    return model + store + cpu.pre_model_cpu_s * cpu_stretch(inputs.memory_mb)


def mean_turn_seconds(figures: Figures, cpu: CpuFigures, inputs: Inputs) -> float:
    return sum(share * turn_seconds(figures, cpu, inputs, kind) for kind, share in TRAFFIC_MIX.items())


def record_seconds(figures: Figures, inputs: Inputs, phase: str) -> float:
    """The memory function's time for one record."""
    f = figures[phase]
    seconds = f["dynamodb requests"] * inputs.store_latency_s + f["sqs requests by the code"] * 0.01
    seconds += MEMORY_HANDLER_CPU_S * cpu_stretch(MEMORY_FUNCTION_MB)
    if f["model requests"]:
        per_call = inputs.memory_first_token_s + inputs.memory_output_tokens / inputs.memory_tokens_per_s
        seconds += f["model requests"] * per_call
    return seconds


def per_turn(figures: Figures, cpu: CpuFigures, inputs: Inputs) -> dict[str, float]:
    """Every counted figure per user turn: the mix of kinds, its heartbeats and the memory records it causes."""
    weights: dict[str, float] = {f"turn:{kind}": share for kind, share in TRAFFIC_MIX.items()}
    weights["run:heartbeat"] = mean_turn_seconds(figures, cpu, inputs) / HEARTBEAT_S
    weights.update(MEMORY_RATES)
    keys = next(iter(figures.values())).keys()
    out = {key: sum(w * figures[phase][key] for phase, w in weights.items()) for key in keys}
    out["memory records"] = sum(MEMORY_RATES.values())
    return out


# ---------------------------------------------------------------------------------------------------------------
# the bill
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    component: str
    usd_per_1000: float
    note: str


def thread_stream_bytes_per_turn(figures: Figures) -> float:
    """What one turn leaves on its thread's stream (MEMORY USAGE per entry x entries a turn adds): since every
    event is written once, a visible run's whole stream."""
    streams = figures["streams"]
    return float(streams["thread stream bytes per entry"] * streams["thread stream entries per turn"])


def bill(figures: Figures, cpu: CpuFigures, inputs: Inputs) -> list[Line]:
    """USD per 1,000 user turns by component: tokens first, then each AWS service, then the fixed monthly costs
    spread over the month's turns."""
    turn = per_turn(figures, cpu, inputs)
    streams = figures["streams"]
    gb_s = inputs.price(f"lambda_gb_s_{inputs.arch}")
    seconds = mean_turn_seconds(figures, cpu, inputs)
    init_s = cpu.cold_start_cpu_s * cpu_stretch(inputs.memory_mb)
    records = turn["memory records"]
    memory_s = sum(rate * record_seconds(figures, inputs, phase) for phase, rate in MEMORY_RATES.items())
    ecpu = turn["redis commands"] + (turn["redis bytes in"] + turn["redis bytes out"]) / 1024
    run_streams_gb_h = (streams["worker run stream bytes"] * RUN_STREAM_TTL_H
                        + MEMORY_RATES["memory:due-extraction"] * streams["memory run stream bytes"] * RUN_STREAM_TTL_H
                        + streams["control stream bytes"] * CONTROL_STREAM_TTL_H) / 1e9
    thread_gb_h_per_turn = thread_stream_bytes_per_turn(figures) * (RUN_STREAM_TTL_H + inputs.thread_span_h) / 1e9
    nat_bytes = turn["model bytes sent"] + turn["model bytes received"]
    sqs_requests = turn["queue messages sent"] + turn["events published"]  # the rule's deliveries and the sends
    sqs_requests += 2 * records / inputs.batch_fill  # the event source mapping's receive and delete
    fixed_month = (inputs.nat_gateways * inputs.price("nat_hour") + inputs.interface_endpoints
                   * inputs.price("interface_endpoint_hour")) * HOURS_PER_MONTH
    k = 1000.0
    lines = [
        Line("model tokens (worker + memory runs)", inputs.token_usd_per_1000, "bench.bill, assumed DashScope prices"),
        Line("Lambda streaming function: duration", k * seconds * inputs.memory_mb / 1024 * gb_s,
             f"{seconds:.2f} s x {inputs.memory_mb} MB ({inputs.arch})"),
        Line("Lambda streaming function: cold starts (INIT billed)", k * COLD_START_SHARE * init_s
             * inputs.memory_mb / 1024 * gb_s, f"{COLD_START_SHARE:.0%} of turns x {init_s:.1f} s"),
        Line("Lambda: requests (streaming + memory function)", k * (1 + records / inputs.batch_fill)
             * inputs.price("lambda_request"), f"1 + {records / inputs.batch_fill:.2f} invocations"),
        Line("Lambda memory function: duration", k * memory_s * MEMORY_FUNCTION_MB / 1024 * gb_s,
             f"{memory_s:.2f} s x {MEMORY_FUNCTION_MB} MB over {records:.2f} records"),
        Line("API Gateway REST (POST /agent)", k * inputs.price("apigw_rest_request"), "1 request"),
        Line("DynamoDB writes", k * turn["dynamodb write units"] * inputs.price("dynamodb_wru"),
             f"{turn['dynamodb write units']:.1f} WRU ({turn['dynamodb index write units']:.1f} of them index)"),
        Line("DynamoDB reads", k * turn["dynamodb read units"] * inputs.price("dynamodb_rru"),
             f"{turn['dynamodb read units']:.1f} RRU"),
        Line("DynamoDB storage (one month of what the turn adds)", k * turn["dynamodb stored bytes"] / 1e9
             * inputs.price("dynamodb_storage_gb_month"), f"{turn['dynamodb stored bytes'] / 1024:.1f} KB, kept"),
        Line("ElastiCache data: run and control streams (24 h)", k * run_streams_gb_h
             * inputs.price("elasticache_gb_hour"),
             f"{streams['worker run stream bytes'] / 1024:.1f} KB per visible run (its events are on the thread's), "
             f"hidden runs' and control streams"),
        Line("ElastiCache data: thread streams (24 h after the last write)", k * thread_gb_h_per_turn
             * inputs.price("elasticache_gb_hour"),
             f"{thread_stream_bytes_per_turn(figures) / 1024:.1f} KB per turn for "
             f"{RUN_STREAM_TTL_H + inputs.thread_span_h:g} h"),
        Line("ElastiCache ECPU", k * ecpu * inputs.price("elasticache_ecpu"),
             f"{ecpu:.0f} ECPU (1 per command + 1 per KB)"),
        Line("EventBridge events", k * turn["events published"] * inputs.price("eventbridge_event"),
             f"{turn['events published']:.2f} events"),
        Line("SQS requests", k * sqs_requests * inputs.price("sqs_request"), f"{sqs_requests:.2f} requests"),
        Line("NAT gateway data (model traffic)", k * nat_bytes / 1e9 * inputs.price("nat_gb"),
             f"{nat_bytes / 1024:.0f} KB"),
        Line("fixed: NAT gateway hours, interface endpoints", k * fixed_month / inputs.turns_per_month,
             f"${fixed_month:,.0f}/month over {inputs.turns_per_month:,.0f} turns"),
    ]
    return lines


def monthly(lines: list[Line], inputs: Inputs) -> float:
    return sum(line.usd_per_1000 for line in lines) * inputs.turns_per_month / 1000


# ---------------------------------------------------------------------------------------------------------------
# capacity
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What one account carries at the peak, against the limit that applies. ``quota``: an AWS service quota one
    can ask to raise (the others are fixed by AWS, or settings and code of this project)."""

    name: str
    need: float
    limit: float
    unit: str
    ask: str
    quota: bool = False

    @property
    def utilisation(self) -> float:
        return self.need / self.limit if self.limit else math.inf


def loads(figures: Figures, cpu: CpuFigures, inputs: Inputs) -> list[Load]:
    turn = per_turn(figures, cpu, inputs)
    peak = inputs.peak_turns_per_s
    seconds = mean_turn_seconds(figures, cpu, inputs)
    streaming = peak * seconds + inputs.dau * inputs.follow_share
    record_s = sum(r * record_seconds(figures, inputs, p) for p, r in MEMORY_RATES.items()) / sum(MEMORY_RATES.values())
    memory = peak * turn["memory records"] * record_s  # records per second x seconds each (batching aside)
    thread_units = max(figures[f"turn:{k}"]["thread partition units"] for k in TRAFFIC_MIX)
    running = turn["running-runs index units"] * peak / 8  # RUNNING_SHARDS
    streams = figures["streams"]
    kept_days = (RUN_STREAM_TTL_H + inputs.thread_span_h) / 24  # every key expires: about a day and a half of turns
    cache_gb = inputs.turns_per_day * (thread_stream_bytes_per_turn(figures) * kept_days
                                       + streams["worker run stream bytes"]) / 1e9
    ecpu_per_s = peak * (turn["redis commands"] + (turn["redis bytes in"] + turn["redis bytes out"]) / 1024)
    q = QUOTAS
    return [
        Load("Lambda concurrency (streaming + memory functions)", streaming + min(memory, 5),
             q["lambda_concurrency"].value, "executions",
             "Service Quotas: Lambda concurrent executions for the region", quota=True),
        _scaling(streaming),
        Load("memory function concurrency (queue's MaximumConcurrency)", memory,
             q["memory_event_source_concurrency"].value, "executions",
             "raise ScalingConfig.MaximumConcurrency in template.yaml (a deploy, not a quota)"),
        Load("DynamoDB write units per second (app table)", peak * turn["dynamodb write units"],
             q["dynamodb_table_throughput"].value, "WRU/s", "Service Quotas: DynamoDB table-level write throughput",
             quota=True),
        Load("DynamoDB read units per second (app table)", peak * turn["dynamodb read units"],
             q["dynamodb_table_throughput"].value, "RRU/s", "Service Quotas: DynamoDB table-level read throughput",
             quota=True),
        Load("hottest partition: one thread, a whole turn's units in one second", thread_units,
             q["dynamodb_partition_wcu"].value, "units/s", "none possible: a thread runs one turn at a time"),
        Load("shared partitions: GSI2 running-run shards (8)", running, q["dynamodb_partition_wcu"].value,
             "WCU/s per shard", "more RUNNING_SHARDS (code)"),
        Load("API Gateway requests per second", peak, q["apigw_account_rps"].value, "requests/s",
             "Service Quotas: API Gateway throttle for the account", quota=True),
        Load("ElastiCache data (every stream expires 24 h after its last write)", cache_gb,
             q["elasticache_data_gb"].value, "GB", "a shorter EVENT_STREAM_TTL_S (a setting)"),
        Load("ElastiCache ECPU per second", ecpu_per_s, q["elasticache_ecpu_per_s"].value, "ECPU/s",
             "CacheUsageLimits.ECPUPerSecond (a setting); fewer events per token (code)"),
    ]


def _scaling(streaming: float) -> Load:
    """From zero to the peak: each function adds 1,000 environments per 10 s, so a peak reached within 10 s can
    hold at most 1,000 more than before."""
    return Load("Lambda scale-out: environments needed within 10 s (from idle)", streaming,
                QUOTAS["lambda_scaling"].value, "environments", "none (fixed); keep a warm floor instead")


def binding(figures: Figures, cpu: CpuFigures, inputs: Inputs, *, quotas_only: bool = False) -> Load:
    """The limit the account reaches first (of the AWS quotas one can ask to raise, with ``quotas_only``)."""
    rows = [load for load in loads(figures, cpu, inputs) if load.quota or not quotas_only]
    return max(rows, key=lambda load: load.utilisation)


def ask_for(load: Load) -> str:
    """What to ask AWS for: twice the peak need, in round numbers, once the need passes half the quota."""
    if load.utilisation < 0.5:
        return "nothing yet"
    step = 10 ** max(0, len(str(int(load.need * 2))) - 2)
    return f"{load.ask}: {math.ceil(load.need * 2 / step) * step:,} {load.unit}"


def at_users(inputs: Inputs, dau: float) -> Inputs:
    return replace(inputs, dau=dau)


# ---------------------------------------------------------------------------------------------------------------
# memory size and other platforms
# ---------------------------------------------------------------------------------------------------------------


FIRST_TEXT_BUDGET_MS = 60.0
"""The most the CPU before the model request may add to the time to first text: about a tenth of a hosted model's
first token (0.3-0.8 s)."""
INIT_BUDGET_S = INIT_LIMIT_S / 2
"""A cold start's init must fit in half of Lambda's 10 s INIT limit even at the size's share of a vCPU."""
RSS_BUDGET = 0.5
"""The process's peak resident memory may take at most half the function's memory (a long answer, a tool's output
and the local feed grow it; Lambda ends an invocation that runs out)."""


@dataclass(frozen=True)
class SizeRow:
    memory_mb: int
    usd_per_1000: float
    added_first_text_ms: float
    cold_start_s: float
    rss_share: float

    @property
    def fits(self) -> bool:
        """Within :data:`FIRST_TEXT_BUDGET_MS`, :data:`INIT_BUDGET_S` and :data:`RSS_BUDGET`."""
        return (self.added_first_text_ms <= FIRST_TEXT_BUDGET_MS and self.cold_start_s <= INIT_BUDGET_S
                and self.rss_share <= RSS_BUDGET)


def chosen_size(rows: list[SizeRow]) -> SizeRow | None:
    """The smallest memory size that fits: cheaper sizes save only the function's duration bill."""
    return next((row for row in sorted(rows, key=lambda r: r.memory_mb) if row.fits), None)


def sizes(figures: Figures, cpu: CpuFigures, inputs: Inputs, options: tuple[int, ...] = (256, 512, 768, 1024, 1769)
          ) -> list[SizeRow]:
    """The streaming function at each memory size: its compute bill per 1,000 turns (duration, cold starts,
    requests), the CPU before the model request added to the time to first text, a cold start's init (CPU only,
    at the size's share of a vCPU: the worst case, if INIT is not given more), the peak memory's share."""
    rows = []
    for mb in options:
        at = replace(inputs, memory_mb=mb)
        lines = {line.component: line.usd_per_1000 for line in bill(figures, cpu, at)}
        compute = sum(v for k, v in lines.items() if k.startswith("Lambda streaming"))
        rows.append(SizeRow(mb, compute, cpu.pre_model_cpu_s * cpu_stretch(mb) * 1000,
                            cpu.cold_start_cpu_s * cpu_stretch(mb), cpu.peak_rss_mb / mb))
    return rows


@dataclass(frozen=True)
class Platform:
    name: str
    monthly_usd: float
    note: str


HOUR_SHARES = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.037, 0.058, 0.061, 0.07, 0.072, 0.081, 0.066, 0.085,
               0.076, 0.064, 0.066, 0.084, 0.074, 0.064, 0.037, 0.004)
"""Share of a day's turns in each hour (Asia/Shanghai), bench.traffic seed 7: what an autoscaled fleet follows."""
FARGATE_TASK = (1.0, 2.0)
"""vCPU and GB of one task (arm64)."""
FARGATE_TARGET_CPU = 0.6
FARGATE_MIN_TASKS = 2
SESSION_GAP_S = 60.0
"""bench.traffic: turns of a session come 15-120 s apart (burst users), 15-90 s (power users)."""
SESSION_TURNS = 12.0
"""bench.traffic: a burst is 6-18 turns (8-25 for power users, 1-4 for light ones)."""
SSE_BYTES_PER_TURN = 70_000
"""Bytes a turn's response sends to the client: about one copy of its run stream's events (Redis bytes in / 2)."""


def platforms(figures: Figures, cpu: CpuFigures, inputs: Inputs) -> list[Platform]:
    """The streaming path's compute and front door per month on Lambda + API Gateway, on AgentCore Runtime and on
    ECS Fargate behind an ALB. The rest of the bill (tokens, DynamoDB, Redis, NAT) is the same on all three."""
    turns = inputs.turns_per_month
    lines = {line.component: line.usd_per_1000 for line in bill(figures, cpu, inputs)}
    lam = sum(v for k, v in lines.items() if k.startswith("Lambda streaming")) + 1000 * inputs.price("lambda_request")
    lam += lines["API Gateway REST (POST /agent)"]
    lambda_month = lam * turns / 1000
    seconds = mean_turn_seconds(figures, cpu, inputs)
    cpu_turn = cpu.per_turn()
    memory_gb = max(0.128, cpu.peak_rss_mb / 1024)

    def agentcore(idle_timeout_s: float) -> tuple[float, float]:
        # memory is billed for the whole session: each turn, the gap to the next one, and the idle timeout's share
        held = seconds + SESSION_GAP_S + idle_timeout_s / SESSION_TURNS
        usd = turns * (cpu_turn / 3600 * inputs.price("agentcore_vcpu_hour")
                       + memory_gb * held / 3600 * inputs.price("agentcore_gb_hour"))
        return usd, held

    vcpu, gb = FARGATE_TASK
    task_hour = vcpu * inputs.price("fargate_vcpu_hour_arm64") + gb * inputs.price("fargate_gb_hour_arm64")
    per_task_turns_s = FARGATE_TARGET_CPU * vcpu / cpu_turn
    task_hours = lcu_hours = 0.0
    for share in HOUR_SHARES:
        rate = inputs.turns_per_day * share / 3600
        task_hours += max(FARGATE_MIN_TASKS, math.ceil(rate * inputs.burst / per_task_turns_s))
        lcu_hours += max(rate / 25, rate * seconds / 3000, rate * 3600 * SSE_BYTES_PER_TURN / 1e9)
    fargate = DAYS_PER_MONTH * (task_hours * task_hour + lcu_hours * inputs.price("alb_lcu_hour"))
    fargate += HOURS_PER_MONTH * inputs.price("alb_hour")
    return [
        Platform("Lambda + API Gateway (shipped)", lambda_month,
                 f"{seconds:.1f} s x {inputs.memory_mb} MB per turn, billed waiting on the model"),
        *(
            Platform(f"AgentCore Runtime, idle timeout {idle:.0f} s", usd,
                     f"{cpu_turn * 1000:.0f} ms vCPU + {memory_gb * 1024:.0f} MB held {held:.0f} s per turn")
            for idle in (900.0, 60.0)
            for usd, held in [agentcore(idle)]
        ),
        Platform("ECS Fargate + ALB", fargate,
                 f"{vcpu:g} vCPU/{gb:g} GB tasks at {FARGATE_TARGET_CPU:.0%} CPU ({per_task_turns_s:.0f} turns/s "
                 f"each), at least {FARGATE_MIN_TASKS}"),
    ]


def crossover(figures: Figures, cpu: CpuFigures, inputs: Inputs, other: str) -> float | None:
    """The daily users from which ``other`` costs less than Lambda per month (None below 10 M users)."""
    dau = 100.0
    while dau <= 10_000_000:
        rows = {p.name: p.monthly_usd for p in platforms(figures, cpu, at_users(inputs, dau))}
        if rows[other] < rows["Lambda + API Gateway (shipped)"]:
            return dau
        dau *= 1.25
    return None


# ---------------------------------------------------------------------------------------------------------------
# held followers: Lambda against the Fargate option (template.yaml StreamHost)
# ---------------------------------------------------------------------------------------------------------------


STREAM_HOST_TASK = (0.5, 1.0)
"""vCPU and GB of one streams task: template.yaml StreamHostTaskCpu (512) and StreamHostTaskMemory (1024)."""
STREAM_HOST_MIN_TASKS = 2
"""template.yaml StreamHostDesiredTasks: one task per AZ."""
LAMBDA_STREAM_S = 900.0
"""A follow stream on Lambda ends with the function's timeout (template.yaml StreamingApiFunction), and the client
reconnects: one more invocation and one more API Gateway request."""
FARGATE_STREAM_S = 3600.0
"""A follow stream on a task ends with FUNCTION_TIMEOUT_S (template.yaml StreamHostMaxStreamSeconds)."""
PING_BYTES = 60
"""One ``: ping`` frame every 15 s with its TLS record and TCP/IP headers, what the ALB counts as processed bytes."""
FOLLOWER_STEPS = (1, 2, 5, 10, 100, 1_000, 10_000)


@dataclass(frozen=True)
class HeldFollowers:
    """What ``followers`` follow streams held open around the clock cost per month on each host."""

    followers: int
    lambda_usd: float
    fargate_usd: float
    tasks: int

    @property
    def ratio(self) -> float:
        """Lambda's cost over the Fargate option's."""
        return self.lambda_usd / self.fargate_usd


def held_followers(inputs: Inputs, followers: int) -> HeldFollowers:
    """A month of ``followers`` concurrent follow streams: on Lambda one environment each at the streaming function's
    memory, billed while it waits, plus a reconnect (invocation, REST API request) every 15 minutes; on the Fargate
    option the ALB's hours, its LCUs (the largest of new connections, active connections and processed bytes) and
    the tasks, at least two. What both share (Redis reads, the API Gateway request that opens a stream's first
    connection) is left out; a stream that carries a turn's events costs the same bytes on both."""
    hours = HOURS_PER_MONTH
    gb = inputs.memory_mb / 1024
    reconnects = followers * hours * 3600 / LAMBDA_STREAM_S
    lam = followers * hours * 3600 * gb * inputs.price(f"lambda_gb_s_{inputs.arch}")
    lam += reconnects * (inputs.price("lambda_request") + inputs.price("apigw_rest_request"))
    vcpu, task_gb = STREAM_HOST_TASK
    tasks = max(STREAM_HOST_MIN_TASKS, math.ceil(followers / inputs.followers_per_task))
    task_hour = vcpu * inputs.price("fargate_vcpu_hour_arm64") + task_gb * inputs.price("fargate_gb_hour_arm64")
    # LCU dimensions: 25 new connections a second, 3,000 active connections, 1 GB processed, per LCU-hour.
    lcus = max(followers / FARGATE_STREAM_S / 25, followers / 3000, followers * 3600 / 15 * PING_BYTES / 1e9)
    fargate = hours * (inputs.price("alb_hour") + lcus * inputs.price("alb_lcu_hour") + tasks * task_hour)
    return HeldFollowers(followers, lam, fargate, tasks)


def followers_break_even(inputs: Inputs, limit: int = 100_000) -> int | None:
    """The fewest concurrent followers, held around the clock, for which the Fargate option costs less than Lambda
    (None up to ``limit``)."""
    return next((n for n in range(1, limit + 1) if held_followers(inputs, n).ratio > 1), None)
