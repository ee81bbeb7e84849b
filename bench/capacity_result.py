"""What ``python -m bench.capacity`` computes (:class:`CapacityResult`) and how far a measured count may drift from the
recorded one: the values the command builds and its report prints, apart from both so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.capacity_model import CpuFigures, Figures, HeldFollowers, Inputs, Line, Load, Platform, SizeRow

TOLERANCE = 0.05
"""How far a measured per-turn count may be from the recorded one before the model is out of date."""

COALESCED_TOLERANCE = 0.15
"""The same for the figures of the event streams (Redis commands and bytes, stream entries): deltas are written in
batches of a 50 ms window (docs/protocols/agent/sse-events.md §2), so how many events a turn writes depends on when
the model's tokens arrived, and a busy machine moves it by several percent from one run to the next. A change that
adds or removes a write per event still moves it by far more."""

_COALESCED = ("redis", "stream")


def tolerance_for(figure: str) -> float:
    """The drift allowed for ``figure``: :data:`COALESCED_TOLERANCE` for the event streams' figures."""
    return COALESCED_TOLERANCE if any(word in figure for word in _COALESCED) else TOLERANCE


@dataclass
class Drift:
    figure: str
    recorded: float
    measured: float

    @property
    def off(self) -> float:
        if self.recorded == self.measured:
            return 0.0
        return abs(self.measured - self.recorded) / max(abs(self.recorded), 1.0)


@dataclass
class CapacityResult:
    inputs: Inputs
    figures: Figures
    cpu: CpuFigures
    measured: bool
    per_turn: dict[str, float]
    lines: list[Line]
    loads: dict[float, list[Load]]
    sizes: list[SizeRow]
    platforms: dict[float, list[Platform]]
    crossovers: dict[str, float | None]
    followers: list[HeldFollowers] = field(default_factory=list)
    followers_break_even: int | None = None
    drift: list[Drift] = field(default_factory=list)

    @property
    def usd_per_1000(self) -> float:
        return sum(line.usd_per_1000 for line in self.lines)

    def drifted(self) -> list[Drift]:
        return [d for d in self.drift if d.off > tolerance_for(d.figure)]
