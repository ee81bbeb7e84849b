"""Redis stream keys of runs and threads.

Keys used together share a hash tag (the part in braces) so that they live on one cluster slot: the same code runs
on a single node and on ElastiCache Serverless, which is always in cluster mode. Kept apart from the Redis adapter
so that modules naming a stream do not import the Redis client (cold start).
"""

from __future__ import annotations


def run_stream_key(tenant_id: str, run_id: str) -> str:
    return f"run:{{{tenant_id}/{run_id}}}:events"


def thread_stream_key(tenant_id: str, thread_id: str) -> str:
    return f"thread:{{{tenant_id}/{thread_id}}}:events"


def run_control_key(tenant_id: str, run_id: str) -> str:
    """Signals to a run from any process (a cancel); its executing process blocks on reading it."""
    return f"run:{{{tenant_id}/{run_id}}}:control"
