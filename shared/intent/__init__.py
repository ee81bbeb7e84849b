"""Intent recognition inside the worker's system prompt (docs/design.md §6), in two selectable variants.

- ``prompts``: the variant A and B system prompts and their label sets.
- ``cases``: the labelled regression set (``eval/intent/cases.jsonl``) and its loader.
- ``regression``: the command that runs the set against a model and prints accuracy and tokens.
"""

from shared.intent.prompts import A_TO_B, LABELS_A, LABELS_B, IntentVariant, build_system_prompt

__all__ = ["A_TO_B", "LABELS_A", "LABELS_B", "IntentVariant", "build_system_prompt"]
