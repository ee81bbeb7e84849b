"""Prompt sizes of the intent variants, as written in ``docs/policy.md``: ``python -m devtools.intent.sizes``.

Measured with the default tools (the clock) and a fixed date, so the numbers are reproducible; the real prompt
differs only in the date line and the tool list.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from shared.intent.prompts import IntentVariant, build_system_prompt
from shared.tokens import count_tokens, tokenizer_name
from shared.tools.clock import SPEC as CLOCK_SPEC

MEASURED_AT = datetime(2025, 1, 1, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


def prompt_tokens(variant: IntentVariant) -> int:
    """Tokens of the variant's system prompt with the default tools, by :func:`shared.tokens.count_tokens`."""
    return count_tokens(build_system_prompt(variant, [CLOCK_SPEC], MEASURED_AT))


def main() -> None:
    print(f"tokenizer: {tokenizer_name()}")
    for variant in ("A", "B"):
        prompt = build_system_prompt(variant, [CLOCK_SPEC], MEASURED_AT)
        print(f"variant {variant}: {count_tokens(prompt)} tokens, {len(prompt)} characters")


if __name__ == "__main__":
    main()
