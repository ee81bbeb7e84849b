"""The webhook function is sized to its worst batch, computed from template.yaml and the code's bounds.

Worst case of one batch: every record's run names its own target and its tenant registered the most targets
(``shared.webhooks.admin.MAX_TARGETS``), each one sent in turn and each taking the whole ``WEBHOOK_TIMEOUT_S``. The
function's timeout must cover that plus each record's reads and writes (the ledger, the registry, the secret, an
audit record per target, the backoff); a timeout shorter than that fails the whole batch, and every record of it is
sent again. The queue's visibility timeout must stay at least 6x the function timeout plus the batching window.
Reads the raw template (no SAM tools needed).
"""

from __future__ import annotations

from typing import Any

from shared.settings import Settings
from shared.webhooks.admin import MAX_TARGETS

from .test_memory_function_sizing import template

OVERHEAD_PER_RECORD_S = 10.0
"""The run's and the registry's GetItem, the secret (read, or created on the tenant's first webhook), the URL checks'
name lookups, an audit PutItem per target and the backoff's ChangeMessageVisibility, generously."""


def webhook_function_settings(tpl: dict[str, Any]) -> Settings:
    """The settings the webhook function runs with: Globals' variables, its own on top, the defaults beneath."""
    globals_env = tpl.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    own_env = tpl["Resources"]["WebhookFunction"]["Properties"].get("Environment", {}).get("Variables", {})
    env = {name: str(value) for name, value in {**globals_env, **own_env}.items() if isinstance(value, str | int)}
    return Settings.from_env(env)


def test_the_webhook_function_timeout_covers_its_worst_batch() -> None:
    tpl = template()
    function = tpl["Resources"]["WebhookFunction"]["Properties"]
    source = function["Events"]["RunEnded"]["Properties"]
    settings = webhook_function_settings(tpl)
    assert settings.webhook_timeout_s == 5.0  # the function's own WEBHOOK_TIMEOUT_S, not only the default
    targets_per_record = 1 + MAX_TARGETS  # the run's forwardedProps.webhook and the tenant's registered targets
    worst_record_s = targets_per_record * settings.webhook_timeout_s + OVERHEAD_PER_RECORD_S
    worst_batch_s = source["BatchSize"] * worst_record_s
    assert worst_batch_s <= function["Timeout"], (worst_batch_s, function["Timeout"])
    # AND the timeout is not wildly larger than the work (a stuck batch would hold its records that long)
    assert function["Timeout"] <= 2 * worst_batch_s


def test_the_webhook_queue_visibility_is_at_least_six_times_the_function_timeout() -> None:
    tpl = template()
    function = tpl["Resources"]["WebhookFunction"]["Properties"]
    window = function["Events"]["RunEnded"]["Properties"].get("MaximumBatchingWindowInSeconds", 0)
    visibility = tpl["Resources"]["WebhookQueue"]["Properties"]["VisibilityTimeout"]
    assert visibility >= 6 * function["Timeout"] + window
