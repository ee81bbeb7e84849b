"""The event stream (Redis) and the "run completed" events published for memory extraction (EventBridge)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.ports import EventStream
from shared.wiring.base import ProviderBase
from shared.wiring.overrides import overridable

if TYPE_CHECKING:
    from shared.memory.trigger import RunCompletedPublisher


class StreamProviders(ProviderBase):
    """What carries a run's events out of the process."""

    @overridable("stream")
    def stream(self) -> EventStream:
        """The runs' event streams: Redis at ``REDIS_URL``."""
        from shared.adapters.redis_stream import RedisEventStream, connect

        if not self.settings.redis_url:
            raise RuntimeError("REDIS_URL is not set (the local runner provides an embedded stream store)")
        client = connect(self.settings.redis_url, cluster=self.settings.redis_cluster_mode)
        return RedisEventStream(client, ttl_s=self.settings.event_stream_ttl_s)

    @overridable("run_completed_publisher")
    def run_completed_publisher(self) -> RunCompletedPublisher | None:
        """Publishes "run completed" to EventBridge for memory extraction; None when no bus is configured."""
        if not self.settings.event_bus_name:
            return None
        from shared.adapters.aws.clients import client_factory
        from shared.adapters.aws.eventbridge import EventBridgePublisher
        from shared.memory.trigger import RunCompletedPublisher

        return RunCompletedPublisher(
            EventBridgePublisher(
                self.settings.event_bus_name, client_factory("events", region=self.settings.aws_region)
            )
        )
