"""The protocol documents in docs/protocols/agent are the contract: these tests tie them to the code.

Each test reads a table or a code block of a document and compares it with what the code raises, serves or
streams, so a change on either side that is not made on the other fails here instead of drifting silently.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import EventType
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from functions.agent_api.app import create_app
from shared.executors.worker import MAX_CONTEXT_NOTE_CHARS, MAX_MODEL_TURNS
from shared.runs.intake import MAX_CONTEXT_ITEMS, MAX_USER_MESSAGE_CHARS
from shared.runs.outcomes import RUN_ERROR_MESSAGES, RUN_STREAM_TTL_S
from shared.runs.queueing import RUN_NOT_STARTED
from shared.runs.tailing import STREAM_UNAVAILABLE
from shared.settings import Settings
from shared.titles.job import THREAD_TITLE_EVENT
from shared.titles.naming import TITLE_MAX_CHARS
from shared.wiring import Services
from tests.support.scripted_model import ScriptedModel, Turn
from tests.support.settings import make_settings
from tests.support.sse import parse_sse
from tests.support.tokens import bearer

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "protocols" / "agent"
CODE_TOKEN = re.compile(r"`([a-z]+(?:_[a-z]+)*)`")
CODE_SHAPE = re.compile(r"^[a-z]+(?:_[a-z]+)*$")
EVENT_TOKEN = re.compile(r"\b[A-Z]+(?:_[A-Z]+)+\b")


# ---- reading the documents --------------------------------------------------------------------------------


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def section(text: str, number: int) -> str:
    """The body of ``## <number>.`` up to the next ``## `` heading."""
    match = re.search(rf"^## {number}\. .*?$(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"section {number} not found"
    return match.group(1)


def tables(text: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Every markdown table of ``text`` as (header cells, body rows of cells)."""
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            block.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))])
            continue
        if len(block) >= 2:
            yield block[0], block[2:]
        block = []


def codes_in_column(text: str, column: int) -> set[str]:
    return {code for _header, rows in tables(text) for row in rows for code in CODE_TOKEN.findall(row[column])}


# ---- reading the code -------------------------------------------------------------------------------------


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def error_codes_in_source() -> set[str]:
    """Every error code the code names: ``code="..."`` arguments, ``code = "..."`` assignments (error classes),
    and the codes the HTTP layer itself writes (``error_body("...")`` and its status-to-code table)."""
    found: set[str] = set()
    for path in sorted([*ROOT.glob("shared/**/*.py"), *ROOT.glob("functions/**/*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            value: str | None = None
            if isinstance(node, ast.keyword) and node.arg == "code":
                value = _string(node.value)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code" for t in node.targets):
                value = _string(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "error_body":
                value = _string(node.args[0]) if node.args else None
            if value:
                found.add(value)
    http_layer = ast.parse((ROOT / "functions" / "agent_api" / "errors.py").read_text(encoding="utf-8"))
    for node in ast.walk(http_layer):
        if isinstance(node, ast.Dict):
            found.update(v for v in map(_string, node.values) if v)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            found.update(v for v in map(_string, node.args[1:]) if v)
    return {code for code in found if CODE_SHAPE.match(code)}


def tool_error_codes_in_source() -> set[str]:
    """The codes a chat run can put in a tool result: the gate's refusal, the tool runner's errors, the worker's
    errors, salvage and ``update_state`` answers, and the results of approval calls that do not run."""
    found: set[str] = set()
    for path in (
        ROOT / "shared" / "tool_gate.py",
        ROOT / "shared" / "executors" / "worker.py",
        ROOT / "shared" / "executors" / "run_state.py",
        ROOT / "shared" / "tools" / "runner.py",
        ROOT / "shared" / "runs" / "approvals.py",
    ):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tool_error":
                if node.args and _string(node.args[0]):
                    found.add(str(_string(node.args[0])))
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if _string(key) in ("code", "error") and _string(value):
                        found.add(str(_string(value)))
            elif isinstance(node, ast.keyword) and node.arg == "reason" and _string(node.value):
                found.add(str(_string(node.value)))
    return found


def app_without_server() -> FastAPI:
    return create_app(Services(make_settings()))


# ---- errors.md --------------------------------------------------------------------------------------------


def test_every_error_code_the_code_raises_is_documented_and_every_documented_http_code_is_raised() -> None:
    # GIVEN the codes of errors.md: HTTP (§2), RUN_ERROR (§3) and internal-only (§5)
    text = doc("errors.md")
    http = codes_in_column(section(text, 2), 1)
    run_error = codes_in_column(section(text, 3), 0)
    internal = codes_in_column(section(text, 5), 0)
    # WHEN the source is searched for the codes it names
    raised = error_codes_in_source()
    # THEN nothing the code raises is missing from the document, and every documented HTTP code can happen
    assert raised - (http | run_error | internal) == set(), "raised by the code but not in errors.md"
    assert http - raised == set(), "listed in errors.md §2 but never raised"
    assert internal - raised == set(), "listed in errors.md §5 but never used"


def test_the_run_error_codes_documented_are_the_ones_a_run_can_end_with() -> None:
    documented = codes_in_column(section(doc("errors.md"), 3), 0)
    assert documented == set(RUN_ERROR_MESSAGES) | {STREAM_UNAVAILABLE, RUN_NOT_STARTED}


def test_the_tool_error_codes_documented_are_the_ones_a_chat_run_can_return() -> None:
    documented = codes_in_column(section(doc("errors.md"), 4), 0)
    assert documented == tool_error_codes_in_source()


# ---- api-endpoints.md -------------------------------------------------------------------------------------


def documented_endpoints() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(every endpoint of the summary table, the ones marked built) as (METHOD, path)."""
    everything: set[tuple[str, str]] = set()
    built: set[tuple[str, str]] = set()
    for header, rows in tables(section(doc("api-endpoints.md"), 2)):
        assert header[:2] == ["Method", "Path"] and header[-1] == "Status"
        for row in rows:
            path = row[1].strip("`")
            for method in (m.strip() for m in row[0].split(",")):
                everything.add((method, path))
                if row[-1].startswith("built"):
                    built.add((method, path))
    return everything, built


def test_the_endpoints_marked_built_are_exactly_the_routes_the_app_serves() -> None:
    # GIVEN the routes of the app's OpenAPI schema (the app built without a server)
    served = {(m.upper(), path) for path, ops in app_without_server().openapi()["paths"].items() for m in ops}
    # WHEN the summary table of api-endpoints.md is read
    everything, built = documented_endpoints()
    # THEN every route is documented, and the endpoints marked built are exactly the served ones
    assert served - everything == set(), "served but not documented"
    assert built == served, "the built endpoints differ from the served ones (mark them built, or planned)"


def test_the_documented_page_sizes_are_the_ones_the_routes_accept() -> None:
    text = doc("api-endpoints.md")
    for path, ops in app_without_server().openapi()["paths"].items():
        for method, op in ops.items():
            limit = next((p["schema"] for p in op.get("parameters", []) if p["name"] == "limit"), None)
            if limit is None:
                continue
            start = text.index(f"{method.upper()} {path}`")
            block = text[start : text.find("\n#", start)]
            assert f"`limit` (1 to {limit['maximum']}, default {limit['default']})" in block, path


@pytest.mark.parametrize(
    ("name", "phrase"),
    [
        ("run-agent-input.md", f"first {MAX_CONTEXT_ITEMS} entries"),
        ("run-agent-input.md", f"cut at {MAX_CONTEXT_NOTE_CHARS:,} characters"),
        ("run-agent-input.md", f"longer than {MAX_USER_MESSAGE_CHARS:,} characters"),
        ("errors.md", f"over {MAX_USER_MESSAGE_CHARS:,} characters"),
        ("sse-events.md", f"{MAX_MODEL_TURNS} model turns per run"),
        ("errors.md", f"bound ({MAX_MODEL_TURNS} model turns)"),
        ("api-endpoints.md", f"({Settings().max_body_bytes:,} bytes"),
        ("errors.md", f"({Settings().max_body_bytes:,} bytes)"),
        ("sse-events.md", f"after {Settings().sse_ping_interval_s:g} seconds without an event"),
        ("sse-events.md", f"expires {RUN_STREAM_TTL_S // 3600} hours after the run ends"),
        ("sse-events.md", f"`title` is at most {TITLE_MAX_CHARS} characters"),
        ("api-endpoints.md", f"first message, at most {TITLE_MAX_CHARS} characters"),
    ],
)
def test_the_limits_in_the_documents_are_the_code_constants(name: str, phrase: str) -> None:
    assert phrase in doc(name)


# ---- sse-events.md ----------------------------------------------------------------------------------------


def test_the_documented_thread_title_event_is_the_custom_event_the_title_job_sends() -> None:
    block = re.search(r"### 7\.2 .*?```json\n(.*?)```", doc("sse-events.md"), re.DOTALL)
    assert block
    example = json.loads(block.group(1))
    assert set(example) == {"type", "name", "value"} and set(example["value"]) == {"threadId", "title"}
    assert (example["type"], example["name"]) == ("CUSTOM", THREAD_TITLE_EVENT)


def documented_fields() -> dict[str, set[str]]:
    """Event type -> the top-level fields sse-events.md §3 says it carries (besides ``type`` and ``timestamp``)."""
    fields: dict[str, set[str]] = {}
    for header, rows in tables(section(doc("sse-events.md"), 3)):
        if header[:2] == ["Event", "Fields"]:
            for row in rows:
                fields[row[0].strip("`")] = set(re.findall(r"`(\w+)`", row[1]))
    return fields


async def test_a_chat_run_streams_the_documented_events_with_the_documented_fields(
    make_services: Any, asgi_client: Any
) -> None:
    # GIVEN a model that says something, calls the clock, then answers
    model = ScriptedModel(
        Turn(text=["Let me check. "], tool_calls=[("call_1", "get_current_time", '{"timezone": "Europe/Paris"}')]),
        Turn(text=["It is ", "noon."]),
    )
    text = doc("sse-events.md")
    sequence_block = re.search(r"```text\n(.*?)```", section(text, 2), re.DOTALL)
    assert sequence_block
    sequence = set(EVENT_TOKEN.findall(sequence_block.group(1)))
    never_sent = set(re.findall(r"`([A-Z]+(?:_[A-Z]+)*)`", section(text, 6)))
    # STATE_DELTA comes only when the model changes the state; MESSAGES_SNAPSHOT only on a thread stream that asks
    only_sometimes = {"RUN_ERROR", "STATE_DELTA", "MESSAGES_SNAPSHOT"}
    fields = documented_fields()
    async with asgi_client(make_services(model)) as client:
        # WHEN a user asks
        resp = await client.post(
            "/api/v1/agent",
            json={
                "threadId": "th-doc",
                "runId": "run-doc",
                "messages": [{"id": "m1", "role": "user", "content": "time?"}],
            },
            headers=bearer(),
        )
    frames = [f for f in parse_sse(resp.text) if not f.is_comment_only]
    events = [f.json() for f in frames]
    types = [e["type"] for e in events]
    # THEN the event types are those of the documented chat sequence (all but RUN_ERROR in a successful run)
    assert set(types) == sequence - only_sometimes
    assert sequence | never_sent == {e.value for e in EventType} and not sequence & never_sent
    # AND every frame has an id, and every event exactly the documented fields
    assert all(f.id for f in frames)
    for event in events:
        assert set(event) == fields[event["type"]] | {"type", "timestamp", "metadata"}, event["type"]
        assert event["metadata"]["runId"] == "run-doc", event["type"]
    # AND RUN_STARTED.metadata and the usage entries have the documented keys
    metadata_example = re.search(r"### `RUN_STARTED.metadata`.*?```json\n(.*?)```", text, re.DOTALL)
    assert metadata_example
    assert set(events[0]["metadata"]) == set(json.loads(metadata_example.group(1)))
    usage_keys = {row[0].strip("`") for header, rows in tables(section(text, 3)) if header[0] == "Key" for row in rows}
    assert {"provider", "model", "inputTokens", "outputTokens", "totalTokens"} <= set(events[-1]["usage"][0])
    assert set(events[-1]["usage"][0]) <= usage_keys
    # AND the step is `worker`, never `router`
    steps = {e["stepName"] for e in events if e["type"] in ("STEP_STARTED", "STEP_FINISHED")}
    assert steps == {"worker"}
    # AND the text of a turn is closed before its tool call starts; the arguments come whole in one event
    assert types.index("TEXT_MESSAGE_END") < types.index("TOOL_CALL_START")
    args = [e for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert len(args) == 1 and json.loads(args[0]["delta"]) == {"timezone": "Europe/Paris"}


# ---- documented JSON examples of errors and refusals --------------------------------------------------------
#
# The shapes the code sends, written down as strict models (unknown keys refused, ``details`` never null). The
# examples in the documents must validate against them, and the tests below check the models against what the
# code really sends, so neither the documents nor the models can drift from the code.

WIRE_CODE = r"^[a-z]+(?:_[a-z]+)*$"
EXAMPLE_DOCS = [*sorted(DOCS.glob("*.md")), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HttpErrorDetail(_Strict):
    code: str = Field(pattern=WIRE_CODE)
    message: str = Field(min_length=1)
    details: Any = None

    @field_validator("details")
    @classmethod
    def _never_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("details is omitted, never null")
        return value


class HttpErrorBody(_Strict):
    """``functions.agent_api.errors.error_body``: every non-SSE error response (errors.md §1)."""

    error: HttpErrorDetail


class ToolErrorDetail(_Strict):
    code: str = Field(pattern=WIRE_CODE)
    message: str = Field(min_length=1)
    availableTools: list[str] | None = None  # the wire name


class ToolErrorContent(_Strict):
    """A tool result that is an error (errors.md §4): refusals (``GateDecision.model_error``) included."""

    error: ToolErrorDetail


def _documented_error_examples() -> Iterator[tuple[str, str, Any]]:
    """(document, kind, example) for every parseable JSON example of an error, refusal or RUN_ERROR."""
    for path in EXAMPLE_DOCS:
        text = path.read_text(encoding="utf-8")
        candidates: list[str] = []
        for block in re.findall(r"```(?:json|text)\n(.*?)```", text, re.DOTALL):
            candidates.append(block)
            candidates += [line.removeprefix("data: ") for line in block.splitlines() if line.startswith("data: {")]
        for candidate in candidates:
            try:
                value = json.loads(candidate)
            except ValueError:
                continue  # a shape with placeholders, or several lines of SSE
            yield from _classify(path.name, value)


def _classify(where: str, value: Any) -> Iterator[tuple[str, str, Any]]:
    if not isinstance(value, dict):
        return
    if value.get("type") == "RUN_ERROR":
        yield where, "run_error", value
    elif value.get("type") == "TOOL_CALL_RESULT":
        try:
            content = json.loads(value.get("content", ""))
        except ValueError:
            return
        yield from _classify(where, content)
    elif "error" in value:
        code = value["error"].get("code") if isinstance(value["error"], dict) else value["error"]
        yield where, "tool" if code in tool_error_codes_in_source() else "http", value


def _problem(kind: str, example: Any) -> str | None:
    from ag_ui.core import RunErrorEvent

    model: Any = {"run_error": RunErrorEvent, "tool": ToolErrorContent, "http": HttpErrorBody}[kind]
    try:
        model.model_validate(example)
    except ValidationError as exc:
        return f"{kind}: {json.dumps(example)[:120]}: {exc.errors()[0]['msg']}"
    if kind == "run_error" and example.get("code") not in set(RUN_ERROR_MESSAGES) | {STREAM_UNAVAILABLE}:
        return f"RUN_ERROR example with a code no run ends with: {example.get('code')}"
    return None


def test_every_documented_error_or_refusal_example_validates_against_what_the_code_sends() -> None:
    examples = list(_documented_error_examples())
    kinds = {kind for _, kind, _ in examples}
    assert {"http", "tool"} <= kinds, "the documents lost their error examples"
    problems = [f"{where}: {problem}" for where, kind, ex in examples if (problem := _problem(kind, ex))]
    assert problems == []


@pytest.mark.parametrize(
    "example",
    [
        # the refusal shape sse-events.md §5 once showed: `error` as a string, snake_case list
        {"error": "tool_not_allowed", "message": "no", "available_tools": ["get_current_time"]},
        {"error": {"code": "tool_not_allowed", "message": "no", "available_tools": []}},
        {"error": {"code": "not_found", "message": "thread not found", "details": None}},
    ],
)
def test_a_wrong_example_is_caught(example: dict[str, Any]) -> None:
    (classified,) = list(_classify("example.md", example))
    assert _problem(classified[1], classified[2]) is not None


async def test_the_models_accept_what_the_code_sends(make_services: Any, asgi_client: Any) -> None:
    # GIVEN a model that calls a tool nobody has, then the clock with broken arguments, then answers
    model = ScriptedModel(
        Turn(tool_calls=[("call_x", "delete_account", "{}")]),
        Turn(tool_calls=[("call_y", "get_current_time", '{"timezone": ')]),
        Turn(text=["done"]),
    )
    async with asgi_client(make_services(model)) as client:
        run = await client.post(
            "/api/v1/agent",
            json={"threadId": "th-err", "runId": "run-err", "messages": [{"id": "m1", "role": "user", "content": "x"}]},
            headers=bearer(),
        )
        unauthorised = await client.get("/api/v1/threads")
        invalid = await client.get("/api/v1/threads?limit=0", headers=bearer())
        missing = await client.get("/api/v1/threads/nope/history", headers=bearer())
    # THEN the refusal and the tool error the client saw validate as tool errors, with the documented codes
    events = [f.json() for f in parse_sse(run.text) if not f.is_comment_only]
    results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    contents = [ToolErrorContent.model_validate_json(e["content"]) for e in results]
    assert [c.error.code for c in contents] == ["tool_not_allowed", "invalid_arguments"]
    assert contents[0].error.availableTools == ["get_current_time", "update_state"]
    # AND the HTTP errors validate as error bodies
    for resp, code in ((unauthorised, "missing_token"), (invalid, "invalid_request"), (missing, "not_found")):
        assert HttpErrorBody.model_validate(resp.json()).error.code == code


# ---- references to the design summary ---------------------------------------------------------------------


def test_every_design_reference_names_a_section_of_docs_design_md() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", design, flags=re.MULTILINE))
    files = [*ROOT.glob("shared/**/*.py"), *ROOT.glob("functions/**/*.py"), *ROOT.glob("tests/**/*.py")]
    files += [*ROOT.glob("docs/**/*.md"), ROOT / "README.md"]
    references: list[tuple[str, str]] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        old_phrase = "design " + "document"  # split, so this file does not match itself
        assert old_phrase not in text, f"{path}: cite docs/design.md and its section instead"
        references += [(path.name, number) for number in re.findall(r"design\.md\)? §(\d+(?:\.\d+)?)", text)]
    assert len(references) >= 15
    assert [ref for ref in references if ref[1] not in sections] == []
