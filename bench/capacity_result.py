"""What ``python -m bench.capacity`` computes (:class:`CapacityResult`) and how far a measured count may drift from the
recorded one: the values the command builds and its report prints, apart from both so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.capacity_model import CpuFigures, Figures, Inputs, Line, Load, Platform, SizeRow

TOLERANCE = 0.05
"""How far a measured per-turn count may be from the recorded one before the model is out of date."""


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
    drift: list[Drift] = field(default_factory=list)

    @property
    def usd_per_1000(self) -> float:
        return sum(line.usd_per_1000 for line in self.lines)

    def drifted(self, tolerance: float = TOLERANCE) -> list[Drift]:
        return [d for d in self.drift if d.off > tolerance]
