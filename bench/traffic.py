"""A seeded, documented chat-traffic model for the input-token benchmark (``bench/input_tokens.py``).

Every number below is a parameter of :class:`TrafficConfig`; the same seed gives the same threads, byte for
byte. The model is deliberately simple and written down so that anyone can argue with it:

- **Light users** (``light_users``): a few sessions over the whole period (1-4 active days), 1-4 turns per
  session, turns 30-180 s apart.
- **Daily-burst users** (``burst_users``): on 80 % of days, one burst of 6-18 turns, 20-120 s apart.
- **Power users** (``power_users``): on 95 % of days, 2-5 bursts of 8-25 turns, 15-90 s apart; they use tools
  more often and get more of the long tool outputs.
- **A multi-day gap**: ``gap_fraction`` of all users go silent for 3-6 consecutive days somewhere in the period
  (the thread then resumes: today_yesterday sees nothing old, last-N sees the old turns).
- **Long tool outputs**: a share of tool calls return a document of 1,500-6,000 words (a search or page-read
  tool), the rest a short JSON (the clock).
- **Cancelled runs**: ``cancel_rate`` of tool-using runs end before the tool result is stored (a dangling call
  the window repairs).

A turn is one run: the user's message, optionally one or two tool calls with their results, and the answer.
Texts mix English and Chinese (as the product's users do) and are random words, which tokenise like text:
about one Qwen token per English word and per 1-2 Chinese characters. Sessions start between 08:00 and 23:00
Asia/Shanghai. Everything is UTC-aware.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from shared.models import ExecutionMeta, Message, Role, ToolCall

ZONE = ZoneInfo("Asia/Shanghai")

_EN = (
    "the a to of and in is it you that for on with as this be are was have not at or by from what can we about "
    "how do if will my your time when there which one all more some would like just so need could meeting "
    "report price order plan trip weather book project team code data file email schedule today tomorrow "
    "week month result issue change update send check find list show explain write summary draft review "
    "budget customer delivery account travel hotel flight dinner doctor school model server error log test"
).split()
_ZH = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面"
    "而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把"
    "性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质"
    "气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活"
    "设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则"
)


class UserKind(StrEnum):
    LIGHT = "light"
    BURST = "burst"
    POWER = "power"


@dataclass(frozen=True)
class TrafficConfig:
    seed: int = 7
    days: int = 14
    start: datetime = datetime(2025, 3, 3, tzinfo=ZONE)
    light_users: int = 60
    burst_users: int = 40
    power_users: int = 12
    gap_fraction: float = 0.25
    tool_rate: float = 0.25
    power_tool_rate: float = 0.45
    long_output_share: float = 0.15
    power_long_output_share: float = 0.3
    cancel_rate: float = 0.02

    @classmethod
    def smoke(cls) -> TrafficConfig:
        """A tiny configuration for ``make test``: a handful of users over four days."""
        return cls(days=4, light_users=3, burst_users=2, power_users=1, gap_fraction=0.34)


@dataclass(frozen=True)
class PlannedCall:
    """One model call of one run: the current message's ``seq`` and when the call is made."""

    user_id: str
    run_index: int
    at: datetime
    upto_seq: int


@dataclass
class UserThread:
    user_id: str
    kind: UserKind
    messages: list[Message] = field(default_factory=list)
    calls: list[PlannedCall] = field(default_factory=list)
    runs: int = 0

    def add(self, role: Role, content: str, at: datetime, **fields: object) -> Message:
        seq = len(self.messages) + 1
        msg = Message(
            id=f"{self.user_id}-m{seq}",
            thread_id=f"thread-{self.user_id}",
            role=role,
            content=content,
            seq=seq,
            created_at=at,
            meta=ExecutionMeta(),
            **fields,
        )
        self.messages.append(msg)
        return msg


@dataclass(frozen=True)
class Traffic:
    config: TrafficConfig
    threads: dict[str, UserThread]

    def calls_in_time_order(self) -> list[PlannedCall]:
        calls = [call for thread in self.threads.values() for call in thread.calls]
        calls.sort(key=lambda c: (c.at, c.user_id, c.upto_seq))
        return calls

    @property
    def runs(self) -> int:
        return sum(t.runs for t in self.threads.values())


class _Text:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def sentence(self, words: int) -> str:
        """About ``words`` tokens: English words, or Chinese characters in short runs (each run ~1 token)."""
        rng = self._rng
        if rng.random() < 0.5:
            return " ".join(rng.choice(_EN) for _ in range(words)).capitalize() + "."
        return "".join(rng.choice(_ZH) for _ in range(int(words * 1.4))) + "。"

    def paragraph(self, words: int) -> str:
        parts: list[str] = []
        left = words
        while left > 0:
            size = min(left, self._rng.randint(8, 24))
            parts.append(self.sentence(size))
            left -= size
        return " ".join(parts)


def _sessions(rng: random.Random, kind: UserKind, day: int, cfg: TrafficConfig) -> Iterator[tuple[int, int, int]]:
    """(start minute of day, turns, max gap seconds) per session on an active ``day``."""
    if kind is UserKind.BURST:
        if rng.random() < 0.8:
            yield rng.randint(9 * 60, 22 * 60), rng.randint(6, 18), 120
    elif kind is UserKind.POWER:
        if rng.random() < 0.95:
            for _ in range(rng.randint(2, 5)):
                yield rng.randint(8 * 60, 23 * 60), rng.randint(8, 25), 90
    else:
        yield rng.randint(8 * 60, 23 * 60), rng.randint(1, 4), 180


def _active_days(rng: random.Random, kind: UserKind, cfg: TrafficConfig) -> list[int]:
    days = list(range(cfg.days))
    if kind is UserKind.LIGHT:
        days = sorted(rng.sample(days, k=min(len(days), rng.randint(1, 4))))
    if rng.random() < cfg.gap_fraction and cfg.days >= 4:
        length = min(rng.randint(3, 6), cfg.days - 1)
        gap_start = rng.randint(1, cfg.days - length)
        days = [d for d in days if not gap_start <= d < gap_start + length]
    return days


def _run(thread: UserThread, rng: random.Random, text: _Text, at: datetime, cfg: TrafficConfig) -> datetime:
    """Store one run's messages and plan its model calls; returns when the run ended."""
    power = thread.kind is UserKind.POWER
    run_index = thread.runs
    thread.runs += 1
    user = thread.add(Role.USER, text.sentence(rng.randint(8, 60)), at)
    thread.calls.append(PlannedCall(thread.user_id, run_index, at, user.seq))
    now = at + timedelta(seconds=rng.uniform(0.5, 2.0))
    if rng.random() < (cfg.power_tool_rate if power else cfg.tool_rate):
        calls = [
            ToolCall(
                id=f"call-{thread.user_id}-{len(thread.messages)}-{i}",
                name="search_documents" if i else "get_current_time",
                arguments=json.dumps({"query": text.sentence(6)}) if i else '{"timezone": "Asia/Shanghai"}',
            )
            for i in range(rng.choice((1, 1, 2)))
        ]
        thread.add(Role.ASSISTANT, "", now, tool_calls=tuple(calls))
        if rng.random() < cfg.cancel_rate:
            return now  # cancelled mid-tool: the call stays without a result
        for call in calls:
            now += timedelta(seconds=rng.uniform(0.2, 3.0))
            if call.name == "get_current_time":
                result = json.dumps({"timezone": "Asia/Shanghai", "iso": now.astimezone(ZONE).isoformat()})
            elif rng.random() < (cfg.power_long_output_share if power else cfg.long_output_share):
                result = text.paragraph(rng.randint(1_500, 6_000))
            else:
                result = text.paragraph(rng.randint(60, 300))
            tool = thread.add(Role.TOOL, result, now, tool_call_id=call.id)
        thread.calls.append(PlannedCall(thread.user_id, run_index, now, tool.seq))  # the model reads the results
    now += timedelta(seconds=rng.uniform(1.0, 6.0))
    thread.add(Role.ASSISTANT, text.paragraph(rng.randint(30, 350)), now)
    return now


def generate(cfg: TrafficConfig) -> Traffic:
    """All users' threads and their planned model calls, reproducible from ``cfg.seed``."""
    rng = random.Random(cfg.seed)
    text = _Text(rng)
    kinds = (
        [UserKind.LIGHT] * cfg.light_users + [UserKind.BURST] * cfg.burst_users + [UserKind.POWER] * cfg.power_users
    )
    threads: dict[str, UserThread] = {}
    for index, kind in enumerate(kinds):
        user_id = f"{kind.value}-{index:03d}"
        thread = UserThread(user_id, kind)
        for day in _active_days(rng, kind, cfg):
            sessions = sorted(_sessions(rng, kind, day, cfg))
            last_end: datetime | None = None
            for minute, turns, max_gap in sessions:
                at = cfg.start + timedelta(days=day, minutes=minute, seconds=rng.uniform(0, 59))
                if last_end is not None and at <= last_end:
                    at = last_end + timedelta(seconds=rng.uniform(20, max_gap))
                for _ in range(turns):
                    last_end = _run(thread, rng, text, at, cfg)
                    at = last_end + timedelta(seconds=rng.uniform(15, max_gap))
        threads[user_id] = thread
    return Traffic(cfg, threads)


def describe(traffic: Traffic) -> dict[str, int]:
    """Counts for the report: users by kind, runs, stored messages, model calls."""
    out: dict[str, int] = {f"users_{k.value}": 0 for k in UserKind}
    for thread in traffic.threads.values():
        out[f"users_{thread.kind.value}"] += 1
    out["runs"] = traffic.runs
    out["messages"] = sum(len(t.messages) for t in traffic.threads.values())
    out["model_calls"] = sum(len(t.calls) for t in traffic.threads.values())
    return out
