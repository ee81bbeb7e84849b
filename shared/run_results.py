"""What an executor reports when its run ends (usage, counts, timings).

It sits below both ``shared.runs`` and ``shared.executors`` so the run service, the metrics and the run-completed
publish read it without importing an executor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from shared.models import Usage


@dataclass
class ExecutionResult:
    usage: list[Usage] = field(default_factory=list)
    model_turns: int = 0
    tool_calls: int = 0
    tool_refusals: int = 0
    window_repairs: int = 0
    pending_tool_call_ids: list[str] = field(default_factory=list)
    """Front-end tool calls handed to the client, in call order; the run ended after the turn that made them."""
    cancelled: bool = False
    memory_note: str | None = None
    started_at: float = field(default_factory=time.monotonic)
    first_event_at: float | None = None
    finished_at: float | None = None

    @property
    def time_to_first_event_ms(self) -> float | None:
        return None if self.first_event_at is None else (self.first_event_at - self.started_at) * 1000

    @property
    def duration_ms(self) -> float:
        return ((self.finished_at or time.monotonic()) - self.started_at) * 1000
