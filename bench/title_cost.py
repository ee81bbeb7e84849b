"""What an automatic thread title costs: the title model's tokens and dollars, and the store requests per event.

``python -m bench.title_cost`` builds the title request (:func:`shared.titles.naming.title_request`, the prompt the
memory function sends) for typical first exchanges in five languages, plus the largest input the bounds allow (a
question of :data:`~shared.titles.naming.QUESTION_CHARS` and an answer start of
:data:`~shared.titles.naming.ANSWER_CHARS` characters, all CJK: about one token a character), and counts

- **input**: each message's text with the Qwen tokenizer (:func:`shared.tokens.count_tokens`) plus the chat
  template's framing per message (:data:`shared.tokens.MESSAGE_OVERHEAD_TOKENS`);
- **output**: the title a model would answer (the exchange's expected title) plus one end-of-turn token;

priced at the memory model's price (``qwen3.5-flash`` in :data:`shared.limits.usage.DEFAULT_PRICES`, the table the
usage API uses without ``MODEL_PRICES``). It then runs the real :class:`~shared.titles.job.ThreadTitler` on the
in-memory fakes (a model that records its request and answers the expected title) and counts the store requests
of the event that titles a thread, and of every later event on it (``InMemoryStore``'s meter counts the requests the
DynamoDB adapter sends for the same calls).

``--smoke`` runs two exchanges (what ``make test`` runs); ``--json`` prints the result as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass

from bench.stats import machine, markdown_table
from shared.adapters.in_memory.store import InMemoryStore
from shared.adapters.in_memory.stream import InMemoryEventStream
from shared.limits.usage import DEFAULT_PRICES, DEFAULT_PRICES_AS_OF
from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta
from shared.memory.job import MEMORY_PROFILE, RunCompleted
from shared.models import Identity, Message, Role, Usage
from shared.profiles import ProfileCatalog, default_catalog
from shared.titles.job import ThreadTitler
from shared.titles.naming import ANSWER_CHARS, QUESTION_CHARS, TITLE_MAX_TOKENS, title_request
from shared.tokens import MESSAGE_OVERHEAD_TOKENS, count_tokens, tokenizer_name

USER = Identity(tenant_id="bench", user_id="u")


@dataclass(frozen=True)
class Exchange:
    label: str
    question: str
    answer: str
    title: str


EXCHANGES = (
    Exchange(
        "en",
        "Can you help me plan a 5-day trip to Lisbon in May? I like food markets and museums, not nightlife.",
        "Here's a relaxed 5-day plan for Lisbon in May, built around markets and museums. Day 1: Baixa and the "
        "Time Out Market, then the Museu Nacional do Azulejo.",
        "Five days in Lisbon in May",
    ),
    Exchange(
        "de",
        "Welche Zimmerpflanzen vertragen wenig Licht und trockene Heizungsluft im Winter?",
        "Für dunkle Ecken und trockene Luft eignen sich vor allem robuste Arten: Zamioculcas, Bogenhanf und "
        "Efeutute brauchen wenig Licht und wenig Wasser.",
        "Pflanzen für dunkle Räume",
    ),
    Exchange(
        "zh",
        "我下个月要去杭州出差三天，晚上有空，有什么值得去的地方和好吃的推荐吗？",
        "杭州晚上很适合散步和吃东西：西湖边的北山街夜景很美，河坊街和胜利河美食街可以吃到葱包桧、片儿川和定胜糕。",
        "杭州出差夜游美食",
    ),
    Exchange(
        "es",
        "¿Cómo puedo explicar a mi hijo de 8 años por qué el cielo es azul?",
        "Puedes decirle que la luz del sol tiene todos los colores mezclados, y que el aire desvía mucho más el "
        "azul que los demás colores, así que lo vemos por todas partes.",
        "Por qué el cielo es azul",
    ),
    Exchange(
        "code",
        "Why does this Python code print the same list three times?\n\nrows = [[]] * 3\nrows[0].append(1)\nprint(rows)",
        "Because `[[]] * 3` makes a list holding the same inner list three times, not three lists. Appending "
        "to `rows[0]` changes that one list, which every slot refers to.",
        "Shared list in Python multiplication",
    ),
    Exchange(
        "bound",
        "请" * QUESTION_CHARS,
        "好" * ANSWER_CHARS,
        "二十个字符的中文标题" * 2,
    ),
)


@dataclass(frozen=True)
class TitleCost:
    label: str
    input_tokens: int
    output_tokens: int
    usd: float


@dataclass(frozen=True)
class StoreRequests:
    titling_event: int
    later_event: int


@dataclass(frozen=True)
class Result:
    tokenizer: str
    price_as_of: str
    model: str
    costs: list[TitleCost]
    store: StoreRequests


@functools.cache
def _catalog() -> ProfileCatalog:
    return default_catalog()


def request_for(exchange: Exchange) -> ChatRequest:
    model = _catalog().get(MEMORY_PROFILE).model.name
    return title_request(model, exchange.question, exchange.answer)


def cost_of(exchange: Exchange) -> TitleCost:
    request = request_for(exchange)
    price = DEFAULT_PRICES[request.model]
    tokens_in = sum(count_tokens(m.content or "") + MESSAGE_OVERHEAD_TOKENS for m in request.messages)
    tokens_out = min(count_tokens(exchange.title) + 1, TITLE_MAX_TOKENS)
    usd = (tokens_in * price.input + tokens_out * price.output) / 1e6
    return TitleCost(exchange.label, tokens_in, tokens_out, usd)


class AnsweringModel:
    """Answers every title request with ``title``, its usage counted with the tokenizer."""

    provider = "bench"

    def __init__(self, title: str) -> None:
        self._title = title

    async def list_models(self) -> list[str]:
        return ["bench"]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        yield TextDelta(self._title)
        prompt = sum(count_tokens(m.content or "") + MESSAGE_OVERHEAD_TOKENS for m in request.messages)
        usage = Usage(model=request.model, input_tokens=prompt, output_tokens=count_tokens(self._title) + 1)
        yield Finished(reason="stop", usage=usage)


async def store_requests(exchange: Exchange) -> StoreRequests:
    """The store requests of the run-completed event that titles a thread, and of a later one (limits off)."""
    store = InMemoryStore()
    await store.threads.open_thread(USER, "th")
    await store.threads.append_messages(
        USER,
        "th",
        [
            Message(id="q", thread_id="th", role=Role.USER, content=exchange.question),
            Message(id="a", thread_id="th", role=Role.ASSISTANT, content=exchange.answer),
        ],
    )
    titler = ThreadTitler(
        threads=store.threads,
        model=AnsweringModel(exchange.title),
        profiles=_catalog(),
        stream=InMemoryEventStream(),
    )
    counts = []
    for run_id in ("r1", "r2"):
        before = store.request_count
        report = await titler.on_run_completed(
            RunCompleted(
                tenant_id=USER.tenant_id, user_id=USER.user_id, thread_id="th", run_id=run_id, status="succeeded"
            )
        )
        assert report.status == ("titled" if run_id == "r1" else "skipped"), report
        counts.append(store.request_count - before)
    return StoreRequests(*counts)


def run(smoke: bool) -> Result:
    exchanges: Sequence[Exchange] = EXCHANGES[:2] if smoke else EXCHANGES
    model = request_for(exchanges[0]).model
    return Result(
        tokenizer=tokenizer_name(),
        price_as_of=DEFAULT_PRICES_AS_OF,
        model=model,
        costs=[cost_of(e) for e in exchanges],
        store=asyncio.run(store_requests(exchanges[0])),
    )


def report(result: Result) -> str:
    price = DEFAULT_PRICES[result.model]
    typical = [c for c in result.costs if c.label != "bound"]
    mean_usd = sum(c.usd for c in typical) / len(typical)
    rows: list[list[object]] = [
        [c.label, c.input_tokens, c.output_tokens, f"{c.usd * 1e6:.1f}", f"{c.usd * 1e3:.4f}"] for c in result.costs
    ]
    return "\n".join(
        [
            f"machine: {machine()}; tokenizer: {result.tokenizer}",
            f"model: {result.model} at ${price.input}/M input, ${price.output}/M output (prices as of "
            f"{result.price_as_of})",
            "",
            markdown_table(
                ["exchange", "input tokens", "output tokens", "USD per million titles", "USD per 1,000"], rows
            ),
            "",
            f"typical exchanges: ${mean_usd * 1e3:.4f} per 1,000 titles (one per thread)",
            f"store requests: {result.store.titling_event} for the event that titles a thread, "
            f"{result.store.later_event} for each later event on it",
        ]
    )


def main(argv: Sequence[str] | None = None) -> Result:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="two exchanges (what make test runs)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run(args.smoke)
    print(json.dumps(asdict(result), indent=2) if args.json else report(result))
    if not args.json:
        print(f"({time.perf_counter() - started:.1f} s)")
    return result


if __name__ == "__main__":
    main()
