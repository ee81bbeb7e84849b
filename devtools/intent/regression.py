"""Run the intent regression set against a model and print accuracy per label and tokens per case.

    python -m devtools.intent.regression --base-url URL --api-key KEY --variant A|B [--model M] [--min-accuracy 0.8]
    python -m devtools.intent.regression --scripted --variant B        # CI: proves the harness only

``--base-url``, ``--api-key``, ``--provider`` default to ``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_PROVIDER``;
``--model`` defaults to the model of the variant's shipped profile (A: ``chat_default``, B: ``chat_default_b``),
sent under the id ``MODEL_ID_MAP`` (or ``--model-id-map``) maps it to. With ``--min-accuracy`` the command
exits 1 when the overall accuracy is below it, and prints the threshold and the verdict either way.

Each case is sent as the worker would send it (the variant's system prompt with the default tools, the case's
history and its user message) plus one evaluation instruction: call ``report_intent(label)`` instead of
answering. A model that cannot call tools may answer with a first line ``intent: <label>`` instead; both are
read.

``--scripted`` swaps the model for :class:`ScriptedIntentModel`, which answers every case with its expected
label, so the table prints and the plumbing stays tested; its accuracy means nothing about any real model.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast
from zoneinfo import ZoneInfo

from devtools.harness import fraction, threshold_verdict
from devtools.intent.cases import DEFAULT_CASES, IntentCase, load_cases
from shared.errors import ConfigurationError
from shared.intent.prompts import A_TO_B, IntentVariant, build_system_prompt, labels_for
from shared.llm.model_ids import parse_model_id_map
from shared.llm.types import (
    ChatChunk,
    ChatMessage,
    ChatRequest,
    ChatTurn,
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from shared.models import Usage
from shared.ports.model import ChatModel
from shared.tokens import count_tokens
from shared.tools.clock import SPEC as CLOCK_SPEC

REPORT_TOOL_NAME = "report_intent"
EVAL_INSTRUCTION = (
    "EVALUATION MODE: do not answer the user. Call report_intent exactly once with the label you chose. "
    "If you cannot call tools, reply with the single line: intent: <label>"
)
DEFAULT_TOOLS: tuple[ToolSpec, ...] = (CLOCK_SPEC,)
_LABEL_LINE = re.compile(r"^\s*intent\s*[:：]\s*([A-Za-z_]+)", re.IGNORECASE)


def report_tool(variant: IntentVariant) -> ToolSpec:
    return ToolSpec(
        name=REPORT_TOOL_NAME,
        description="Report the intent label chosen for the latest user message.",
        parameters={
            "type": "object",
            "properties": {"label": {"type": "string", "enum": list(labels_for(variant))}},
            "required": ["label"],
            "additionalProperties": False,
        },
    )


def build_request(
    case: IntentCase, *, variant: IntentVariant, model: str, tools: Sequence[ToolSpec], now: datetime
) -> ChatRequest:
    system = build_system_prompt(variant, tools, now) + "\n\n" + EVAL_INSTRUCTION
    messages = [ChatMessage(role="system", content=system)]
    messages += [ChatMessage(role=turn.role, content=turn.content) for turn in case.history]
    messages.append(ChatMessage(role="user", content=case.text))
    return ChatRequest(
        model=model, messages=tuple(messages), tools=(report_tool(variant),), thinking="off", temperature=0
    )


async def collect_turn(chunks: AsyncIterator[ChatChunk]) -> ChatTurn:
    turn = ChatTurn()
    async for chunk in chunks:
        if isinstance(chunk, TextDelta):
            turn.text += chunk.text
        elif isinstance(chunk, ReasoningDelta):
            turn.reasoning += chunk.text
        elif isinstance(chunk, ToolCallDelta):
            call = turn.tool_calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = chunk.id or call["id"]
            call["name"] = chunk.name or call["name"]
            call["arguments"] += chunk.arguments
        elif isinstance(chunk, Finished):
            turn.finish_reason = chunk.reason
            turn.usage = chunk.usage
    return turn


def parse_label(turn: ChatTurn) -> str | None:
    """The label from a ``report_intent`` call, else from a leading ``intent: <label>`` line."""
    for call in turn.tool_calls.values():
        if call["name"] == REPORT_TOOL_NAME:
            try:
                label = json.loads(call["arguments"] or "{}").get("label")
            except (json.JSONDecodeError, AttributeError):
                return None
            return label if isinstance(label, str) else None
    match = _LABEL_LINE.match(turn.text)
    return match.group(1).lower() if match else None


def _request_tokens(request: ChatRequest) -> int:
    text = "".join(m.content or "" for m in request.messages)
    text += "".join(json.dumps(t.parameters) + t.name + t.description for t in request.tools)
    return count_tokens(text)


@dataclass(frozen=True)
class CaseResult:
    case: IntentCase
    expected: str
    predicted: str | None
    input_tokens: int
    output_tokens: int
    estimated_tokens: bool
    error: str | None = None

    @property
    def correct(self) -> bool:
        return self.predicted == self.expected


async def run_regression(
    model: ChatModel,
    *,
    model_name: str,
    variant: IntentVariant,
    cases: Sequence[IntentCase],
    now: datetime,
    tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
) -> list[CaseResult]:
    results: list[CaseResult] = []
    for case in cases:
        request = build_request(case, variant=variant, model=model_name, tools=tools, now=now)
        try:
            turn = await collect_turn(model.stream(request))
        except Exception as exc:  # one failing case must not hide the others' results
            results.append(
                CaseResult(
                    case,
                    case.expected(variant),
                    None,
                    _request_tokens(request),
                    0,
                    True,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            continue
        usage = turn.usage
        if usage is None or usage.input_tokens == 0:
            output = turn.text + "".join(c["arguments"] for c in turn.tool_calls.values())
            usage = Usage(
                model=model_name,
                input_tokens=_request_tokens(request),
                output_tokens=count_tokens(output),
                estimated=True,
            )
        results.append(
            CaseResult(
                case,
                case.expected(variant),
                parse_label(turn),
                usage.input_tokens,
                usage.output_tokens,
                usage.estimated,
            )
        )
    return results


def render_report(results: Sequence[CaseResult], variant: IntentVariant) -> str:
    """Per-case rows, then accuracy per label (and, for A, folded into B's labels)."""
    lines = [f"intent regression: variant {variant}, {len(results)} cases  (~ = tokens counted locally)", ""]
    lines.append(f"{'case':<14} {'expected':<14} {'predicted':<14} {'ok':<3} {'in':>7} {'out':>5}")
    for r in results:
        mark = "~" if r.estimated_tokens else " "
        predicted = r.predicted or ("(error)" if r.error else "(none)")
        lines.append(
            f"{r.case.id:<14} {r.expected:<14} {predicted:<14} {'yes' if r.correct else 'no':<3} "
            f"{mark}{r.input_tokens:>6} {r.output_tokens:>5}"
        )
    lines += ["", f"{'label':<14} {'cases':>5} {'correct':>7} {'accuracy':>8}"]
    for label in labels_for(variant):
        subset = [r for r in results if r.expected == label]
        if subset:
            right = sum(r.correct for r in subset)
            lines.append(f"{label:<14} {len(subset):>5} {right:>7} {right / len(subset):>8.1%}")
    total = sum(r.correct for r in results)
    lines.append(f"{'all':<14} {len(results):>5} {total:>7} {total / max(len(results), 1):>8.1%}")
    if variant == "A":
        folded = sum(A_TO_B.get(r.predicted or "", "") == r.case.label for r in results)
        lines.append(
            f"{'folded to B':<14} {len(results):>5} {folded:>7} {folded / max(len(results), 1):>8.1%}"
        )
    if results:
        mean_in = sum(r.input_tokens for r in results) / len(results)
        lines.append(f"mean input tokens per case: {mean_in:.0f}")
    errors = [r for r in results if r.error]
    lines += [f"error in {r.case.id}: {r.error}" for r in errors]
    return "\n".join(lines)


class ScriptedIntentModel:
    """A stand-in model that answers each case (found by its user message) with a scripted label."""

    provider = "scripted"

    def __init__(self, answers: Mapping[str, str], model_name: str = "scripted-intent") -> None:
        self._answers = dict(answers)
        self._model_name = model_name

    @classmethod
    def answering_expected(cls, cases: Sequence[IntentCase], variant: IntentVariant) -> ScriptedIntentModel:
        return cls({case.text: case.expected(variant) for case in cases})

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        question = next((m.content or "" for m in reversed(request.messages) if m.role == "user"), "")
        arguments = json.dumps({"label": self._answers.get(question, "unknown")})
        yield ToolCallDelta(index=0, id="call_0", name=REPORT_TOOL_NAME, arguments=arguments)
        usage = Usage(
            provider=self.provider,
            model=self._model_name,
            input_tokens=_request_tokens(request),
            output_tokens=count_tokens(arguments),
            estimated=True,
        )
        yield Finished(reason="tool_calls", usage=usage)

    async def list_models(self) -> list[str]:
        return [self._model_name]


VARIANT_PROFILES: Mapping[str, str] = {"A": "chat_default", "B": "chat_default_b"}
"""The shipped profile whose model a variant's regression run uses by default."""


def _openai_model(base_url: str, api_key: str, provider: str | None, model_ids: Mapping[str, str]) -> ChatModel:
    # Imported lazily: the adapter is the only module allowed to import ``openai`` and is not needed in
    # --scripted.
    module = importlib.import_module("shared.llm.openai_chat")
    thinking = importlib.import_module("shared.llm.thinking")
    parsed = thinking.parse_provider(provider) if provider else None
    return cast(ChatModel, module.OpenAIChatModel(base_url, api_key, provider=parsed, model_ids=model_ids))


def _default_model(variant: IntentVariant) -> str:
    from shared.profiles import default_catalog

    return default_catalog().get(VARIANT_PROFILES[variant]).model.name


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.intent.regression", description="Run the intent regression set."
    )
    parser.add_argument("--variant", choices=["A", "B"], required=True)
    parser.add_argument(
        "--base-url",
        default=os.environ.get("LLM_BASE_URL"),
        help="OpenAI-compatible endpoint, e.g. a DashScope compatible-mode URL (default: $LLM_BASE_URL)",
    )
    parser.add_argument(
        "--api-key", default=None, help="API key (default: the LLM_API_KEY environment variable)"
    )
    parser.add_argument(
        "--model", help="logical model id (default: the model of the variant's profile, chat_default or chat_default_b)"
    )
    parser.add_argument(
        "--model-id-map", default=os.environ.get("MODEL_ID_MAP"), help="JSON logical -> provider id ($MODEL_ID_MAP)"
    )
    parser.add_argument(
        "--provider",
        default=os.environ.get("LLM_PROVIDER") or None,
        help="provider hint for the thinking-off mapping (default: $LLM_PROVIDER, else detected)",
    )
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--limit", type=int, default=None, help="run only the first N cases")
    parser.add_argument(
        "--min-accuracy", type=fraction, default=None, help="exit 1 below this overall accuracy (0-1), e.g. 0.8"
    )
    parser.add_argument(
        "--scripted", action="store_true", help="use the scripted model (proves the harness only)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    variant = cast(IntentVariant, args.variant)
    cases = load_cases(args.cases)[: args.limit]
    model: ChatModel
    if args.scripted:
        model, model_name = ScriptedIntentModel.answering_expected(cases, variant), "scripted-intent"
        print("scripted model: it answers with the expected labels; this proves the harness, not a model.")
    else:
        api_key = args.api_key or os.environ.get("LLM_API_KEY")
        if not (args.base_url and api_key):
            print(
                "--base-url (or LLM_BASE_URL) and --api-key (or LLM_API_KEY) are required without --scripted",
                file=sys.stderr,
            )
            return 2
        try:
            model_ids = parse_model_id_map(args.model_id_map)
        except ConfigurationError as exc:
            print(exc.message, file=sys.stderr)
            return 2
        model_name = args.model or _default_model(variant)
        model = _openai_model(args.base_url, api_key, args.provider, model_ids)
        print(f"model {model_name} (sent as {model_ids.get(model_name, model_name)}) at {args.base_url}")
    now = datetime.now(ZoneInfo("Asia/Shanghai"))
    results = asyncio.run(run_regression(model, model_name=model_name, variant=variant, cases=cases, now=now))
    print(render_report(results, variant))
    accuracy = sum(r.correct for r in results) / max(len(results), 1)
    line, failed = threshold_verdict("min_accuracy", accuracy, args.min_accuracy)
    print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
