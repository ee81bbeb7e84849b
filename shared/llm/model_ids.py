"""Model ids as deployment configuration: a profile names a logical model, the deployment maps it to the id its
provider serves.

``MODEL_ID_MAP`` is a JSON object ``{"<logical id>": "<provider id>"}``; a logical id that is not in it is sent
as it is. Example (DashScope publishes the design's (docs/design.md §1) ``qwen3.5-30b-a3b`` as ``qwen3.5-35b-a3b``)::

    MODEL_ID_MAP='{"qwen3.5-30b-a3b": "qwen3.5-35b-a3b"}'

One map serves every executor and every profile (a rollback profile keeps its own logical id), so there is no
per-executor id setting. See docs/providers.md.
"""

from __future__ import annotations

import json

from shared.errors import ConfigurationError


def parse_model_id_map(text: str | None) -> dict[str, str]:
    """Parse ``MODEL_ID_MAP``; empty or unset means "send every logical id as it is".

    Raises:
        ConfigurationError: not a JSON object of non-empty strings, with the fix.
    """
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"MODEL_ID_MAP is not valid JSON ({exc.msg} at column {exc.colno}); "
            'use {"<logical id>": "<provider id>"}',
            code="invalid_model_id_map",
        ) from exc
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and k.strip() and isinstance(v, str) and v.strip() for k, v in data.items()
    ):
        raise ConfigurationError(
            'MODEL_ID_MAP must be a JSON object of non-empty strings: {"<logical id>": "<provider id>"}',
            code="invalid_model_id_map",
        )
    return {k.strip(): v.strip() for k, v in data.items()}
