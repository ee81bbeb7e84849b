"""Prove, before a deployment or a benchmark, that an endpoint can run this backend's conversations.

    python -m devtools.preflight --base-url URL --api-key KEY [--models a,b] [--model-id-map JSON]

For each configured model (by default every logical model the shipped profiles name, mapped through
``MODEL_ID_MAP``) it sends what a worker turn with a tool call sends, streamed, thinking off:

1. a tiny chat request offering one tool, ``preflight_echo``, with that call forced (``tool_choice``);
2. the follow-up: the assistant tool-call message (content ``""``) and the tool result, in the shapes the adapter
   always uses (docs/providers.md); the model must answer it;
3. when a shipped profile naming the model says it reads images (``model.input_modalities``), a user message with
   an 8x8 PNG as an ``image_url`` part (a ``data:`` URL, as the worker sends a stored image); the model must answer
   it. ``--text-only`` leaves this out, for an endpoint whose deployment declares its profiles text only.

and prints what passed, what failed and why (the error code and the server's explanation, with the id the
endpoint publishes instead when a model is unknown to it). Exit status: 0 when every model passed, 1 otherwise
(an unreachable endpoint fails every model). ``--base-url``, ``--api-key``, ``--provider`` and ``--model-id-map``
default to ``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_PROVIDER`` and ``MODEL_ID_MAP``.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from devtools.preflight_image import IMAGE_PROMPT, tiny_png_data_url
from shared.errors import ConfigurationError, ModelError
from shared.llm.model_ids import parse_model_id_map
from shared.llm.thinking import PROVIDERS, Provider, parse_provider
from shared.llm.types import ChatMessage, ChatRequest, Finished, TextDelta, ToolCallDelta, ToolSpec
from shared.ports.model import ChatModel

# Ids people ask for that a provider publishes under another name: wanted id -> (provider, id, why).
KNOWN_RENAMES: dict[str, tuple[Provider, str, str]] = {
    "qwen3.5-30b-a3b": (
        "dashscope",
        "qwen3.5-35b-a3b",
        "DashScope publishes the 3B-active Qwen3.5 MoE model as qwen3.5-35b-a3b; there is no official qwen3.5-30b-a3b",
    ),
}

PROBE_TOOL = ToolSpec(
    name="preflight_echo",
    description="Echo a short word back. Used to check that tool calls work.",
    parameters={
        "type": "object",
        # An enum keeps the answer short and checkable for any model (a grammar-constrained small model would
        # otherwise write a free string until max_tokens cuts the JSON).
        "properties": {"word": {"type": "string", "enum": ["ping"], "description": "the word to echo"}},
        "required": ["word"],
    },
)
PROBE_PROMPT = "Call the preflight_echo tool with the word 'ping'."
PROBE_RESULT = '{"echo": "ping"}'
PROBE_MAX_TOKENS = 64


@dataclass(frozen=True)
class ModelCheck:
    """One model's result; ``wanted`` is the logical id, ``provider_model`` the id sent to the endpoint."""

    wanted: str
    provider_model: str
    passed: bool
    detail: str
    suggestion: str | None = None  # an id to use instead, when the endpoint does not know the one sent
    note: str | None = None  # why the suggestion


@dataclass(frozen=True)
class PreflightReport:
    provider: str
    base_url: str
    checks: tuple[ModelCheck, ...]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failed(self) -> list[str]:
        return [check.wanted for check in self.checks if not check.passed]

    def render(self) -> str:
        lines = [f"preflight: provider {self.provider} at {self.base_url}"]
        for check in self.checks:
            name = check.wanted if check.wanted == check.provider_model else f"{check.wanted} -> {check.provider_model}"
            lines.append(f"  {'PASS' if check.passed else 'FAIL'}  {name}: {check.detail}")
            if check.note:
                lines.append(f"        {check.note}")
            if check.suggestion:
                lines.append(
                    f'        use: {check.suggestion} (MODEL_ID_MAP=\'{{"{check.wanted}": "{check.suggestion}"}}\')'
                )
        passed = sum(check.passed for check in self.checks)
        lines.append(f"{passed} of {len(self.checks)} model(s) passed")
        return "\n".join(lines)


def suggest(wanted: str, available: Sequence[str], provider: str) -> tuple[str | None, str | None]:
    """An id the endpoint publishes for ``wanted``: a known rename, or the closest listed id."""
    rename = KNOWN_RENAMES.get(wanted)
    if rename is not None:
        rename_provider, replacement, why = rename
        if provider == rename_provider or replacement in available:
            return replacement, why
    close = difflib.get_close_matches(wanted, available, n=1, cutoff=0.8)
    if close and close[0] != wanted:
        return close[0], "closest id the endpoint lists"
    return None, None


async def _stream_turn(model: ChatModel, request: ChatRequest) -> tuple[str, dict[int, dict[str, str]], str]:
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    reason = ""
    async for chunk in model.stream(request):
        if isinstance(chunk, TextDelta):
            text.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            call = calls.setdefault(chunk.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or (chunk.id or "")
            call["name"] = call["name"] or (chunk.name or "")
            call["arguments"] += chunk.arguments
        elif isinstance(chunk, Finished):
            reason = chunk.reason
    return "".join(text), calls, reason


async def check_model(model: ChatModel, wanted: str, provider_model: str, *, image: bool = False) -> ModelCheck:
    """Run the two-request probe for one logical model id, and the image request when ``image``; never raises for a
    model failure."""
    started = time.monotonic()
    user = ChatMessage(role="user", content=PROBE_PROMPT)
    first = ChatRequest(
        model=wanted, messages=(user,), tools=(PROBE_TOOL,), tool_choice=PROBE_TOOL.name, max_tokens=PROBE_MAX_TOKENS
    )
    try:
        _, calls, _ = await _stream_turn(model, first)
    except ModelError as exc:
        return ModelCheck(wanted, provider_model, False, f"tool-call request failed: [{exc.code}] {exc.message}")
    call = calls.get(0)
    if call is None or call["name"] != PROBE_TOOL.name:
        got = "no tool call" if call is None else f"a call of {call['name']!r}"
        return ModelCheck(wanted, provider_model, False, f"the forced call of {PROBE_TOOL.name} came back as {got}")
    try:
        json.loads(call["arguments"] or "{}")
    except ValueError:
        return ModelCheck(
            wanted, provider_model, False, f"the tool-call arguments are not JSON: {call['arguments'][:80]!r}"
        )
    follow_up = ChatRequest(
        model=wanted,
        messages=(
            user,
            ChatMessage(role="assistant", content=None, tool_calls=((call["id"], call["name"], call["arguments"]),)),
            ChatMessage(role="tool", content=PROBE_RESULT, tool_call_id=call["id"]),
        ),
        tools=(PROBE_TOOL,),
        max_tokens=PROBE_MAX_TOKENS,
    )
    try:
        text, _, reason = await _stream_turn(model, follow_up)
    except ModelError as exc:
        return ModelCheck(
            wanted, provider_model, False, f"follow-up with the tool result failed: [{exc.code}] {exc.message}"
        )
    answered = f"forced tool call and follow-up answered ({reason}, {len(text)} characters"
    if image:
        failure = await _check_image(model, wanted)
        if failure is not None:
            return ModelCheck(wanted, provider_model, False, failure)
        answered += "; the 8x8 image answered"
    return ModelCheck(wanted, provider_model, True, f"{answered}, {time.monotonic() - started:.1f} s)")


async def _check_image(model: ChatModel, wanted: str) -> str | None:
    """Send the tiny image as the worker sends a stored one; why it failed, or None when the model answered."""
    user = ChatMessage(role="user", content=IMAGE_PROMPT, images=(tiny_png_data_url(),))
    try:
        text, _, reason = await _stream_turn(model, ChatRequest(model=wanted, messages=(user,), max_tokens=16))
    except ModelError as exc:
        return f"the request with an 8x8 image failed: [{exc.code}] {exc.message}"
    if not text and reason != "length":
        return f"the request with an 8x8 image got no answer (finish reason {reason or 'none'})"
    return None


async def run_preflight(
    model: ChatModel,
    wanted: Sequence[str],
    model_ids: Mapping[str, str],
    *,
    base_url: str = "",
    image_models: Collection[str] = (),
) -> PreflightReport:
    """Probe every wanted logical id (those in ``image_models`` with an image too); a failure that looks like an
    unknown model gets a suggestion."""
    checks: list[ModelCheck] = []
    available: list[str] | None = None
    for logical in wanted:
        provider_model = model_ids.get(logical, logical)
        check = await check_model(model, logical, provider_model, image=logical in image_models)
        if not check.passed and "model_rejected_request" in check.detail:
            if available is None:
                try:
                    available = await model.list_models()
                except ModelError:
                    available = []
            if provider_model not in available:
                replacement, why = suggest(provider_model, available, model.provider)
                check = ModelCheck(check.wanted, provider_model, False, check.detail, replacement, why)
        checks.append(check)
    return PreflightReport(provider=model.provider, base_url=base_url, checks=tuple(checks))


def _default_models() -> list[str]:
    from shared.profiles import default_catalog

    # Every logical model id some shipped profile names (mapped through MODEL_ID_MAP before the check).
    return sorted({profile.model.name for profile in default_catalog()})


def _image_models() -> set[str]:
    from shared.profiles import default_catalog

    # A model reads images when a shipped profile naming it says so (its requests may then carry them).
    return {profile.model.name for profile in default_catalog() if "image" in profile.model.input_modalities}


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.preflight",
        description="Check that an endpoint answers a forced tool call and its follow-up for each model.",
    )
    parser.add_argument("--base-url", default=os.environ.get("LLM_BASE_URL"), help="default: $LLM_BASE_URL")
    parser.add_argument("--api-key", default=os.environ.get("LLM_API_KEY"), help="default: $LLM_API_KEY")
    parser.add_argument(
        "--models", help="comma-separated logical model ids (default: every model the shipped profiles name)"
    )
    parser.add_argument(
        "--model-id-map", default=os.environ.get("MODEL_ID_MAP"), help="JSON logical -> provider id; $MODEL_ID_MAP"
    )
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=os.environ.get("LLM_PROVIDER") or None,
        help="default: $LLM_PROVIDER, else detected from the base URL",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default 60)")
    parser.add_argument(
        "--text-only",
        action="store_true",
        help="send no image, even to a model whose shipped profiles say it reads images (a text-only deployment)",
    )
    args = parser.parse_args(argv)
    if not args.base_url:
        parser.error("--base-url or LLM_BASE_URL is required")
    if not args.api_key:
        parser.error("--api-key or LLM_API_KEY is required")
    try:
        args.model_ids = parse_model_id_map(args.model_id_map)
    except ConfigurationError as exc:
        parser.error(exc.message)
    return args


async def _run(args: argparse.Namespace) -> int:
    # Imported here so that importing this module does not load the openai client.
    from shared.llm.openai_chat import OpenAIChatModel

    wanted = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else _default_models()
    provider = parse_provider(args.provider) if args.provider else None
    model = OpenAIChatModel(
        args.base_url, args.api_key, provider=provider, timeout_s=args.timeout, max_retries=1, model_ids=args.model_ids
    )
    try:
        images = set() if args.text_only else _image_models()
        report = await run_preflight(model, wanted, args.model_ids, base_url=args.base_url, image_models=images)
    finally:
        await model.aclose()
    print(report.render())
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(_run(_parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
