"""The model bill per user turn: worker plus memory runs, by history policy: ``python -m bench.bill``.

Replays the seeded traffic of :mod:`bench.traffic` twice over:

- **the worker**: every model call the worker makes (the windows of :func:`bench.input_tokens.windows_for`, the
  real ``resolve_window`` with the real Qwen tokenizer), plus the **memory note**: ``--note-tokens`` (150) tokens
  that differ on every run (the worst case: the user's memories, or the ones chosen for the message, change every
  time). The note is placed either where it was (**note first**: right after the system prompt, before the
  history) or where the worker now puts it (**note last**: after the history, at the start of the newest user
  message's text, ``shared.executors.transcript.with_run_notes``). The second call of a run (after tool results) keeps
  the note where the first call had it.
- **the memory runs**: the coalesced extractions of :mod:`bench.memory_tokens` (the shipped ``memory_policy``),
  each with the input the real ``MemoryExecutor`` builds: a fixed part (the memory system prompt and its two tool
  specifications, the same for every user) and the user message (memories shown plus the conversation).

Both are billed under the prefix-cache model of :mod:`bench.prompt_cache` (DashScope's implicit cache: cached
input at 20 % of the input price, 5-minute lifetime reset on a hit, prefixes from 256 tokens), each at its own
model's price (:data:`PRICES`, stated as an assumption in docs/benchmarks.md). Output tokens: the worker's are
the traffic's assistant messages (the same for every policy); the memory model's are ``--memory-output-tokens``
per run (an assumption: a "none" or one short tool call).

The baseline is ``today_yesterday`` with the note first (the prompt as it was before the cache-stable order),
memory runs included; every row is relative to it.

``--smoke`` runs a tiny traffic in a few seconds (what ``make test`` runs).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.input_tokens import BASELINE, CallWindow, Prefix, default_policies, message_token_counter, windows_for
from bench.memory_tokens import _memories, _profile, _Tokens, coalesced, executor_input, turns_of
from bench.prompt_cache import CacheParams, PromptCache, Request
from bench.stats import machine, markdown_table
from bench.traffic import Traffic, TrafficConfig, describe, generate
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.memory.executor import is_human_message
from shared.memory.job import MEMORY_PROFILE
from shared.models import Message, Role
from shared.tokens import count_message_tokens, tokenizer_name

PRICES_AS_OF = "2026-12-01"


@dataclass(frozen=True)
class Price:
    """USD per million tokens; cached input is billed at ``CacheParams.hit_price`` of ``input``."""

    model: str
    input: float
    output: float


PRICES = {
    "worker": Price("qwen3.5-35b-a3b (served id of qwen3.5-30b-a3b)", input=0.20, output=1.60),
    "memory": Price("qwen3.5-flash", input=0.10, output=0.40),
}
"""Assumed DashScope (Model Studio, international) list prices as of :data:`PRICES_AS_OF`, not read from the
provider: check them against the price page before quoting a bill. The ratios barely depend on them."""

NOTE_FIRST, NOTE_LAST = "note first", "note last"


@dataclass
class Tally:
    """Token sums over the whole traffic for one model."""

    input: int = 0
    cached: int = 0
    output: int = 0

    def usd(self, price: Price, hit_price: float) -> float:
        uncached = self.input - self.cached
        return (uncached * price.input + self.cached * price.input * hit_price + self.output * price.output) / 1e6

    def input_usd(self, price: Price, hit_price: float) -> float:
        return ((self.input - self.cached) * price.input + self.cached * price.input * hit_price) / 1e6


@dataclass
class Row:
    policy: str
    placement: str
    worker: Tally = field(default_factory=Tally)
    memory: Tally = field(default_factory=Tally)


@dataclass(frozen=True)
class MemoryCall:
    user_id: str
    at_s: float
    fixed: int
    variable: int


def with_note(traffic: Traffic, item: CallWindow, placement: str, note_tokens: int) -> Request:
    """The call's request with this run's note placed first (after the system prompt) or last (before the
    newest user message of the window)."""
    request = item.request
    note_key = f"note:{item.call.user_id}:{item.call.run_index}"
    if placement == NOTE_FIRST:
        at = 1
    else:
        # Message keys are stored message ids (``<user>-m<seq>``); a repair's synthetic message is never a user's.
        messages = traffic.threads[item.call.user_id].messages
        users = [i for i, key in enumerate(request.keys[1:]) if _is_user(messages, key)]
        at = 1 + (users[-1] if users else len(request.keys) - 1)
    return request.with_segment(at, note_key, note_tokens)


def _is_user(messages: Sequence[Message], message_id: str) -> bool:
    seq = message_id.rsplit("-m", 1)[-1]
    if not seq.isdigit() or not 0 < int(seq) <= len(messages):
        return False
    message = messages[int(seq) - 1]
    return message.id == message_id and message.role is Role.USER


def worker_output(traffic: Traffic, item: CallWindow) -> int:
    """The tokens the call answers with: the assistant message stored right after what it read."""
    messages = traffic.threads[item.call.user_id].messages
    following = messages[item.call.upto_seq] if item.call.upto_seq < len(messages) else None
    return count_message_tokens(following) if following is not None and following.role is Role.ASSISTANT else 0


async def memory_calls(traffic: Traffic) -> list[MemoryCall]:
    """The coalesced memory runs of the traffic that call the model, in time order."""
    tokens = _Tokens()
    policy = _profile(MEMORY_PROFILE).memory_policy
    origin = traffic.config.start
    calls: list[MemoryCall] = []
    for thread in traffic.threads.values():
        turns = turns_of(thread)
        human_upto = [sum(1 for m in thread.messages[: t.upto] if is_human_message(m)) for t in turns]
        store = InMemoryMemoryStore()
        for memory in _memories(thread.user_id):
            await store.put(memory)
        for extraction in coalesced(turns, policy, human_upto):
            spent = await executor_input(thread, extraction, store, tokens)
            if spent:
                at_s = (extraction.at - origin).total_seconds()
                calls.append(MemoryCall(thread.user_id, at_s, tokens.fixed, spent - tokens.fixed))
    calls.sort(key=lambda c: c.at_s)
    return calls


def bill_memory(calls: Sequence[MemoryCall], params: CacheParams, output_tokens: int) -> Tally:
    cache, tally = PromptCache(params), Tally()
    for index, call in enumerate(calls):
        request = Request(call.user_id, call.at_s, ("memory-prompt", f"memory:{index}"), (call.fixed, call.variable))
        cached, _ = cache.billed(request)
        tally.input += request.total
        tally.cached += cached
        tally.output += output_tokens
    return tally


def bill_worker(
    traffic: Traffic, windows: Sequence[CallWindow], placement: str, params: CacheParams, note_tokens: int
) -> Tally:
    cache, tally = PromptCache(params), Tally()
    for item in windows:
        request = with_note(traffic, item, placement, note_tokens)
        cached, _ = cache.billed(request)
        tally.input += request.total
        tally.cached += cached
        tally.output += worker_output(traffic, item)
    return tally


@dataclass
class BillResult:
    traffic: dict[str, int]
    user_turns: int
    params: CacheParams
    note_tokens: int
    memory_output_tokens: int
    memory_runs: int
    rows: list[Row]
    seconds: float

    def row(self, policy: str, placement: str) -> Row:
        return next(r for r in self.rows if r.policy == policy and r.placement == placement)

    def usd_per_1000_turns(self, row: Row, *, input_only: bool = False) -> float:
        hit = self.params.hit_price
        if input_only:
            total = row.worker.input_usd(PRICES["worker"], hit) + row.memory.input_usd(PRICES["memory"], hit)
        else:
            total = row.worker.usd(PRICES["worker"], hit) + row.memory.usd(PRICES["memory"], hit)
        return 1000 * total / self.user_turns if self.user_turns else 0.0

    def relative(self, row: Row, *, input_only: bool = False) -> float:
        base = self.usd_per_1000_turns(self.row(BASELINE, NOTE_FIRST), input_only=input_only)
        return self.usd_per_1000_turns(row, input_only=input_only) / base if base else 0.0

    def markdown(self) -> str:
        turns = self.user_turns or 1
        header = [
            "policy", "note", "worker input / turn", "worker cached / turn", "worker output / turn",
            "memory input / turn", "memory cached / turn", "memory output / turn",
            "input USD / 1,000 turns", "vs baseline (input)", "USD / 1,000 turns (with output)", "vs baseline (all)",
        ]
        table = [
            [
                r.policy, r.placement,
                r.worker.input / turns, r.worker.cached / turns, r.worker.output / turns,
                r.memory.input / turns, r.memory.cached / turns, r.memory.output / turns,
                f"{self.usd_per_1000_turns(r, input_only=True):.4f}", f"{self.relative(r, input_only=True):.2f}",
                f"{self.usd_per_1000_turns(r):.4f}", f"{self.relative(r):.2f}",
            ]
            for r in self.rows
        ]
        prices = "; ".join(f"{role}: {p.model} in {p.input} / out {p.output}" for role, p in PRICES.items())
        return "\n".join(
            [
                f"machine: {machine()}; tokenizer: {tokenizer_name()}",
                f"traffic: {self.traffic}",
                f"cache model: TTL {self.params.ttl_s:.0f} s (reset on hit), cached input at "
                f"{self.params.hit_price:.0%}, min prefix {self.params.min_tokens} tokens",
                f"prices (USD per million tokens, assumed as of {PRICES_AS_OF}): {prices}",
                f"memory note: {self.note_tokens} tokens, different on every run; memory runs: {self.memory_runs} "
                f"({100 * self.memory_runs / turns:.1f} per 100 user turns), {self.memory_output_tokens} output "
                "tokens each (assumed)",
                f"baseline: {BASELINE}, {NOTE_FIRST}, memory runs included",
                "",
                markdown_table(header, table),
                "",
                f"({self.seconds:.1f} s)",
            ]
        )


def run(
    cfg: TrafficConfig,
    params: CacheParams,
    *,
    block_sizes: Sequence[int] = (20,),
    note_tokens: int = 150,
    memory_output_tokens: int = 50,
) -> BillResult:
    started = time.perf_counter()
    traffic = generate(cfg)
    prefix, count = Prefix(), message_token_counter()
    memory = asyncio.run(memory_calls(traffic))
    memory_tally = bill_memory(memory, params, memory_output_tokens)
    rows: list[Row] = []
    for name, policy in default_policies(block_sizes).items():
        windows = asyncio.run(windows_for(traffic, policy, prefix, count))
        for placement in (NOTE_FIRST, NOTE_LAST):
            worker = bill_worker(traffic, windows, placement, params, note_tokens)
            rows.append(Row(name, placement, worker, memory_tally))
    return BillResult(
        describe(traffic), traffic.runs, params, note_tokens, memory_output_tokens, len(memory), rows,
        time.perf_counter() - started,
    )


def main(argv: Sequence[str] | None = None) -> BillResult:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny traffic (a few users, four days)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ttl-s", type=float, default=300.0, help="cache TTL in seconds, reset on hit")
    parser.add_argument("--hit-price", type=float, default=0.2, help="price of a cached token (1 = uncached)")
    parser.add_argument("--min-cache-tokens", type=int, default=256)
    parser.add_argument("--block-sizes", default="20", help="comma-separated block sizes (blocked policy)")
    parser.add_argument("--note-tokens", type=int, default=150, help="memory note size, different on every run")
    parser.add_argument("--memory-output-tokens", type=int, default=50, help="memory model output per run")
    args = parser.parse_args(argv)
    cfg = TrafficConfig.smoke() if args.smoke else TrafficConfig()
    cfg = TrafficConfig(**{**cfg.__dict__, "seed": args.seed})
    params = CacheParams(ttl_s=args.ttl_s, hit_price=args.hit_price, min_tokens=args.min_cache_tokens)
    sizes = [int(s) for s in args.block_sizes.split(",") if s.strip()]
    result = run(
        cfg, params, block_sizes=sizes, note_tokens=args.note_tokens, memory_output_tokens=args.memory_output_tokens
    )
    print(result.markdown())
    return result


if __name__ == "__main__":
    main()
