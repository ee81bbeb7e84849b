"""Check, before a deployment or a benchmark, that an endpoint serves the model ids the profiles name.

    python -m shared.llm.preflight --base-url URL --api-key KEY --models qwen3.5-30b-a3b,qwen3.5-flash

``--base-url`` and ``--api-key`` default to ``LLM_BASE_URL`` and ``LLM_API_KEY``. Exit status: 0 all present,
1 some missing, 2 the endpoint could not be asked.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from shared.errors import ModelError
from shared.llm.thinking import PROVIDERS, Provider, parse_provider
from shared.llm.types import ChatModel

# Ids people ask for that a provider publishes under another name: wanted id -> (provider, id, why).
KNOWN_RENAMES: dict[str, tuple[Provider, str, str]] = {
    "qwen3.5-30b-a3b": (
        "dashscope",
        "qwen3.5-35b-a3b",
        "DashScope publishes the 3B-active Qwen3.5 MoE model as qwen3.5-35b-a3b; there is no official qwen3.5-30b-a3b",
    ),
}


@dataclass(frozen=True)
class ModelCheck:
    wanted: str
    present: bool
    suggestion: str | None = None  # an id to use instead, when a missing one has a known or close match
    note: str | None = None  # why the suggestion


@dataclass(frozen=True)
class PreflightReport:
    provider: str
    available: tuple[str, ...]
    checks: tuple[ModelCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.present for check in self.checks)

    @property
    def missing(self) -> list[str]:
        return [check.wanted for check in self.checks if not check.present]

    def render(self) -> str:
        lines = [f"provider: {self.provider}; the endpoint lists {len(self.available)} model(s)"]
        for check in self.checks:
            if check.present:
                lines.append(f"  present  {check.wanted}")
                continue
            lines.append(f"  MISSING  {check.wanted}")
            if check.note:
                lines.append(f"           {check.note}")
            if check.suggestion:
                lines.append(f"           use: {check.suggestion}")
        return "\n".join(lines)


def _check(wanted: str, available: Sequence[str], provider: str) -> ModelCheck:
    if wanted in available:
        return ModelCheck(wanted, present=True)
    rename = KNOWN_RENAMES.get(wanted)
    if rename is not None:
        rename_provider, replacement, why = rename
        if provider == rename_provider or replacement in available:
            return ModelCheck(wanted, present=False, suggestion=replacement, note=why)
    close = difflib.get_close_matches(wanted, available, n=1, cutoff=0.8)
    if close:
        return ModelCheck(wanted, present=False, suggestion=close[0], note="closest id the endpoint lists")
    return ModelCheck(wanted, present=False)


async def check_models(model: ChatModel, wanted: Sequence[str]) -> PreflightReport:
    """Ask ``model``'s endpoint for its ids and check each wanted id.

    Raises:
        ModelError: the endpoint could not be asked.
    """
    available = tuple(await model.list_models())
    checks = tuple(_check(w, available, model.provider) for w in wanted)
    return PreflightReport(provider=model.provider, available=available, checks=checks)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m shared.llm.preflight",
        description="Check that an endpoint serves the wanted model ids.",
    )
    parser.add_argument("--base-url", default=os.environ.get("LLM_BASE_URL"), help="default: $LLM_BASE_URL")
    parser.add_argument("--api-key", default=os.environ.get("LLM_API_KEY"), help="default: $LLM_API_KEY")
    parser.add_argument("--models", required=True, help="comma-separated model ids")
    parser.add_argument("--provider", choices=PROVIDERS, help="default: detected from the base URL")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds (default 20)")
    args = parser.parse_args(argv)
    if not args.base_url:
        parser.error("--base-url or LLM_BASE_URL is required")
    if not args.api_key:
        parser.error("--api-key or LLM_API_KEY is required")
    return args


async def _run(args: argparse.Namespace) -> int:
    # Imported here so that importing this module does not load the openai client.
    from shared.llm.openai_chat import OpenAIChatModel

    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    provider = parse_provider(args.provider) if args.provider else None
    model = OpenAIChatModel(args.base_url, args.api_key, provider=provider, timeout_s=args.timeout)
    try:
        report = await check_models(model, wanted)
    except ModelError as exc:
        reason = f"[{exc.code}] {exc.message}"
        print(f"preflight: cannot list models at {args.base_url}: {reason}", file=sys.stderr)
        return 2
    finally:
        await model.aclose()
    print(report.render())
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return asyncio.run(_run(_parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
