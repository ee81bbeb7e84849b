"""How a run ends, in the protocol's terms: the documented ``RUN_ERROR`` codes and messages, usage in AG-UI form,
and how long an ended run's stream is kept. Shared by the run service and the sweeper (which closes runs whose
process stopped), so neither imports the other for them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ag_ui.core import TokenUsage

from shared.models import Usage, merge_usage

RUN_STREAM_TTL_S = 24 * 3600

# The RUN_ERROR codes of docs/protocols/agent/errors.md §3, each with the sentence a person sees. Provider messages
# are never passed on (they may carry internals); any other failure is ``run_failed``.
RUN_ERROR_MESSAGES: dict[str, str] = {
    "model_rate_limited": "The model provider is rate-limiting requests; try again shortly.",
    "model_unavailable": "The model provider is unavailable; try again shortly.",
    "model_timeout": "The model did not answer in time.",
    "model_stream_interrupted": "The model's answer broke off.",
    "model_rejected_request": (
        "The model provider rejected the request; sending it again will not help until the cause is fixed."
    ),
    "run_failed": "The run failed.",
    "run_deadline": "The run took longer than its time limit.",
}


def usage_to_agui(usage: Sequence[Usage]) -> list[TokenUsage]:
    out: list[TokenUsage] = []
    for u in merge_usage(list(usage)):
        fields: dict[str, Any] = {
            "provider": u.provider,
            "model": u.model,
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
        }
        if u.reasoning_tokens:
            fields["reasoning_tokens"] = u.reasoning_tokens
        if u.cached_input_tokens:
            fields["cached_input_tokens"] = u.cached_input_tokens
        out.append(TokenUsage(**fields))
    return out
