"""Development and evaluation tooling that the Lambda functions do not ship.

``scripts/stage_lambda_src.sh`` copies only ``shared/``, ``functions/`` and ``tool_plugins/`` into the deployed
folder, so nothing here reaches a function. The layering puts this package above ``functions`` and ``shared``: it
may import both (the local runner composes the deployed app), and neither may import it.

- ``local``: ``make dev`` (moto, an in-process stream store, the memory worker and the schedule runner in one
  process) and ``make token``.
- ``intent``: the labelled intent regression set and the command that runs it against a model.
- ``memory_evaluation``: the memory extraction evaluation.
- ``preflight``: checks an OpenAI-compatible endpoint before a deploy.
- ``harness``: what the evaluation commands share (thresholds).
- ``make_test``: ``make test`` as timed stages (installs, lint, the pytest tiers), docs/testing.md.
"""
