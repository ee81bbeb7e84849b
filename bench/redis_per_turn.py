"""What one turn costs in Redis, counted by a real redis-server: ``python -m bench.redis_per_turn``.

The overhead benchmark's processes (``bench/overhead_servers.py``): the scripted model server streaming an answer
of ``--chunks`` chunks ``--chunk-delay`` apart, and ``ours`` (the real app under uvicorn, the in-memory store at
5 ms a request, the real ``openai`` adapter) on a redis-server started here on a free port. After a warm-up, the
server's statistics are reset (``CONFIG RESETSTAT``) and ``--turns`` turns are sent one after another, each a new
thread, its response read to the end; then:

- **commands**: ``INFO commandstats`` calls, by command, without the ``INFO`` and ``CONFIG`` calls of this
  benchmark itself;
- **bytes in / out**: ``INFO stats`` ``total_net_input_bytes`` / ``total_net_output_bytes`` (what the app sent to
  Redis, and read from it), without the bytes of one ``INFO`` call (measured the same way on an idle server);
- **kept**: per thread, ``MEMORY USAGE``, ``XLEN`` and ``TTL`` of every key the turns left (what the cache keeps,
  and for how long).

Every figure is per turn. The whole run is bounded (fixed turn counts, 60 s timeouts) and stops every process it
started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis

from bench.overhead_servers import JWT_SECRET
from bench.server_overhead import _store_args, failures, one_request, started
from bench.stats import machine
from shared.auth import mint_local_token
from tests.support.redis_server import redis_server

SKIPPED_COMMANDS = ("info", "config")


@dataclass
class RedisTurn:
    """Per-turn Redis figures of a pass."""

    turns: int
    commands: Counter[str] = field(default_factory=Counter)
    bytes_in: float = 0.0
    bytes_out: float = 0.0
    keys: list[dict[str, Any]] = field(default_factory=list)

    @property
    def commands_per_turn(self) -> float:
        return sum(self.commands.values()) / self.turns

    def as_dict(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "commands_per_turn": round(self.commands_per_turn, 1),
            "by_command": {k: round(v / self.turns, 1) for k, v in self.commands.most_common()},
            "bytes_in_per_turn": round(self.bytes_in / self.turns),
            "bytes_out_per_turn": round(self.bytes_out / self.turns),
            "keys_per_turn": self.keys,
        }

    def markdown(self, config: dict[str, Any]) -> str:
        per_key: dict[str, list[dict[str, Any]]] = {}
        for key in self.keys:
            per_key.setdefault(key["kind"], []).append(key)
        lines = [
            f"Redis per turn ({machine()}; {json.dumps(config)})",
            "",
            "| figure | per turn |",
            "|---|---|",
            f"| commands | {self.commands_per_turn:.1f} |",
            *(f"| `{name.upper()}` | {count / self.turns:.1f} |" for name, count in self.commands.most_common()),
            f"| bytes in (app to Redis) | {self.bytes_in / self.turns:,.0f} |",
            f"| bytes out (Redis to app) | {self.bytes_out / self.turns:,.0f} |",
        ]
        for kind, keys in sorted(per_key.items()):
            memory = sum(k["memory"] for k in keys) / self.turns
            length = sum(k["xlen"] for k in keys) / self.turns
            ttls = sorted({k["ttl"] for k in keys})
            ttl = f"{ttls[0]}..{ttls[-1]} s" if len(ttls) > 1 else f"{ttls[0]} s"
            lines.append(f"| kept: {kind} keys | {len(keys) / self.turns:g} key, {memory:,.0f} bytes, "
                         f"{length:.0f} entries, TTL {ttl} |")
        return "\n".join(lines)


def _stats(client: redis.Redis) -> tuple[Counter[str], int, int]:
    commands = Counter(
        {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in client.info("commandstats").items()
            if name.removeprefix("cmdstat_").split("|")[0] not in SKIPPED_COMMANDS
        }
    )
    stats = client.info("stats")
    return commands, int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


def _info_cost(client: redis.Redis) -> tuple[int, int]:
    """Bytes in and out one pair of ``INFO`` calls adds to the counters (measured on the idle server)."""
    client.config_resetstat()
    _, before_in, before_out = _stats(client)
    _, after_in, after_out = _stats(client)
    return after_in - before_in, after_out - before_out


def _kept_keys(client: redis.Redis) -> list[dict[str, Any]]:
    keys = []
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        kind = key.split(":", 1)[0] + ":" + key.rsplit(":", 1)[-1]
        length = int(client.xlen(key)) if client.type(key) == b"stream" else 0
        keys.append({"kind": kind, "memory": int(client.memory_usage(key) or 0), "xlen": length,
                     "ttl": int(client.ttl(key))})
    return keys


async def _turns(url: str, count: int, token: str) -> int:
    done = 0
    async with httpx.AsyncClient(timeout=60) as client:
        for index in range(count):
            sample, _ = await one_request(client, "ours", url, f"bench-{index}", token)
            done += sample is not None
    return done


def measure(*, turns: int, warmup: int, chunks: int, chunk_delay: float, first_delay: float) -> RedisTurn:
    model_args = ["--first-delay", str(first_delay), "--chunk-delay", str(chunk_delay), "--chunks", str(chunks)]
    token = mint_local_token(JWT_SECRET, user_id="bench-user", tenant_id="bench-tenant")
    with redis_server() as redis_url, started(["model", *model_args]) as (model,):
        with started(["ours", "--model-url", model.url, "--redis-url", redis_url,
                      *_store_args("memory", "", 5.0)]) as (ours,):
            client = redis.Redis.from_url(redis_url)
            try:
                asyncio.run(_turns(ours.url, warmup, token))
                client.flushall()
                info_in, info_out = _info_cost(client)
                client.config_resetstat()
                done = asyncio.run(_turns(ours.url, turns, token))
                if done != turns:
                    raise RuntimeError(f"only {done} of {turns} turns finished: {dict(failures)}")
                commands, bytes_in, bytes_out = _stats(client)
                result = RedisTurn(turns, commands, bytes_in - info_in, bytes_out - info_out, _kept_keys(client))
            finally:
                client.close()
    return result


def main(argv: Sequence[str] | None = None) -> RedisTurn:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--chunk-delay", type=float, default=0.01, help="model: seconds between chunks")
    parser.add_argument("--first-delay", type=float, default=0.2, help="model: seconds before the first chunk")
    parser.add_argument("--json", default="", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    config = {"turns": args.turns, "chunks": args.chunks, "chunk_delay_s": args.chunk_delay}
    result = measure(turns=args.turns, warmup=args.warmup, chunks=args.chunks, chunk_delay=args.chunk_delay,
                     first_delay=args.first_delay)
    print(result.markdown(config))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"config": config, **result.as_dict()}, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
