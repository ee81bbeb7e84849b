"""Scores memory extraction on the labelled cases in ``eval/memory/cases.jsonl``.

Run against any OpenAI-compatible endpoint::

    python -m devtools.memory_evaluation --base-url https://dashscope.aliyuncs.com/compatible-mode/v1 \\
        --api-key "$KEY" --model qwen3.5-flash

or, offline (CI), with ``--scripted``: the model is replaced by one that answers each case with the case's
recorded ``proposals`` (good ones and adversarial ones a sloppy model makes). Scripted numbers therefore measure
the **harness and the deterministic gate**, not a model: they show which junk the gate stops and which it
cannot (a hypothetical or a third party's fact quoted correctly from a user message gets through; only the
model can avoid those).

Each case runs the real :class:`~shared.memory.executor.MemoryExecutor` and :class:`~shared.memory.gate.MemoryGate`
on an in-memory store seeded with the case's existing memories and cursor. Every *stored* write is classified
as correct (matches an expected write's keywords), duplicate (matches an existing memory or an already matched
expected write) or junk (anything else). Metrics:

- write precision = correct / stored, write recall = correct / expected;
- junk-write rate = junk / stored, duplicate rate = duplicates / stored (the three shares add up to 1);
- wrong-forget rate = memories deactivated (forget or supersede) that the case did not expect / all deactivated;
- tokens per extraction = model input + output tokens / cases in which the model was called (estimated in
  scripted mode); input tokens per extraction = the model input alone (every model turn of the run).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import sys
import unicodedata
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from devtools.harness import fraction, threshold_verdict
from shared.adapters.in_memory.memories import InMemoryMemoryStore
from shared.executors.context import RunContext
from shared.llm.types import ChatChunk, ChatRequest, Finished, TextDelta, ToolCallDelta
from shared.memory.executor import MemoryExecutor
from shared.memory.job import MEMORY_PROFILE
from shared.memory.models import Memory, MemoryKind
from shared.memory.text import near_duplicate
from shared.models import AuditRecord, ExecutionMeta, ExecutorKind, Identity, Message, Origin, Role, Usage
from shared.ports import StreamEntry
from shared.ports.model import ChatModel
from shared.profiles import ExecutionProfile, default_catalog
from shared.run_events.emitter import RunEmitter
from shared.settings import Settings
from shared.tokens import estimate_tokens

DEFAULT_CASES = Path(__file__).resolve().parents[1] / "eval" / "memory" / "cases.jsonl"
TENANT, USER, OTHER_USER, THREAD = "eval-tenant", "eval-user", "eval-other-user", "eval-thread"


# ---- the case format ---------------------------------------------------------------------------------------


class CaseMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    role: Role
    content: str
    processed: bool = False
    """Already read by an earlier extraction (before the cursor); processed messages come first."""
    origin: Origin = Origin.CHAT


class CaseMemory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    kind: MemoryKind = MemoryKind.PROFILE
    content: str
    user: Literal["self", "other"] = "self"
    match: list[str] = Field(default_factory=list)
    """Keywords that identify a new write as a duplicate of this memory (empty: text similarity)."""


class CaseProposal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any]


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    writes: list[list[str]] = Field(default_factory=list)
    """One keyword list per expected new memory; a stored memory matches when it contains every keyword."""
    forgets: list[str] = Field(default_factory=list)
    """Existing memory ids expected to end up superseded or retracted."""


class EvalCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    lang: Literal["en", "zh"]
    category: Literal["new_fact", "update", "retraction", "junk", "duplicate", "low_confidence", "memory_echo"]
    note: str = ""
    existing: list[CaseMemory] = Field(default_factory=list)
    messages: list[CaseMessage]
    expect: Expectation = Field(default_factory=Expectation)
    proposals: list[CaseProposal] = Field(default_factory=list)
    """What a model proposed for this case (replayed by ``--scripted``)."""


def load_cases(path: Path = DEFAULT_CASES) -> list[EvalCase]:
    cases = [EvalCase.model_validate_json(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError("case ids must be unique")
    return cases


# ---- in-memory stand-ins for the thread, the audit log and the event stream ---------------------------------


class CaseThread:
    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = sorted(messages, key=lambda m: m.seq)

    async def read_back(self, tenant_id: str, thread_id: str, *, before_seq: int | None, limit: int) -> list[Message]:
        older = [m for m in self._messages if before_seq is None or m.seq < before_seq]
        return list(reversed(older))[:limit]

    async def read_forward(self, tenant_id: str, thread_id: str, *, after_seq: int, limit: int) -> list[Message]:
        return [m for m in self._messages if m.seq > after_seq][:limit]


class ListAuditLog:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    async def record(self, record: AuditRecord) -> None:
        self.records.append(record)

    async def list_for_thread(self, tenant_id: str, thread_id: str, *, limit: int) -> list[AuditRecord]:
        return [r for r in self.records if r.thread_id == thread_id][:limit]


class ListStream:
    def __init__(self) -> None:
        self.entries: list[StreamEntry] = []

    async def append(self, key: str, event: dict[str, Any]) -> str:
        self.entries.append(StreamEntry(id=f"{len(self.entries) + 1}-0", event=event))
        return self.entries[-1].id

    async def read_after(self, key: str, after_id: str, *, block_ms: int, count: int = 100) -> list[StreamEntry]:
        return []

    async def expire(self, key: str, seconds: int) -> None:
        return None


class ReplayModel:
    """Answers each case with its recorded proposals, then "done" once it has seen the tool results."""

    provider = "scripted"

    def __init__(self) -> None:
        self.proposals: list[CaseProposal] = []

    async def list_models(self) -> list[str]:
        return ["scripted"]

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        prompt = " ".join(m.content or "" for m in request.messages) + json.dumps([t.parameters for t in request.tools])
        if any(m.role == "tool" for m in request.messages) or not self.proposals:
            answer = "done" if any(m.role == "tool" for m in request.messages) else "none"
            yield TextDelta(answer)
            yield Finished("stop", _estimated(request.model, prompt, answer))
            return
        written = ""
        for index, proposal in enumerate(self.proposals):
            arguments = json.dumps(proposal.arguments, ensure_ascii=False)
            written += proposal.tool + arguments
            yield ToolCallDelta(index=index, id=f"call_{index}", name=proposal.tool, arguments=arguments)
        yield Finished("tool_calls", _estimated(request.model, prompt, written))


def _estimated(model: str, prompt: str, output: str) -> Usage:
    return Usage(
        provider="scripted",
        model=model,
        input_tokens=estimate_tokens(prompt),
        output_tokens=estimate_tokens(output),
        estimated=True,
    )


# ---- running and scoring -----------------------------------------------------------------------------------


@dataclass
class CaseResult:
    case: EvalCase
    stored: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)
    merges: int = 0
    merge_reasons: list[str] = field(default_factory=list)
    tokens: int = 0
    input_tokens: int = 0
    model_called: bool = False
    estimated_tokens: bool = False
    error: str | None = None
    correct: int = 0
    junk: int = 0
    duplicates: int = 0
    wrong_forgets: int = 0
    right_forgets: int = 0


@functools.cache
def _memory_profile() -> ExecutionProfile:
    return default_catalog().get(MEMORY_PROFILE)


def _has_keywords(text: str, keywords: Sequence[str]) -> bool:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return all(unicodedata.normalize("NFKC", k).casefold() in folded for k in keywords)


def _classify(result: CaseResult) -> None:
    case = result.case
    pending = list(case.expect.writes)
    matched: list[list[str]] = []
    for content in result.stored:
        expected = next((kw for kw in pending if _has_keywords(content, kw)), None)
        if expected is not None:
            pending.remove(expected)
            matched.append(expected)
            result.correct += 1
            continue
        duplicate_of_existing = any(
            (_has_keywords(content, m.match) if m.match else near_duplicate(content, m.content)[0])
            for m in case.existing
            if m.user == "self"
        )
        if duplicate_of_existing or any(_has_keywords(content, kw) for kw in matched):
            result.duplicates += 1
        else:
            result.junk += 1
    for memory_id in result.deactivated:
        if memory_id in case.expect.forgets:
            result.right_forgets += 1
        else:
            result.wrong_forgets += 1


async def run_case(case: EvalCase, model: ChatModel, *, threshold: float, model_name: str | None = None) -> CaseResult:
    result = CaseResult(case)
    store = InMemoryMemoryStore()
    for seeded in case.existing:
        await store.put(
            Memory(
                id=seeded.id,
                tenant_id=TENANT,
                user_id=USER if seeded.user == "self" else OTHER_USER,
                kind=seeded.kind,
                content=seeded.content,
                confidence=0.9,
                evidence_quote=seeded.content,
                source_message_ids=("earlier",),
            )
        )
    messages = [
        Message(
            id=m.id,
            thread_id=THREAD,
            role=m.role,
            content=m.content,
            seq=i + 1,
            meta=ExecutionMeta(origin=m.origin),
            tool_call_id="call_x" if m.role is Role.TOOL else None,
        )
        for i, m in enumerate(case.messages)
    ]
    processed = [i + 1 for i, m in enumerate(case.messages) if m.processed]
    if processed != list(range(1, len(processed) + 1)):
        raise ValueError(f"{case.id}: processed messages must come first")
    if processed:
        await store.advance_cursor(TENANT, THREAD, processed[-1])
    if isinstance(model, ReplayModel):
        model.proposals = list(case.proposals)
    profile = _memory_profile()
    ctx = RunContext(
        identity=Identity(tenant_id=TENANT, user_id=USER),
        thread_id=THREAD,
        run_id=f"eval-{case.id}",
        profile=profile,
        meta=ExecutionMeta(
            origin=Origin.AUTOMATION,
            executor=ExecutorKind.MEMORY,
            execution_profile_name=profile.name,
            hidden_from_user=True,
        ),
    )
    executor = MemoryExecutor(
        model, CaseThread(messages), store, ListAuditLog(), confidence_threshold=threshold, model_name=model_name
    )
    try:
        outcome = await executor.execute(ctx, RunEmitter(ListStream(), f"run:eval-{case.id}"))
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        return result
    result.model_called = outcome.model_turns > 0
    result.tokens = sum(u.input_tokens + u.output_tokens for u in outcome.usage)
    result.input_tokens = sum(u.input_tokens for u in outcome.usage)
    result.estimated_tokens = any(u.estimated for u in outcome.usage)
    for decision in outcome.outcomes:
        if decision.decision == "stored" and decision.memory_id is not None:
            memory = await store.get(TENANT, USER, decision.memory_id)
            if memory is not None:
                result.stored.append(memory.content)
        elif decision.decision == "merged":
            result.merges += 1
            result.merge_reasons.append(decision.reason)
        elif decision.decision == "rejected":
            result.rejections.append(decision.reason)
    seeded_ids = {m.id for m in case.existing}
    for memory in await store.list_memories(TENANT, USER, include_inactive=True):
        if memory.id in seeded_ids and not memory.is_active:
            result.deactivated.append(memory.id)
    _classify(result)
    return result


@dataclass(frozen=True)
class Metrics:
    cases: int
    stored: int
    expected: int
    correct: int
    junk: int
    duplicates: int
    deactivated: int
    wrong_forgets: int
    expected_forgets: int
    right_forgets: int
    extractions: int
    tokens: int
    input_tokens: int
    estimated_tokens: bool
    errors: int
    merges: int
    merge_reasons: dict[str, int]
    rejections: dict[str, int]

    @staticmethod
    def _ratio(num: int, den: int) -> float | None:
        return num / den if den else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "write_precision": self._ratio(self.correct, self.stored),
            "write_recall": self._ratio(self.correct, self.expected),
            "junk_write_rate": self._ratio(self.junk, self.stored),
            "duplicate_rate": self._ratio(self.duplicates, self.stored),
            "wrong_forget_rate": self._ratio(self.wrong_forgets, self.deactivated),
            "forget_recall": self._ratio(self.right_forgets, self.expected_forgets),
            "tokens_per_extraction": self.tokens / self.extractions if self.extractions else None,
            "input_tokens_per_extraction": self.input_tokens / self.extractions if self.extractions else None,
            "input_tokens_total": self.input_tokens,
            "tokens_estimated": self.estimated_tokens,
            "stored_writes": self.stored,
            "errors": self.errors,
            "merged_duplicates": self.merges,
            "merges": self.merge_reasons,
            "rejections": self.rejections,
        }


def score(results: Sequence[CaseResult]) -> Metrics:
    return Metrics(
        cases=len(results),
        stored=sum(len(r.stored) for r in results),
        expected=sum(len(r.case.expect.writes) for r in results),
        correct=sum(r.correct for r in results),
        junk=sum(r.junk for r in results),
        duplicates=sum(r.duplicates for r in results),
        deactivated=sum(len(r.deactivated) for r in results),
        wrong_forgets=sum(r.wrong_forgets for r in results),
        expected_forgets=sum(len(r.case.expect.forgets) for r in results),
        right_forgets=sum(r.right_forgets for r in results),
        extractions=sum(1 for r in results if r.model_called),
        tokens=sum(r.tokens for r in results),
        input_tokens=sum(r.input_tokens for r in results),
        estimated_tokens=any(r.estimated_tokens for r in results),
        errors=sum(1 for r in results if r.error),
        merges=sum(r.merges for r in results),
        merge_reasons=dict(Counter(reason for r in results for reason in r.merge_reasons).most_common()),
        rejections=dict(Counter(reason for r in results for reason in r.rejections).most_common()),
    )


def render(metrics: Metrics, results: Sequence[CaseResult], *, mode: str, threshold: float) -> str:
    def pct(num: int, den: int) -> str:
        return f"{num / den:6.3f}  ({num}/{den})" if den else "   n/a  (0/0)"

    tokens = f"{metrics.tokens / metrics.extractions:8.1f}" if metrics.extractions else "     n/a"
    inputs = f"{metrics.input_tokens / metrics.extractions:8.1f}" if metrics.extractions else "     n/a"
    lines = [
        f"memory extraction evaluation: {metrics.cases} cases, {mode}, confidence threshold {threshold:.2f}",
        "",
        f"{'metric':<24}value",
        f"{'write precision':<24}{pct(metrics.correct, metrics.stored)}",
        f"{'write recall':<24}{pct(metrics.correct, metrics.expected)}",
        f"{'junk-write rate':<24}{pct(metrics.junk, metrics.stored)}",
        f"{'duplicate rate':<24}{pct(metrics.duplicates, metrics.stored)}",
        f"{'wrong-forget rate':<24}{pct(metrics.wrong_forgets, metrics.deactivated)}",
        f"{'forget recall':<24}{pct(metrics.right_forgets, metrics.expected_forgets)}",
        f"{'tokens per extraction':<24}{tokens}"
        + ("  (estimated)" if metrics.estimated_tokens else "")
        + f"  ({metrics.extractions} model extractions)",
        f"{'input tokens per extr.':<24}{inputs}" + ("  (estimated)" if metrics.estimated_tokens else "")
        + f"  ({metrics.input_tokens} in all)",
        f"{'merged, not added':<24}{metrics.merges:>6}",
        f"{'errors':<24}{metrics.errors:>6}",
        "",
        "merged by the gate: " + (", ".join(f"{reason} {n}" for reason, n in metrics.merge_reasons.items()) or "none"),
        "rejected by the gate: " + (", ".join(f"{reason} {n}" for reason, n in metrics.rejections.items()) or "none"),
        "",
        f"{'category':<16}{'cases':>6}{'expected':>10}{'stored':>8}{'correct':>9}{'junk':>6}{'dup':>5}"
        f"{'forgets':>9}{'wrong':>7}",
    ]
    by_category: dict[str, list[CaseResult]] = {}
    for result in results:
        by_category.setdefault(result.case.category, []).append(result)
    for category, group in sorted(by_category.items()):
        lines.append(
            f"{category:<16}{len(group):>6}{sum(len(r.case.expect.writes) for r in group):>10}"
            f"{sum(len(r.stored) for r in group):>8}{sum(r.correct for r in group):>9}"
            f"{sum(r.junk for r in group):>6}{sum(r.duplicates for r in group):>5}"
            f"{sum(len(r.deactivated) for r in group):>9}{sum(r.wrong_forgets for r in group):>7}"
        )
    misses = [r for r in results if r.junk or r.duplicates or r.wrong_forgets or r.error]
    if misses:
        lines += ["", "cases with junk, duplicate or wrong-forget ops (or errors):"]
        lines += [
            f"  {r.case.id}: junk {r.junk}, dup {r.duplicates}, wrong forgets {r.wrong_forgets}"
            + (f", error {r.error}" if r.error else "")
            for r in misses
        ]
    return "\n".join(lines)


async def evaluate(
    cases: Sequence[EvalCase], model: ChatModel, *, threshold: float, model_name: str | None = None
) -> list[CaseResult]:
    return [await run_case(case, model, threshold=threshold, model_name=model_name) for case in cases]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.memory_evaluation", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--scripted", action="store_true", help="replay each case's recorded proposals (CI)")
    source.add_argument("--base-url", help="an OpenAI-compatible endpoint")
    parser.add_argument("--api-key", default=os.environ.get("LLM_API_KEY") or "none", help="default: $LLM_API_KEY")
    parser.add_argument(
        "--model", default=None, help="logical model id (default: the memory profile's model, mapped by MODEL_ID_MAP)"
    )
    parser.add_argument(
        "--model-id-map", default=os.environ.get("MODEL_ID_MAP"), help="JSON logical -> provider id ($MODEL_ID_MAP)"
    )
    parser.add_argument("--provider", default=os.environ.get("LLM_PROVIDER") or None, help="default: $LLM_PROVIDER")
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases")
    parser.add_argument(
        "--min-recall", type=fraction, default=None, help="exit 1 when write recall is below this (0-1), e.g. 0.8"
    )
    parser.add_argument("--threshold", type=float, default=Settings().memory_confidence_threshold)
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON after the table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the table is the output; loader notices would interleave with it
    cases = load_cases(args.cases)[: args.limit]
    model: ChatModel
    if args.scripted:
        model = ReplayModel()
        mode = "scripted model (recorded proposals replayed: measures the gate and the harness, not a model)"
    else:
        from shared.llm.model_ids import parse_model_id_map
        from shared.llm.openai_chat import OpenAIChatModel
        from shared.llm.thinking import parse_provider

        model_ids = parse_model_id_map(args.model_id_map)
        provider = parse_provider(args.provider) if args.provider else None
        model = OpenAIChatModel(args.base_url, args.api_key, provider=provider, model_ids=model_ids)
        logical = args.model or _memory_profile().model.name
        mode = f"model {logical} (sent as {model_ids.get(logical, logical)}) at {args.base_url}"
    results = asyncio.run(evaluate(cases, model, threshold=args.threshold, model_name=args.model))
    metrics = score(results)
    print(render(metrics, results, mode=mode, threshold=args.threshold))
    recall = metrics.correct / metrics.expected if metrics.expected else 1.0
    line, below = threshold_verdict("min_recall", recall, args.min_recall)
    print(line)
    if metrics.errors:
        print(f"{metrics.errors} case(s) failed with an error: exit 1")
    if args.json:  # last, on one line, for scripts
        print(json.dumps(metrics.as_dict(), ensure_ascii=False))
    return 1 if metrics.errors or below else 0


if __name__ == "__main__":
    sys.exit(main())
