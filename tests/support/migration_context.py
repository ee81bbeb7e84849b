"""The Lambda context the migration function reads: the time left, which each call to it uses up by a fixed step, so a
test decides when the function must hand over to its next invocation."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LambdaContext:
    """What the handler reads of Lambda's context. Each ``get_remaining_time_in_millis`` call costs ``step_ms``."""

    remaining_ms: int
    invoked_function_arn: str
    step_ms: int = 0
    aws_request_id: str = "req-1"
    function_name: str = "agent-dev-migrate"
    memory_limit_in_mb: int = 512
    asked: int = field(default=0)

    def get_remaining_time_in_millis(self) -> int:
        remaining = self.remaining_ms - self.asked * self.step_ms
        self.asked += 1
        return remaining
