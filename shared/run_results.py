"""What an executor reports when its run ends: a result (usage, counts, timings), or a failure with the usage so far.

It sits below both ``shared.runs`` and ``shared.executors`` so the run service, the metrics and the run-completed
publish read it without importing an executor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.models import Usage

INTERRUPTED = "interrupted"
"""A cancel's reason when a new message interrupts the run (the ``interrupt`` multitask strategy): the run's partial
answer is stored with ``ended_by: "interrupted"``."""


@dataclass
class ExecutionResult:
    """What an executor reports about a run: usage per model, counts of turns, calls and repairs, timings."""

    usage: list[Usage] = field(default_factory=list)
    model_turns: int = 0
    tool_calls: int = 0
    tool_refusals: int = 0
    window_repairs: int = 0
    pending_tool_call_ids: list[str] = field(default_factory=list)
    """Front-end tool calls handed to the client, in call order; the run ended after the turn that made them."""
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    """AG-UI ``Interrupt`` objects (wire form) of the calls held for approval; the run ended with them."""
    cancelled: bool = False
    suspended: bool = False
    """The run reached its slice's end between two steps: it goes on in a new invocation (``shared.runs.slices``)."""
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

    @property
    def memory_rejections(self) -> int:
        """Memory proposals the memory gate refused; 0 for runs that propose none (the memory result counts)."""
        return 0


class ExecutionFailed(Exception):
    """An executor failed after doing some of its work: the failure, and the usage of the model turns before it.

    The run service records that usage in the ledger and on the RUN_ERROR event, and maps ``cause`` (also the
    ``__cause__``) to the error code, as if the executor had raised it directly.
    """

    def __init__(self, cause: Exception, usage: Sequence[Usage]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.usage = list(usage)

    @staticmethod
    def unwrap(exc: Exception) -> tuple[Exception, list[Usage]]:
        """The failure itself and the usage before it, for any exception an executor raised."""
        if isinstance(exc, ExecutionFailed):
            return exc.cause, list(exc.usage)
        return exc, []
