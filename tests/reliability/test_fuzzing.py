"""Fuzzing: schemathesis against the served OpenAPI schema, hypothesis on the parsers, hostile bodies.

Promises: no input gives a 5xx; every error is ``{"error": {"code", "message", ...}}`` with a JSON content type;
a refused request stores nothing. ``GET /api/v1/threads/{threadId}/events`` is left out of schemathesis: it is a
stream that stays open by design (its errors are the same code path as the other thread routes, tested below).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import boto3
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.errors import InvalidRequest
from shared.models import ExecutionMeta
from shared.runs import intake
from shared.runs.approvals import resume_decisions
from shared.threads import decode_cursor
from shared.wiring import ServiceOverrides, Services
from tests.support.live_app import serve_app
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import REGION, make_settings
from tests.support.streams import events_of
from tests.support.tokens import bearer

MAX_EXAMPLES = 12


def assert_error_shape(resp: httpx.Response | Any) -> None:
    """The one JSON error shape of errors.md §1."""
    content_type = resp.headers.get("content-type", "")
    if isinstance(content_type, list):  # schemathesis keeps every value of a header
        content_type = content_type[0] if content_type else ""
    assert content_type.startswith("application/json"), resp.headers
    error = resp.json()["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "details"}
    assert "details" not in error or error["details"] is not None


# ---- schemathesis --------------------------------------------------------------------------------------------


SCHEDULER_SETTINGS = {
    "scheduler_group_name": "agent-automation",
    "scheduler_role_arn": "arn:aws:iam::123456789012:role/agent-scheduler",
    "automation_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:agent-automation",
}


@pytest.fixture
def fuzz_url(store: Any, redis_url: str) -> Iterator[str]:
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name=SCHEDULER_SETTINGS["scheduler_group_name"])
    model = ScriptedModel(fallback=lambda _req: Turn(text=["fuzzed"]))
    settings = make_settings(redis_url=redis_url, **SCHEDULER_SETTINGS)
    services = Services(settings, overrides=ServiceOverrides(store=store, model=model))
    with serve_app(services) as url:
        yield url


def check_operation(operation: Any, base_url: str) -> int:
    """Send ``MAX_EXAMPLES`` generated cases of one operation, with a valid token and with none."""
    sent = 0

    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def send(case: Any) -> None:
        nonlocal sent
        for headers in (bearer(scopes=("agent:audit",)), {}):
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            sent += 1
            # THEN never a 5xx, and every error in the documented shape
            assert response.status_code < 500, (case.method, case.formatted_path, response.status_code, response.text)
            if response.status_code >= 400:
                assert_error_shape(response)

    send()
    return sent


@pytest.mark.e2e
def test_no_input_to_any_operation_gives_a_5xx_or_an_undocumented_error_shape(fuzz_url: str) -> None:
    # GIVEN the schema the app serves (the never-ending thread stream left out)
    schema = schemathesis.openapi.from_url(f"{fuzz_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    fuzzable = [op for op in operations if not op.path.endswith("/threads/{threadId}/events")]
    assert len(fuzzable) == len(operations) - 1 >= 10
    # WHEN schemathesis sends generated inputs to every other operation
    sent = {f"{op.method.upper()} {op.path}": check_operation(op, fuzz_url) for op in fuzzable}
    # THEN (asserted per response) no 5xx and every error in the documented shape; every operation was exercised
    assert all(count > 0 for count in sent.values()), sent


# ---- hypothesis on the parsers -------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
ids = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=140)
messages = st.lists(
    st.fixed_dictionaries(
        {"id": ids, "role": st.sampled_from(["user", "assistant", "system", "tool", "developer", "bogus"])},
        optional={"content": st.one_of(st.text(max_size=50), json_values), "toolCallId": ids},
    ),
    max_size=5,
)
run_inputs = st.fixed_dictionaries(
    {"threadId": ids, "runId": ids, "messages": messages},
    optional={
        "tools": json_values,
        "context": json_values,
        "state": json_values,
        "forwardedProps": json_values,
        "resume": st.one_of(
            json_values,
            st.lists(
                st.fixed_dictionaries(
                    {"interruptId": ids, "status": st.sampled_from(["resolved", "cancelled"])},
                    optional={"payload": json_values},
                ),
                max_size=3,
            ),
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        run_inputs.map(lambda d: json.dumps(d).encode()),
        st.binary(max_size=200),
        json_values.map(lambda v: json.dumps(v).encode()),
    )
)
def test_run_agent_input_parsing_accepts_or_refuses_with_invalid_request_only(raw: bytes) -> None:
    # GIVEN any body  WHEN it is parsed, its user messages and resume taken  THEN a result, or InvalidRequest only
    try:
        parsed = intake.parse_run_input(raw)
        stored = intake.user_messages(parsed, ExecutionMeta())
        decisions = resume_decisions(parsed)
    except InvalidRequest as exc:
        refused: InvalidRequest | None = exc
    else:
        refused = None
    if refused is not None:
        assert refused.code in {"invalid_request", "message_too_long", "invalid_resume_payload"}
        return
    assert all(d.payload is None or isinstance(d.payload, dict) for d in decisions)
    assert all(intake._ID.match(m.id) for m in stored)
    assert intake._ID.match(parsed.thread_id) and intake._ID.match(parsed.run_id)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))))
def test_the_history_cursor_decodes_to_a_position_or_is_invalid(cursor: str) -> None:
    # GIVEN any cursor text  WHEN decoded  THEN a sequence number, or InvalidRequest invalid_cursor
    try:
        seq: int | None = decode_cursor(cursor)
    except InvalidRequest as exc:
        seq, code = None, exc.code
    assert isinstance(seq, int) or code == "invalid_cursor"


# ---- hostile bodies over HTTP --------------------------------------------------------------------------------


@pytest.fixture
def services(make_services: Any) -> Services:
    services: Services = make_services(ScriptedModel(fallback=lambda _req: Turn(text=["ok"])))
    return services


async def test_hostile_bodies_get_4xx_in_the_error_shape_and_store_nothing(
    services: Services, asgi_client: Any
) -> None:
    limit = services.settings.max_body_bytes
    valid = {"threadId": "th-h", "runId": "r-h", "messages": [{"id": "u-1", "role": "user", "content": "hi"}]}

    async def chunked(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 65_536):
            yield data[start : start + 65_536]

    deep = b'{"threadId":"th-h","runId":"r-h","messages":[],"state":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    cases: dict[str, tuple[dict[str, Any], int]] = {
        "declared oversized": ({"content": b"x" * (limit + 1)}, 413),
        "chunked oversized, no length": ({"content": chunked(b" " * (limit + 1))}, 413),
        "deeply nested": ({"content": deep}, 422),
        "invalid UTF-8": (
            {"content": b'{"threadId":"th-h","runId":"r-h","messages":[{"id":"u","content":"\xff\xfe"}]}'},
            422,
        ),
        "not JSON": ({"content": b"\x00\x01garbage"}, 422),
        "huge user message": (
            {"content": json.dumps({**valid, "messages": [{"id": "u-1", "role": "user", "content": "y" * 40_000}]})},
            422,
        ),
        "bad identifier": ({"content": json.dumps({**valid, "threadId": "../../etc/passwd"})}, 422),
    }
    async with asgi_client(services) as client:
        for name, (kwargs, status) in cases.items():
            # WHEN the hostile body is posted
            resp = await client.post(
                "/api/v1/agent", headers={**bearer(), "Content-Type": "application/json"}, **kwargs
            )
            # THEN the documented status and error shape
            assert resp.status_code == status, (name, resp.status_code, resp.text[:300])
            assert_error_shape(resp)
        # AND nothing was stored by any of them
        assert (await client.get("/api/v1/threads/th-h/history", headers=bearer())).status_code == 404
        listing = await client.get("/api/v1/threads", headers=bearer())
        assert listing.json()["items"] == []
        # AND a valid request still works afterwards
        ok = await client.post("/api/v1/agent", json=valid, headers=bearer())
    assert events_of(ok.text)[-1]["type"] == "RUN_FINISHED"


async def test_a_forged_thread_listing_cursor_is_refused_not_a_500(services: Services, asgi_client: Any) -> None:
    # GIVEN a cursor an attacker built: the caller's own partition key, with keys DynamoDB cannot use
    import base64

    forged = {"GSI1PK": {"S": "T#tenant-1#U#user-1#THREADS"}, "PK": {"N": "not-a-number"}, "junk": 1}
    cursor = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode()
    async with asgi_client(services) as client:
        resp = await client.get("/api/v1/threads", params={"cursor": cursor}, headers=bearer())
    # THEN a 422 invalid_cursor, never a 500
    assert resp.status_code == 422, resp.text
    assert_error_shape(resp)
