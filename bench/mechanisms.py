"""What each performance mechanism of the run path buys on the deployed platform: ``python -m bench.mechanisms``.

One request at a time (a Lambda environment serves one) through the bearer-token check, the chat service and the
run service as the API route calls them: the route's ``current_identity`` (``AUTH_MODE=jwks``: RS256 against a key
set served on localhost by :mod:`bench.jwks_issuer`, one token for every request, as a client reuses its token),
``ChatService.start``, then the run's events as the response tails them (the local feed), each framed as the SSE
response frames it. Each request is a new thread with one message, or with ``--history N`` the next user turn of a
thread that holds N user turns with their answers (one thread per configuration, realistic sizes, every message
its own text), so the run's window counts the tokens of a returning user's conversation. The store is the
contract-tested in-memory store with every request answered after ``--store-ms`` (5 ms, DynamoDB in the same
region), and so is the memory store; the model sends its first token after ``--first-token-ms`` (300 ms, a fast
real provider). Time to first text (TTFT) is from the token check to the first ``TEXT_MESSAGE_CONTENT`` frame;
"bare" is the model alone (its first chunk), the floor of any server.

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
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

from bench.jwks_issuer import local_issuer
from bench.overhead_servers import _delayed, _latency_store
from bench.stats import machine, markdown_table
from bench.traffic import _Text
from bench.turn_scenario import ANSWER_BYTES, ANSWER_TOKENS, USER_WORDS, _cut
from functions.agent_api.deps import current_identity
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.event_json import dumps
from shared.llm.types import ChatChunk, ChatRequest
from shared.models import Identity, Message, Role
from shared.runs.claims import Admission
from shared.wiring import ServiceOverrides, Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings

CALLER = Identity(tenant_id="bench", user_id="bench")

Guard = contextlib.AbstractContextManager[Any]
Switch = Callable[[], Guard | None]


class FirstTokenModel(ScriptedModel):
    """An endless model whose first token comes after a fixed delay; records when each request was sent. It answers
    with ``answer`` (set before each request), in pieces."""

    def __init__(self, first_token_s: float) -> None:
        super().__init__(fallback=lambda _request: Turn(text=list(self.answer)))
        self._first_token_s = first_token_s
        self.sent_at: list[float] = []
        self.answer: tuple[str, ...] = ("Hello", " there", ".")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.sent_at.append(time.perf_counter())
        await asyncio.sleep(self._first_token_s)
        async for chunk in super().stream(request):
            yield chunk


def _services(store_s: float, model: FirstTokenModel, auth: dict[str, Any]) -> Services:
    return Services(
        make_settings(**auth),
        overrides=ServiceOverrides(
            store=_latency_store(store_s),
            stream=InMemoryEventStream(),
            memory_store=_delayed(InMemoryMemoryStore(), store_s),
            model=model,
        ),
    )


def _body(thread: str, message_id: str, text: str = "What should I drink with lunch?") -> bytes:
    payload = {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:12]}",
        "messages": [{"id": message_id, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
    }
    return json.dumps(payload).encode()


class Conversation:
    """Texts of a returning user's thread, each its own and of the traffic's sizes (``bench.turn_scenario``: a
    34-word user message, a 931-byte answer)."""

    def __init__(self, seed: int = 13) -> None:
        self._text = _Text(random.Random(seed))

    def user(self) -> str:
        return self._text.sentence(USER_WORDS)

    def answer(self) -> str:
        return _cut(self._text.paragraph(2 * ANSWER_TOKENS), ANSWER_BYTES)


@dataclass
class Client:
    """The caller's side of the requests: its token (the same text every time) and, with a history, its thread for
    each configuration (seeded with ``history`` user turns and their answers, then one turn more per request)."""

    services: Services
    model: FirstTokenModel
    authorization: str
    history: int = 0
    texts: Conversation = field(default_factory=Conversation)
    threads: dict[str, list[int]] = field(default_factory=dict)

    def route_request(self) -> Any:
        """What the route's ``current_identity`` reads of the request: the app's services."""
        return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(services=self.services)))

    async def next_body(self, config: str) -> bytes:
        """The request of ``config``'s next turn; the model's answer to it is set here too (outside the timing)."""
        if not self.history:
            thread = f"th-{uuid.uuid4().hex[:12]}"
            return _body(thread, f"{thread}-u1")
        if config not in self.threads:
            await self._seed(config)
        turns = self.threads[config]
        turns[0] += 1
        answer = self.texts.answer()
        self.model.answer = tuple(answer[i : i + 64] for i in range(0, len(answer), 64))
        return _body(_thread_of(config), f"{_thread_of(config)}-u{turns[0]}", self.texts.user())

    async def _seed(self, config: str) -> None:
        thread = _thread_of(config)
        threads = self.services.thread_store
        await threads.open_thread(CALLER, thread)
        messages = []
        for i in range(self.history):
            messages.append(Message(id=f"{thread}-s{i}", thread_id=thread, role=Role.USER, content=self.texts.user()))
            messages.append(
                Message(id=f"{thread}-a{i}", thread_id=thread, role=Role.ASSISTANT, content=self.texts.answer())
            )
        await threads.append_messages(CALLER, thread, messages)
        self.threads[config] = [0]


def _thread_of(config: str) -> str:
    return "th-" + uuid.uuid5(uuid.NAMESPACE_URL, config).hex[:12]


def _frame(entry: Any) -> str:
    """The SSE frame of an entry, as the route writes it: the stored JSON text when the stream kept it."""
    return f"id: {entry.id}\ndata: {entry.json if entry.json is not None else dumps(entry.event)}\n\n"


async def time_to_first_text(client: Client, config: str, pre_model: list[float]) -> float:
    """One request of ``config``: seconds from the token check to the first text frame (and, into ``pre_model``, to
    the model request); the run then ends."""
    services, model = client.services, client.model
    body = await client.next_body(config)
    started = time.perf_counter()
    sent = len(model.sent_at)
    caller = await current_identity(client.route_request(), client.authorization)
    admission = await services.chat.start(caller, body)
    assert isinstance(admission, Admission)  # the thread's last run has ended: nothing is queued
    first: float | None = None
    async for entry in services.runs.tail_run(caller.tenant_id, admission.run.run_id):
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
# when the mechanism is not in this tree (removed: its measurement is in docs/benchmarks.md §8). A switch patches
# nothing until its guard is entered (``present`` calls every switch): a guard is a generator-based context manager
# or an unentered ``mock.patch``.


@contextlib.contextmanager
def _entered(guards: Callable[[], list[Guard]], *, missing_ok: bool = False) -> Iterator[None]:
    """The guards ``guards()`` makes, entered together when the block starts (those whose target is missing skipped
    with ``missing_ok``) and left when it ends."""
    with contextlib.ExitStack() as stack:
        for guard in guards():
            with contextlib.suppress(*((AttributeError,) if missing_ok else ())):
                stack.enter_context(guard)
        yield


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

    modules = ("shared.runs.admission", "shared.runs.service", "shared.executors.worker")
    return _entered(lambda: [mock.patch(f"{module}.gather_inline", gather) for module in modules], missing_ok=True)


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
    return _entered(
        lambda: [
            mock.patch("shared.adapters.in_memory.stream.json_of", lambda event: dumps(dict(event))),
            mock.patch(f"{__name__}._frame", _frame_encoded_again),
        ]
    )


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


def _no_verified_token_memory() -> Guard | None:
    """Every request's token is checked in full (in a worker thread, RS256, the key set from ``PyJWKClient``'s
    cache), as if ``TokenVerifier`` remembered none."""
    from shared.auth import TokenVerifier

    if not hasattr(TokenVerifier, "remembered"):
        return None
    return _replaced(TokenVerifier, "remembered", lambda self, authorization: None)


def _no_token_count_memory() -> Guard | None:
    """Every text of the run's window, system prompt and tool schemas goes through the tokenizer again."""
    from shared import tokens

    counted = getattr(tokens, "_qwen_count", None)
    if not hasattr(counted, "__wrapped__"):
        return None
    return mock.patch.object(tokens, "_qwen_count", counted.__wrapped__)  # type: ignore[union-attr]


def _all_off() -> Guard | None:
    return _entered(lambda: [guard for _name, switch in SWITCHES[1:-1] if (guard := switch()) is not None])


SWITCHES: list[tuple[str, Switch]] = [
    ("all on", contextlib.nullcontext),
    ("request sent ahead off (HeadStart.open)", _no_request_ahead),
    ("memory note beside admission off (HeadStart.read)", _no_note_beside_admission),
    ("first window from admission off (KnownHistory)", _no_known_history),
    ("inline gather off (asyncio.gather)", _plain_gather),
    ("loop-pass ordering off (7 passes more)", _extra_loop_passes),
    ("event pre-encoding off", _encode_every_time),
    ("verified-token memory off (TokenVerifier.remembered)", _no_verified_token_memory),
    ("token-count memory off (_qwen_count's lru_cache)", _no_token_count_memory),
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
    requests: int, store_s: float, first_token_s: float, history: int = 0
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """TTFT and time to the model request, by configuration."""
    switches = present()
    samples: dict[str, list[float]] = {name: [] for name, _ in switches}
    pre_model: dict[str, list[float]] = {name: [] for name, _ in switches}
    samples["bare"] = []
    with local_issuer() as issuer:
        model = FirstTokenModel(first_token_s)
        token = issuer.token(user_id=CALLER.user_id, tenant_id=CALLER.tenant_id)
        client = Client(_services(store_s, model, issuer.settings), model, f"Bearer {token}", history)
        for name, switch in switches:  # warm-up: imports, first-use caches, the key set, the token remembered
            with switch() or contextlib.nullcontext():
                await time_to_first_text(client, name, [])
        for _ in range(requests):
            for name, switch in switches:
                with switch() or contextlib.nullcontext():
                    samples[name].append(await time_to_first_text(client, name, pre_model[name]))
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
        rows.append(
            [
                name,
                len(values),
                median * 1000,
                max(values) * 1000,
                to_model,
                f"{median / base:.3f}",
                gain,
                f"{median / bare:.3f}",
            ]
        )
    removed = [name for name, switch in SWITCHES if switch() is None]
    table = markdown_table(
        [
            "configuration",
            "n",
            "TTFT p50 ms",
            "TTFT max ms",
            "model request p50 ms",
            "p50 / all on",
            "cost of turning it off (paired)",
            "p50 / bare",
        ],
        rows,
    )
    gone = f"\n\nnot in this tree (removed; measured before, docs/benchmarks.md §8): {', '.join(removed)}"
    return f"machine: {machine()}\nconfig: {config}\n\n{table}" + (gone if removed else "")


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50, help="measured requests per configuration")
    parser.add_argument("--store-ms", type=float, default=5.0)
    parser.add_argument("--first-token-ms", type=float, default=300.0)
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="user turns (with answers) already in each configuration's thread; 0: a new thread per request",
    )
    parser.add_argument("--smoke", action="store_true", help="two requests per configuration, short delays")
    args = parser.parse_args(argv)
    requests, store_s, first_s = (
        (2, 0.001, 0.01) if args.smoke else (args.requests, args.store_ms / 1000, args.first_token_ms / 1000)
    )
    with _quiet(), contextlib.redirect_stdout(io.StringIO()):  # the runs' metric lines (EMF) go to stdout
        samples, pre_model = asyncio.run(measure(requests, store_s, first_s, args.history))
    config = {
        "requests": requests,
        "store_ms": store_s * 1000,
        "first_token_ms": first_s * 1000,
        "history": args.history,
    }
    print(report(samples, pre_model, config))
    return samples


if __name__ == "__main__":
    main()
