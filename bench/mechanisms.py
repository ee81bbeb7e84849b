"""What each performance mechanism of the run path buys on the deployed platform: ``python -m bench.mechanisms``.

One request at a time (a Lambda environment serves one), each on a new thread, through the chat service and the
run service as the API route calls them: ``ChatService.start``, then the run's events as the response tails them
(the local feed), each framed as the SSE response frames it. The store is the contract-tested in-memory store with
every request answered after ``--store-ms`` (5 ms, DynamoDB in the same region), and so is the memory store; the
model sends its first token after ``--first-token-ms`` (300 ms, a fast real provider). Time to first text (TTFT)
is from the call of ``start`` to the first ``TEXT_MESSAGE_CONTENT`` frame; "bare" is the model alone (its first
chunk), the floor of any server.

Each mechanism is switched off in turn (only inside this process, by replacing the function that does it) and the
median TTFT is compared with all of them on. A mechanism is worth keeping when turning it off costs more than 2%.
Configurations are interleaved request by request, so drift on a shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from unittest import mock

from bench.overhead_servers import _delayed, _latency_store
from bench.stats import machine, markdown_table
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.event_json import dumps
from shared.llm.types import ChatChunk, ChatRequest
from shared.models import Identity
from shared.runs.admission import Admission
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings

CALLER = Identity(tenant_id="bench", user_id="bench")

Guard = contextlib.AbstractContextManager[Any]
Switch = Callable[[], Guard | None]


class FirstTokenModel(ScriptedModel):
    """An endless model whose first token comes after a fixed delay; records when each request was sent."""

    def __init__(self, first_token_s: float) -> None:
        super().__init__(fallback=lambda _request: Turn(text=["Hello", " there", "."]))
        self._first_token_s = first_token_s
        self.sent_at: list[float] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.sent_at.append(time.perf_counter())
        await asyncio.sleep(self._first_token_s)
        async for chunk in super().stream(request):
            yield chunk


def _services(store_s: float, model: FirstTokenModel) -> Services:
    return Services(
        make_settings(),
        overrides=ServiceOverrides(
            store=_latency_store(store_s),
            stream=InMemoryEventStream(),
            memory_store=_delayed(InMemoryMemoryStore(), store_s),
            model=model,
        ),
    )


def _body(thread: str) -> bytes:
    payload = {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": f"{thread}-u1", "role": "user", "content": "What should I drink with lunch?"}],
        "tools": [],
        "context": [],
        "state": {},
    }
    return json.dumps(payload).encode()


def _frame(entry: Any) -> str:
    """The SSE frame of an entry, as the route writes it: the stored JSON text when the stream kept it."""
    return f"id: {entry.id}\ndata: {entry.json if entry.json is not None else dumps(entry.event)}\n\n"


async def time_to_first_text(services: Services, model: FirstTokenModel, pre_model: list[float]) -> float:
    """One chat run on a new thread: seconds from ``start`` to the first text frame (and, into ``pre_model``, to the
    model request); the run then ends."""
    started = time.perf_counter()
    sent = len(model.sent_at)
    admission = await services.chat.start(CALLER, _body(f"th-{uuid.uuid4().hex[:12]}"))
    assert isinstance(admission, Admission)  # a new thread is never busy: nothing is queued
    first: float | None = None
    async for entry in services.runs.tail_run(CALLER.tenant_id, admission.run.run_id):
        if entry is None:
            continue
        frame = _frame(entry)
        if first is None and '"TEXT_MESSAGE_CONTENT"' in frame:
            first = time.perf_counter()
    await services.runs.wait_idle()
    if first is None:
        raise RuntimeError("the run streamed no text")
    pre_model.append(model.sent_at[sent] - started)
    return first - started


async def bare_first_text(first_token_s: float) -> float:
    model = FirstTokenModel(first_token_s)
    started = time.perf_counter()
    async for _chunk in model.stream(ChatRequest(model="m", messages=())):
        return time.perf_counter() - started
    raise RuntimeError("no chunk")


# The switches: each turns one mechanism off for the block it guards, by patching where the mechanism is used; None
# when the mechanism is not in this tree (removed: its measurement is in docs/benchmarks.md §8).


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block (the attribute as defined, descriptors included, restored)."""
    original = inspect.getattr_static(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _plain_gather() -> Guard | None:
    if importlib.util.find_spec("shared.gather_inline") is None:
        return None

    async def gather(*aws: Any) -> list[Any]:
        return list(await asyncio.gather(*aws, return_exceptions=True))

    stack = contextlib.ExitStack()
    for module in ("shared.runs.admission", "shared.runs.service", "shared.executors.worker"):
        with contextlib.suppress(AttributeError):
            stack.enter_context(mock.patch(f"{module}.gather_inline", gather))
    return stack


def _extra_loop_passes() -> Guard | None:
    """The loop-pass ordering brought the passes from the thread's claim to the model request from 11 to 4: off,
    the model request waits 7 passes more (emulated: the same passes, whatever the tree)."""
    original = FirstTokenModel.stream

    async def stream(self: FirstTokenModel, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        for _ in range(7):
            await asyncio.sleep(0)
        async for chunk in original(self, request):
            yield chunk

    return _replaced(FirstTokenModel, "stream", stream)


def _encode_every_time() -> Guard | None:
    """Each stream write and each SSE frame encodes the event again (decoded from the stream first), as before the
    pre-encoding."""
    event_json = importlib.import_module("shared.event_json")
    if not hasattr(event_json, "json_of"):
        return None
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch("shared.adapters.in_memory.stream.json_of", lambda event: dumps(dict(event))))
    stack.enter_context(mock.patch(f"{__name__}._frame", _frame_encoded_again))
    return stack


def _frame_encoded_again(entry: Any) -> str:
    return f"id: {entry.id}\ndata: {dumps(json.loads(dumps(entry.event)))}\n\n"


def _no_request_ahead() -> Guard | None:
    from shared.executors import head_start

    def open_nothing(self: Any, history: Any) -> None:
        return None

    return _replaced(head_start.HeadStart, "open", open_nothing)


def _no_note_beside_admission() -> Guard | None:
    from shared.executors import head_start

    async def read_nothing(self: Any) -> None:
        return None

    return _replaced(head_start.HeadStart, "read", read_nothing)


def _no_known_history() -> Guard | None:
    from shared.context_window import KnownHistory

    return _replaced(KnownHistory, "after_admission", classmethod(lambda cls, *a, **kw: None))


def _all_off() -> Guard | None:
    stack = contextlib.ExitStack()
    for _name, switch in SWITCHES[1:-1]:
        guard = switch()
        if guard is not None:
            stack.enter_context(guard)
    return stack


SWITCHES: list[tuple[str, Switch]] = [
    ("all on", contextlib.nullcontext),
    ("request sent ahead off (HeadStart.open)", _no_request_ahead),
    ("memory note beside admission off (HeadStart.read)", _no_note_beside_admission),
    ("first window from admission off (KnownHistory)", _no_known_history),
    ("inline gather off (asyncio.gather)", _plain_gather),
    ("loop-pass ordering off (7 passes more)", _extra_loop_passes),
    ("event pre-encoding off", _encode_every_time),
    ("all off", _all_off),
]


def present() -> list[tuple[str, Switch]]:
    """The switches of the mechanisms in this tree."""
    return [(name, switch) for name, switch in SWITCHES if switch() is not None]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import logging

    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


async def measure(
    requests: int, store_s: float, first_token_s: float
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """TTFT and time to the model request, by configuration."""
    model = FirstTokenModel(first_token_s)
    services = _services(store_s, model)
    switches = present()
    samples: dict[str, list[float]] = {name: [] for name, _ in switches}
    pre_model: dict[str, list[float]] = {name: [] for name, _ in switches}
    samples["bare"] = []
    for _name, switch in switches:  # warm-up: imports, first-use caches
        with switch() or contextlib.nullcontext():
            await time_to_first_text(services, model, [])
    for _ in range(requests):
        for name, switch in switches:
            with switch() or contextlib.nullcontext():
                samples[name].append(await time_to_first_text(services, model, pre_model[name]))
        samples["bare"].append(await bare_first_text(first_token_s))
    return samples, pre_model


def report(samples: dict[str, list[float]], pre_model: dict[str, list[float]], config: dict[str, Any]) -> str:
    base = statistics.median(samples["all on"])
    bare = statistics.median(samples["bare"])
    rows = []
    for name, values in samples.items():
        median = statistics.median(values)
        # Paired: each request against the all-on request of the same round (run back to back), so drift between
        # rounds cancels out.
        paired = statistics.median(v / on for v, on in zip(values, samples["all on"], strict=True))
        gain = "" if name in {"all on", "bare"} else f"{(paired - 1) * 100:+.1f}%"
        to_model = statistics.median(pre_model[name]) * 1000 if name in pre_model else 0.0
        rows.append([name, len(values), median * 1000, max(values) * 1000, to_model, f"{median / base:.3f}", gain,
                     f"{median / bare:.3f}"])
    removed = [name for name, switch in SWITCHES if switch() is None]
    table = markdown_table(
        ["configuration", "n", "TTFT p50 ms", "TTFT max ms", "model request p50 ms", "p50 / all on",
         "cost of turning it off (paired)",
         "p50 / bare"],
        rows,
    )
    gone = f"\n\nnot in this tree (removed; measured before, docs/benchmarks.md §8): {', '.join(removed)}"
    return f"machine: {machine()}\nconfig: {config}\n\n{table}" + (gone if removed else "")


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50, help="measured requests per configuration")
    parser.add_argument("--store-ms", type=float, default=5.0)
    parser.add_argument("--first-token-ms", type=float, default=300.0)
    parser.add_argument("--smoke", action="store_true", help="two requests per configuration, short delays")
    args = parser.parse_args(argv)
    requests, store_s, first_s = (
        (2, 0.001, 0.01) if args.smoke else (args.requests, args.store_ms / 1000, args.first_token_ms / 1000)
    )
    with _quiet(), contextlib.redirect_stdout(io.StringIO()):  # the runs' metric lines (EMF) go to stdout
        samples, pre_model = asyncio.run(measure(requests, store_s, first_s))
    config = {"requests": requests, "store_ms": store_s * 1000, "first_token_ms": first_s * 1000}
    print(report(samples, pre_model, config))
    return samples


if __name__ == "__main__":
    main()
