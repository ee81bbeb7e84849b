"""An API Gateway proxy event and the Lambda context as the buffered API function receives them (the event from
tests/events/apigw_proxy_v1.json), for the entry points' tests and the playground routes behind them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EVENT = json.loads((ROOT / "tests" / "events" / "apigw_proxy_v1.json").read_text())


@dataclass
class LambdaContext:
    function_name: str = "agent-backend-buffered"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:agent-backend-buffered"
    aws_request_id: str = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def proxy_event(method: str, path: str, headers: dict[str, str], body: str | None = None) -> dict[str, Any]:
    event = json.loads(json.dumps(EVENT))
    event.update(
        {
            "httpMethod": method,
            "path": path,
            "resource": "/{proxy+}",
            "pathParameters": {"proxy": path.lstrip("/")},
            "queryStringParameters": None,
            "multiValueQueryStringParameters": None,
            "body": body,
            "isBase64Encoded": False,
        }
    )
    event["headers"] = {**{k: v for k, v in event["headers"].items() if k.lower() != "accept-encoding"}, **headers}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    event["requestContext"]["httpMethod"] = method
    event["requestContext"]["path"] = f"/prod{path}"
    return event
