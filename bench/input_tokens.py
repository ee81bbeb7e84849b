"""Input tokens and billed input per run, by history policy: ``python -m bench.input_tokens``.

Replays the seeded traffic of :mod:`bench.traffic` through the real :func:`shared.context_window.resolve_window`
(the same call the worker makes before every model call, with the same input-token cap and reserve), counts
tokens with the real Qwen tokenizer (``dashscope``'s bundled ``qwen.tiktoken``) and bills each model call under
the prompt-cache model of :mod:`bench.prompt_cache`.

A model call's input is the prefix (the worker's system prompt, variant of ``chat_default``, with today's date
and the tool list, plus the tool specifications) followed by the window. A run makes one call, or two when the
model called tools (the second call reads the results). Per-run figures sum the run's calls.

``--smoke`` runs a tiny traffic in a second or two (what ``make test`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench.prompt_cache import CacheParams, PromptCache, Request
from bench.stats import machine, markdown_table, mean, percentile
from bench.traffic import ZONE, PlannedCall, Traffic, TrafficConfig, describe, generate
from shared.context_window import resolve_window
from shared.intent.prompts import IntentVariant, build_system_prompt
from shared.llm.types import ToolSpec
from shared.models import Message, Role
from shared.profiles import HistoryPolicy
from shared.tokens import count_message_tokens, count_tokens, estimate_tokens, tokenizer_name
from shared.tools.clock import SPEC as CLOCK_SPEC

BASELINE = "today_yesterday"


def default_policies(block_sizes: Sequence[int] = (40,)) -> dict[str, HistoryPolicy]:
    policies = {
        BASELINE: HistoryPolicy(mode="today_yesterday"),
        "last_n N=20": HistoryPolicy(n=20),
        "last_n N=25": HistoryPolicy(n=25),
    }
    for size in block_sizes:
        policies[f"blocked N=20 B={size}"] = HistoryPolicy(n=20, block_size=size)
    return policies


class ThreadReader:
    """``MessageHistoryReader`` over one stored thread (``messages[i].seq == i + 1``); counts requests."""

    def __init__(self, messages: list[Message]) -> None:
        self._messages = messages
        self._seqs = [m.seq for m in messages]
        self.requests = 0

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        self.requests += 1
        end = len(self._messages) if before_seq is None else bisect.bisect_left(self._seqs, before_seq)
        return self._messages[max(end - limit, 0) : end][::-1]


class Prefix:
    """The system prompt plus tool specs, per local date (the prompt carries today's date, so it changes daily)."""

    def __init__(self, variant: IntentVariant = "A", tools: Sequence[ToolSpec] = (CLOCK_SPEC,)) -> None:
        self._variant = variant
        self._tools = list(tools)
        self._by_date: dict[str, tuple[int, int]] = {}
        specs = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in self._tools
        ]
        self._tool_tokens = count_tokens(json.dumps(specs, ensure_ascii=False))
        self._tool_estimate = sum(estimate_tokens(json.dumps(t.parameters)) + estimate_tokens(t.description)
                                  for t in self._tools)

    def at(self, moment: datetime) -> tuple[str, int, int]:
        """(cache key, exact tokens, the worker's reserve estimate) for a call made at ``moment``."""
        local = moment.astimezone(ZONE)
        key = local.date().isoformat()
        if key not in self._by_date:
            prompt = build_system_prompt(self._variant, self._tools, local)
            exact = count_tokens(prompt) + self._tool_tokens
            self._by_date[key] = (exact, estimate_tokens(prompt) + self._tool_estimate)
        tokens, reserve = self._by_date[key]
        return f"prefix:{key}", tokens, reserve


@dataclass
class CallWindow:
    call: PlannedCall
    request: Request
    user_messages: int
    capped: bool
    store_requests: int


@dataclass
class PolicyReport:
    name: str
    runs_input: list[int] = field(default_factory=list)
    runs_billed: list[float] = field(default_factory=list)
    runs_cached: list[int] = field(default_factory=list)
    user_mean_input: dict[str, float] = field(default_factory=dict)
    window_user_messages: list[int] = field(default_factory=list)
    capped_calls: int = 0
    store_requests: list[int] = field(default_factory=list)

    def row(self, baseline: PolicyReport | None) -> list[object]:
        raw = self.runs_input
        billed_total = sum(self.runs_billed)
        relative = billed_total / sum(baseline.runs_billed) if baseline and baseline.runs_billed else 1.0
        cached_share = sum(self.runs_cached) / sum(raw) if raw else 0.0
        return [
            self.name,
            mean(raw),
            percentile(raw, 50),
            percentile(raw, 95),
            percentile(raw, 99),
            max(raw, default=0),
            max(self.user_mean_input.values(), default=0.0),
            mean(self.runs_billed),
            percentile(self.runs_billed, 95),
            f"{cached_share:.0%}",
            f"{relative:.2f}",
        ]


HEADER = [
    "policy",
    "input mean",
    "p50",
    "p95",
    "p99",
    "max",
    "worst user (mean)",
    "billed mean",
    "billed p95",
    "cached share",
    "billed vs today_yesterday",
]


def message_token_counter() -> Callable[[Message], int]:
    cache: dict[str, int] = {}

    def count(msg: Message) -> int:
        value = cache.get(msg.id)
        if value is None:
            value = cache[msg.id] = count_message_tokens(msg)
        return value

    return count


async def windows_for(
    traffic: Traffic, policy: HistoryPolicy, prefix: Prefix, count: Callable[[Message], int]
) -> list[CallWindow]:
    """Every planned model call's window under ``policy``, in time order."""
    readers = {uid: ThreadReader(t.messages) for uid, t in traffic.threads.items()}
    origin = traffic.config.start
    out: list[CallWindow] = []
    for call in traffic.calls_in_time_order():
        reader = readers[call.user_id]
        key, prefix_tokens, reserve = prefix.at(call.at)
        before = reader.requests
        window = await resolve_window(
            reader,
            "tenant",
            f"thread-{call.user_id}",
            policy,
            now=call.at,
            upto_seq=call.upto_seq,
            count_tokens=count,
            reserve_tokens=reserve,
        )
        request = Request(
            thread=call.user_id,
            at_s=(call.at - origin).total_seconds(),
            keys=(key, *(m.id for m in window.messages)),
            tokens=(prefix_tokens, *(count(m) for m in window.messages)),
        )
        out.append(
            CallWindow(
                call=call,
                request=request,
                user_messages=sum(m.role is Role.USER for m in window.messages),
                capped=any(r["kind"].startswith("token_cap") for r in window.repairs),
                store_requests=reader.requests - before,
            )
        )
    return out


def bill(name: str, windows: list[CallWindow], params: CacheParams) -> PolicyReport:
    cache = PromptCache(params)
    per_run: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    report = PolicyReport(name)
    for item in windows:
        cached, billed = cache.billed(item.request)
        slot = per_run[(item.call.user_id, item.call.run_index)]
        slot[0] += item.request.total
        slot[1] += billed
        slot[2] += cached
        report.window_user_messages.append(item.user_messages)
        report.capped_calls += item.capped
        report.store_requests.append(item.store_requests)
    by_user: dict[str, list[int]] = defaultdict(list)
    for (user_id, _), (raw, run_billed, run_cached) in per_run.items():
        report.runs_input.append(int(raw))
        report.runs_billed.append(run_billed)
        report.runs_cached.append(int(run_cached))
        by_user[user_id].append(int(raw))
    report.user_mean_input = {uid: mean(v) for uid, v in by_user.items()}
    return report


@dataclass
class InputTokensResult:
    traffic: dict[str, int]
    params: CacheParams
    reports: dict[str, PolicyReport]
    ttl_sensitivity: dict[float, dict[str, float]]
    """TTL (s) -> policy -> total billed relative to today_yesterday at that TTL."""
    seconds: float

    def markdown(self) -> str:
        base = self.reports.get(BASELINE)
        lines = [
            f"machine: {machine()}; tokenizer: {tokenizer_name()}",
            f"traffic: {self.traffic}",
            f"cache model: TTL {self.params.ttl_s:.0f} s (reset on hit), cached tokens billed at "
            f"{self.params.hit_price:.0%}, min cacheable prefix {self.params.min_tokens} tokens",
            "",
            "Input tokens per run (prefix + window, summed over the run's model calls):",
            "",
            markdown_table(HEADER, [r.row(base) for r in self.reports.values()]),
            "",
            "Window shape per model call:",
            "",
            markdown_table(
                ["policy", "user msgs mean", "user msgs max", "calls capped by max_input_tokens",
                 "store requests mean", "store requests max"],
                [
                    [
                        r.name,
                        mean(r.window_user_messages),
                        max(r.window_user_messages, default=0),
                        r.capped_calls,
                        mean(r.store_requests),
                        max(r.store_requests, default=0),
                    ]
                    for r in self.reports.values()
                ],
            ),
            "",
            "Billed input relative to today_yesterday, by cache TTL:",
            "",
            markdown_table(
                ["policy", *(f"TTL {ttl:.0f} s" for ttl in self.ttl_sensitivity)],
                [
                    [name, *(f"{self.ttl_sensitivity[ttl][name]:.2f}" for ttl in self.ttl_sensitivity)]
                    for name in self.reports
                ],
            ),
            "",
            f"({self.seconds:.1f} s)",
        ]
        return "\n".join(lines)


def run(
    cfg: TrafficConfig,
    params: CacheParams,
    policies: dict[str, HistoryPolicy],
    ttls: Sequence[float] = (60.0, 300.0, 1800.0),
) -> InputTokensResult:
    started = time.perf_counter()
    traffic = generate(cfg)
    prefix = Prefix()
    count = message_token_counter()
    windows = {name: asyncio.run(windows_for(traffic, policy, prefix, count)) for name, policy in policies.items()}
    reports = {name: bill(name, w, params) for name, w in windows.items()}
    sensitivity: dict[float, dict[str, float]] = {}
    for ttl in ttls:
        at_ttl = {name: sum(bill(name, w, _with_ttl(params, ttl)).runs_billed) for name, w in windows.items()}
        base = at_ttl.get(BASELINE) or 1.0
        sensitivity[ttl] = {name: value / base for name, value in at_ttl.items()}
    return InputTokensResult(describe(traffic), params, reports, sensitivity, time.perf_counter() - started)


def _with_ttl(params: CacheParams, ttl: float) -> CacheParams:
    return CacheParams(ttl_s=ttl, hit_price=params.hit_price, min_tokens=params.min_tokens)


def main(argv: Sequence[str] | None = None) -> InputTokensResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny traffic (a few users, four days)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ttl-s", type=float, default=300.0, help="cache TTL in seconds, reset on hit")
    parser.add_argument("--hit-price", type=float, default=0.2, help="price of a cached token (1 = uncached)")
    parser.add_argument("--min-cache-tokens", type=int, default=256)
    parser.add_argument("--block-sizes", default="10,20,40", help="comma-separated block sizes (blocked policy)")
    parser.add_argument("--json", dest="json_path", help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    cfg = TrafficConfig.smoke() if args.smoke else TrafficConfig()
    cfg = TrafficConfig(**{**cfg.__dict__, "seed": args.seed})
    params = CacheParams(ttl_s=args.ttl_s, hit_price=args.hit_price, min_tokens=args.min_cache_tokens)
    sizes = [int(s) for s in args.block_sizes.split(",") if s.strip()]
    result = run(cfg, params, default_policies(sizes))
    print(result.markdown())
    if args.json_path:
        summary: dict[str, Any] = {
            "traffic": result.traffic,
            "rows": {name: r.row(result.reports.get(BASELINE)) for name, r in result.reports.items()},
            "ttl_sensitivity": result.ttl_sensitivity,
        }
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2, default=str)
    return result


if __name__ == "__main__":
    main()
