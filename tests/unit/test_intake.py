"""What is taken from a RunAgentInput: errors name the wire field; only text user content is accepted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.errors import InvalidRequest
from shared.models import ExecutionMeta
from shared.runs.intake import body_digest, parse_run_input, user_messages


def raw(messages: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"threadId": "t", "runId": "r", "messages": messages, **extra}).encode()


def test_schema_errors_name_the_field_as_the_client_wrote_it() -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_run_input(raw([{"id": "m1", "role": "user", "content": 5}]))
    locs = [d["loc"] for d in err.value.details]
    assert ["body", "messages", 0, "content"] in locs
    assert all(loc[0] == "body" and "user" not in loc for loc in locs)


def test_an_image_part_is_kept_beside_the_text_and_a_provider_file_handle_is_refused_naming_the_part() -> None:
    def message(source: dict[str, Any]) -> Any:
        content = [{"type": "text", "text": "look"}, {"type": "image", "source": source}]
        return parse_run_input(raw([{"id": "m1", "role": "user", "content": content}]))

    kept = user_messages(message({"type": "url", "value": "https://x.test/a.png"}), ExecutionMeta())[0]
    assert kept.content == "look"
    assert [(p.kind, p.url, p.key) for p in kept.parts] == [("image", "https://x.test/a.png", None)]
    with pytest.raises(InvalidRequest) as err:
        user_messages(message({"type": "file", "value": "file-abc"}), ExecutionMeta())
    assert err.value.code == "unsupported_source"
    assert err.value.details[0]["loc"] == ["body", "messages", 0, "content", 1, "source"]


@pytest.mark.parametrize("content", ["", "   \n", [{"type": "text", "text": " "}]])
def test_empty_user_content_is_refused(content: Any) -> None:
    parsed = parse_run_input(raw([{"id": "m1", "role": "user", "content": content}]))
    with pytest.raises(InvalidRequest):
        user_messages(parsed, ExecutionMeta())


def test_text_parts_are_joined() -> None:
    parsed = parse_run_input(
        raw([{"id": "m1", "role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    )
    assert user_messages(parsed, ExecutionMeta())[0].content == "a\nb"


def test_the_same_request_reserialised_has_the_same_digest() -> None:
    one = parse_run_input(raw([{"id": "m1", "role": "user", "content": "hi"}]))
    spaced = json.dumps(
        {"messages": [{"content": "hi", "role": "user", "id": "m1"}], "runId": "r", "threadId": "t"}, indent=2
    )
    other = parse_run_input(raw([{"id": "m1", "role": "user", "content": "hello"}]))
    assert body_digest(one) == body_digest(parse_run_input(spaced.encode()))
    assert body_digest(one) != body_digest(other)
