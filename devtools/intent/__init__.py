"""The intent regression set (``eval/intent/cases.jsonl``) and the commands around it.

- ``cases``: the labelled set and its loader.
- ``regression``: runs the set against a model and prints accuracy and tokens.
- ``sizes``: the prompt sizes of the two variants, as written in ``docs/policy.md``.
"""
