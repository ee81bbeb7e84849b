"""An event's JSON, encoded once where the event is made and carried as is to the stream and into SSE frames.

An event used to be encoded for the run stream, again for the thread stream, and again for each SSE frame after
being decoded from the stream. Now the emitter encodes it once (:func:`encode_event`); the stream adapters store
that text, hand it back with what they read (``StreamEntry.json``), and the SSE framing writes it out unchanged.
The thread stream's copy differs only by ``metadata.runId``: it is the same text with the metadata object spliced
onto its end (the metadata alone is encoded; it is a few bytes).
"""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII kept as is (what the streams store and SSE frames carry)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class EncodedEvent(dict[str, Any]):
    """An event as a dict, carrying its JSON text in ``json``. Read-only by convention: the text is not updated
    when the dict is."""

    __slots__ = ("json",)

    def __init__(self, data: dict[str, Any], encoded: str) -> None:
        super().__init__(data)
        self.json = encoded


def json_of(event: dict[str, Any]) -> str:
    """The JSON text of ``event``: its own when it was encoded already, else encoded now."""
    return event.json if isinstance(event, EncodedEvent) else dumps(event)


def encode_event(
    data: dict[str, Any], *, thread_copy: bool = False, run_id: str | None = None
) -> tuple[EncodedEvent, EncodedEvent | None]:
    """``data`` encoded once, and, with ``thread_copy``, its thread-stream copy (``metadata.runId`` added).

    ``metadata`` is written last, so both copies share the text of everything else."""
    metadata = data.get("metadata")
    body = {k: v for k, v in data.items() if k != "metadata"}
    base = dumps(body)
    own = EncodedEvent(data, _with_metadata(base, metadata) if metadata is not None else base)
    if not thread_copy:
        return own, None
    tagged_metadata = {**(metadata or {}), "runId": run_id}
    tagged = EncodedEvent({**body, "metadata": tagged_metadata}, _with_metadata(base, tagged_metadata))
    return own, tagged


def _with_metadata(base: str, metadata: dict[str, Any]) -> str:
    inner = f'"metadata":{dumps(metadata)}'
    return f"{base[:-1]},{inner}}}" if base != "{}" else f"{{{inner}}}"
