"""Run the real AG-UI client and validator against an SSE endpoint or a captured stream.

Two independent judges, because each misses what the other catches (see the AG-UI facts in the
brief): ``@ag-ui/client`` (the browser client, driven by ``tests/e2e/js/run_agent.mjs`` under node)
rejects schema and ordering faults and parses nothing from ``\\r\\n``-framed streams, while the
``ag-ui-validate`` CLI flags a stream that ends without a terminal event, which the client accepts.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

JS_CLIENT_DIR = Path(__file__).resolve().parents[1] / "e2e" / "js"
RUN_AGENT_SCRIPT = JS_CLIENT_DIR / "run_agent.mjs"
CHECK_EVENTS_SCRIPT = JS_CLIENT_DIR / "check_events.mjs"
TERMINAL_EVENT_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_INSTALL_HINT = "run `make test`, or `npm ci` in tests/e2e/js, to install @ag-ui/client"


class AgUiHarnessError(RuntimeError):
    """The harness itself failed (tool missing, crash, timeout), as opposed to a finding about the stream."""


class UserMessage(TypedDict):
    id: str
    content: str


class ToolResult(TypedDict):
    id: str
    content: str


class InterruptAnswer(TypedDict):
    """The answer given to every open interrupt (the client builds ``resume`` with ``buildResumeArray``)."""

    status: str
    payload: NotRequired[Any]


class Turn(TypedDict):
    """One ``runAgent`` call: the user message (or the answer to the newest front-end tool call, or to the open
    interrupts) appended before it, and the run parameters."""

    runId: str
    userMessage: NotRequired[UserMessage]
    toolResult: NotRequired[ToolResult]
    answerInterrupts: NotRequired[InterruptAnswer]
    tools: NotRequired[list[dict[str, Any]]]
    context: NotRequired[list[dict[str, Any]]]
    forwardedProps: NotRequired[dict[str, Any]]
    state: NotRequired[dict[str, Any]]
    truncateAfter: NotRequired[str | None]
    """Cut the agent's messages back to this id (None: to none) first, as a UI does to edit or regenerate."""


class ClientEvent(TypedDict):
    type: str
    event: dict[str, Any]


class ClientError(TypedDict):
    name: str
    message: str
    stack: str | None


class RecordedRequest(TypedDict):
    url: str
    method: str
    headers: dict[str, str]
    body: Any
    response: dict[str, Any] | None


class TurnReport(TypedDict):
    """What the JS client saw during one turn (see run_agent.mjs for the meaning of each key)."""

    runId: str | None
    events: list[ClientEvent]
    runErrorEvents: list[dict[str, Any]]
    runFailed: list[ClientError]
    error: ClientError | None
    newMessages: list[dict[str, Any]] | None
    result: Any
    messages: list[dict[str, Any]]
    state: Any
    requests: list[RecordedRequest]
    logs: list[dict[str, str]]
    unhandled: list[ClientError]
    pendingInterrupts: list[dict[str, Any]]


class JsAgentReport(TypedDict):
    threadId: str
    turns: list[TurnReport]
    harnessLog: list[Any]


def turn_problems(turn: TurnReport) -> list[str]:
    """Every sign of failure in a turn, as readable lines; empty when the client was satisfied.

    Two checks go beyond what the client itself reports, because runAgent resolves without error
    in both cases: a stream that parsed to zero events, and one that ended without a terminal
    event (the client then reports success with a partial answer).
    """
    problems: list[str] = []
    if turn["error"] is not None:
        problems.append(f"runAgent rejected: {turn['error']['name']}: {turn['error']['message']}")
    problems.extend(f"onRunFailed: {e['name']}: {e['message']}" for e in turn["runFailed"])
    problems.extend(f"RUN_ERROR event: {e.get('message')}" for e in turn["runErrorEvents"])
    problems.extend(f"unhandled rejection: {e['message']}" for e in turn["unhandled"])
    types = [e["type"] for e in turn["events"]]
    if not types:
        problems.append("the client parsed zero events")
    elif types[-1] not in TERMINAL_EVENT_TYPES:
        problems.append(f"stream ended after {types[-1]} without RUN_FINISHED or RUN_ERROR")
    return problems


def _node_executable() -> str:
    if not (JS_CLIENT_DIR / "node_modules" / "@ag-ui" / "client").is_dir():
        raise AgUiHarnessError(f"@ag-ui/client is not installed under {JS_CLIENT_DIR}: {_INSTALL_HINT}")
    node = shutil.which("node")
    if node is None:
        raise AgUiHarnessError("node is not on PATH; install Node.js 20+ to run the AG-UI client tests")
    return node


def _js_input(url: str, headers: dict[str, str] | None, thread_id: str, turns: list[Turn]) -> bytes:
    return json.dumps({"url": url, "headers": headers or {}, "threadId": thread_id, "turns": turns}).encode()


def _parse_js_output(returncode: int, stdout: bytes, stderr: bytes) -> JsAgentReport:
    err = stderr.decode(errors="replace")
    if returncode != 0:
        raise AgUiHarnessError(f"run_agent.mjs exited {returncode}:\n{err}")
    try:
        report: JsAgentReport = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise AgUiHarnessError(f"run_agent.mjs printed no JSON report ({exc}):\n{err}") from exc
    return report


def run_js_agent(
    url: str,
    headers: dict[str, str] | None,
    thread_id: str,
    turns: list[Turn],
    timeout_s: float = 60,
) -> JsAgentReport:
    """Run the turns in order through one ``HttpAgent`` and return what it saw.

    Blocks: the endpoint must be served by another thread or process (uvicorn in a thread is
    fine). From a coroutine whose own loop serves the endpoint, use `run_js_agent_async`.
    Run errors are reported in the result (see `turn_problems`); only harness failures raise.
    """
    node = _node_executable()
    try:
        done = subprocess.run(
            [node, str(RUN_AGENT_SCRIPT)],
            input=_js_input(url, headers, thread_id, turns),
            capture_output=True,
            timeout=timeout_s,
            cwd=JS_CLIENT_DIR,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = (exc.stderr or b"").decode(errors="replace")
        raise AgUiHarnessError(f"run_agent.mjs did not finish within {timeout_s}s:\n{stderr}") from exc
    return _parse_js_output(done.returncode, done.stdout, done.stderr)


def js_event_problems(events: list[dict[str, Any]], timeout_s: float = 30) -> list[list[str]]:
    """Each event's problems by ``@ag-ui/core``'s schemas (``tests/e2e/js/check_events.mjs``), ``[]`` when valid:
    the judge for streams the ``HttpAgent`` does not read, such as a thread's follower stream."""
    node = _node_executable()
    try:
        done = subprocess.run(
            [node, str(CHECK_EVENTS_SCRIPT)],
            input=json.dumps(events).encode(),
            capture_output=True,
            timeout=timeout_s,
            cwd=JS_CLIENT_DIR,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AgUiHarnessError(f"check_events.mjs did not finish within {timeout_s}s") from exc
    if done.returncode != 0:
        raise AgUiHarnessError(f"check_events.mjs exited {done.returncode}:\n{done.stderr.decode(errors='replace')}")
    problems: list[list[str]] = json.loads(done.stdout)
    return problems


async def run_js_agent_async(
    url: str,
    headers: dict[str, str] | None,
    thread_id: str,
    turns: list[Turn],
    timeout_s: float = 60,
) -> JsAgentReport:
    """`run_js_agent` without blocking the event loop (for endpoints served by this loop)."""
    node = _node_executable()
    process = await asyncio.create_subprocess_exec(
        node,
        str(RUN_AGENT_SCRIPT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS_CLIENT_DIR,
    )
    try:
        async with asyncio.timeout(timeout_s):
            stdout, stderr = await process.communicate(_js_input(url, headers, thread_id, turns))
    except TimeoutError as exc:
        process.kill()
        _, stderr = await process.communicate()
        raise AgUiHarnessError(
            f"run_agent.mjs did not finish within {timeout_s}s:\n{stderr.decode(errors='replace')}"
        ) from exc
    assert process.returncode is not None
    return _parse_js_output(process.returncode, stdout, stderr)


@dataclass(frozen=True)
class Finding:
    """One diagnostic from ``ag-ui-validate``."""

    rule: str
    severity: str
    message: str
    event_index: int
    event_type: str | None = None

    def __str__(self) -> str:
        where = f"event {self.event_index}" + (f" ({self.event_type})" if self.event_type else "")
        return f"{self.severity} {self.rule} at {where}: {self.message}"


@dataclass(frozen=True)
class ValidationResult:
    """The validator's verdict: its exit code (0 clean, 1 findings) and its parsed JSON report."""

    exit_code: int
    findings: tuple[Finding, ...]
    event_count: int
    internal_errors: tuple[str, ...] = ()
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def clean(self) -> bool:
        """No error, no warning, no internal validator error (``info`` findings are allowed)."""
        return not self.errors and not self.warnings and not self.internal_errors

    def describe(self) -> str:
        """All findings, one per line, for assertion messages."""
        lines = [str(f) for f in self.findings] + [f"internal: {e}" for e in self.internal_errors]
        return "\n".join(lines) or "clean"


def validator_executable() -> Path:
    """``ag-ui-validate`` from the running interpreter's environment (a venv's ``bin``)."""
    candidate = Path(sys.executable).parent / "ag-ui-validate"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("ag-ui-validate")
    if found is None:
        raise AgUiHarnessError("ag-ui-validate is not installed: pip install the project's [test] extra")
    return Path(found)


def validate_sse(
    text_or_url: str | Path,
    headers: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> ValidationResult:
    """Validate an AG-UI stream with the ``ag-ui-validate`` CLI.

    ``text_or_url`` is a live endpoint (``http(s)://...``: the CLI POSTs its own minimal
    RunAgentInput, with ``headers`` added), a `Path` to a recorded stream, or the captured body
    text itself (piped to the CLI's stdin). Exit code 2 (the tool could not run) raises.
    """
    command = [str(validator_executable()), "--json", "--no-color"]
    stdin: bytes | None = None
    if isinstance(text_or_url, Path):
        command.append(str(text_or_url))
    elif text_or_url.startswith(("http://", "https://")):
        command.append(text_or_url)
        for name, value in (headers or {}).items():
            command += ["--header", f"{name}: {value}"]
        command += ["--timeout", str(timeout_s)]
    else:
        command.append("-")
        stdin = text_or_url.encode()
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, timeout=timeout_s + 5, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AgUiHarnessError(f"ag-ui-validate did not finish within {timeout_s}s") from exc
    stderr = done.stderr.decode(errors="replace")
    if done.returncode not in (0, 1):
        raise AgUiHarnessError(f"ag-ui-validate failed (exit {done.returncode}):\n{stderr}")
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AgUiHarnessError(f"ag-ui-validate printed no JSON report ({exc}):\n{stderr}") from exc
    findings = tuple(
        Finding(
            rule=d["rule"],
            severity=d["severity"],
            message=d["message"],
            event_index=d["eventIndex"],
            event_type=d.get("eventType"),
        )
        for d in report.get("diagnostics", [])
    )
    return ValidationResult(
        exit_code=done.returncode,
        findings=findings,
        event_count=int(report.get("eventCount", 0)),
        internal_errors=tuple(report.get("internalErrors", [])),
        report=report,
    )
