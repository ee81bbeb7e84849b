"""Intent recognition inside the worker's system prompt (docs/design.md §6), in two selectable variants.

- ``prompts``: the variant A and B system prompts and their label sets.

The labelled regression set, its loader and the command that runs it against a model live in
``devtools.intent``, outside the deployed package.
"""

from shared.intent.prompts import A_TO_B, LABELS_A, LABELS_B, IntentVariant, build_system_prompt

__all__ = ["A_TO_B", "LABELS_A", "LABELS_B", "IntentVariant", "build_system_prompt"]
