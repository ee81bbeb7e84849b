"""A model of a provider's implicit prompt-prefix cache, for billed-input estimates.

What DashScope publishes for its implicit cache (Model Studio, "Context cache"): the common prefix of requests
is cached automatically; the part of the input served from the cache is billed at 20 % of the input price; a
prefix needs at least 256 tokens (international site; the Beijing site says 1,024) to be cacheable; the validity
period is *not* published ("the system periodically clears unused cache data"). Its explicit cache lives 5
minutes and each hit resets the clock, so this model's default TTL is 5 minutes, reset on hit; pass another TTL
to see how sensitive the result is.

Granularity: a request is a list of segments (the shared system prompt plus tool specs of the day, then one
segment per message). A hit is the longest run of leading segments that matches a cached request still alive;
a partially matching message counts as a miss (slightly pessimistic for every policy alike).

Scope: the system-prompt segment is the same for every user of the deployment, so it is shared across threads
(any request in the last TTL keeps it warm); message segments only ever match within their own thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CacheParams:
    ttl_s: float = 300.0
    hit_price: float = 0.2
    """Price of a cached input token relative to an uncached one (DashScope implicit cache: 20 %)."""
    min_tokens: int = 256
    """Shortest cacheable prefix."""


@dataclass(frozen=True)
class Request:
    """One model call's input as segments: ``keys[0]`` is the shared prefix, the rest are message ids."""

    thread: str
    at_s: float
    keys: tuple[str, ...]
    tokens: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.tokens)

    def with_segment(self, at: int, key: str, tokens: int) -> Request:
        """This request with one more segment at position ``at`` (a per-run note: where it sits decides how much
        of the prompt the next run can match)."""
        keys = (*self.keys[:at], key, *self.keys[at:])
        return Request(self.thread, self.at_s, keys, (*self.tokens[:at], tokens, *self.tokens[at:]))


@dataclass
class _Entry:
    keys: tuple[str, ...]
    cumulative: list[int]
    last_used_s: float


@dataclass
class PromptCache:
    params: CacheParams
    _shared: dict[str, float] = field(default_factory=dict)
    _threads: dict[str, list[_Entry]] = field(default_factory=dict)

    def serve(self, request: Request) -> int:
        """Cached tokens of ``request`` (requests must come in time order); the request is cached afterwards."""
        now, ttl = request.at_s, self.params.ttl_s
        entries = [e for e in self._threads.get(request.thread, []) if e.last_used_s + ttl >= now]
        best, best_entry = 0, None
        prefix_key = request.keys[0]
        shared_at = self._shared.get(prefix_key)
        if shared_at is not None and shared_at + ttl >= now:
            best = request.tokens[0]
        for entry in entries:
            matched = _common_prefix(entry.keys, request.keys)
            if matched and entry.cumulative[matched - 1] > best:
                best, best_entry = entry.cumulative[matched - 1], entry
        if best_entry is not None:
            best_entry.last_used_s = now
        self._shared[prefix_key] = now
        cumulative: list[int] = []
        running = 0
        for tokens in request.tokens:
            running += tokens
            cumulative.append(running)
        entries.append(_Entry(request.keys, cumulative, now))
        self._threads[request.thread] = entries
        return best if best >= self.params.min_tokens else 0

    def billed(self, request: Request) -> tuple[int, float]:
        """(cached tokens, billed input in uncached-token equivalents)."""
        cached = self.serve(request)
        return cached, (request.total - cached) + cached * self.params.hit_price


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    count = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        count += 1
    return count
