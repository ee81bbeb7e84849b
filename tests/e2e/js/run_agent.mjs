// Drives the official @ag-ui/client HttpAgent against an SSE endpoint and reports what a real
// client saw, as one JSON object on stdout.
//
// Usage: node run_agent.mjs [input.json]   (reads the input from stdin when no file is given)
//
// Input:
//   { "url": "...", "headers": {...}, "threadId": "...",
//     "turns": [ { "runId": "...", "userMessage": { "id": "...", "content": "..." },
//                  "tools": [...]?, "context": [...]?, "forwardedProps": {...}?, "state": {...}? } ] }
//
// Instead of userMessage a turn may carry "toolResult": { "id": "...", "content": "..." }: the
// client answers the front-end tool call of the newest assistant message (as a human-in-the-loop
// UI does after the user confirmed), adding a role "tool" message, and runs again.
//
// Instead of either, a turn may carry "answerInterrupts": { "status": "resolved" | "cancelled", "payload"?: ... }:
// the client adds no message and answers every interrupt the previous run left open (agent.pendingInterrupts)
// with that response, building the resume with the library's own buildResumeArray, as an approval UI does.
//
// A turn's "state" is set on the agent (agent.setState) before it runs, as a page that edits the shared
// state does; without it the agent keeps the state the previous turns left it with.
//
// A turn's "truncateAfter" (a message id, or null for none) cuts agent.messages back to that message, inclusive,
// before anything else (agent.setMessages), as a chat UI does for an edit (cut to the edited message's parent,
// then add the new text as a new message, with forwardedProps.parentMessageId) or a regenerate (cut to the
// question, add nothing, with forwardedProps.regenerate). A turn with "truncateAfter" needs no message.
//
// All turns run in order on the SAME HttpAgent, so turn N re-sends the messages of turns 1..N-1
// exactly as a browser client does. Per turn the report holds:
//   events          every event the client accepted, as {type, event}
//   runErrorEvents  the RUN_ERROR events handed to onRunErrorEvent (RUN_ERROR does not reject)
//   runFailed       errors handed to onRunFailed (schema, ordering and transport failures)
//   error           the runAgent rejection, or null
//   newMessages     the newMessages of the runAgent result (null when it rejected)
//   result          the `result` of the runAgent result (null when it rejected)
//   messages        agent.messages after the turn
//   state           agent.state after the turn
//   pendingInterrupts agent.pendingInterrupts after the turn (AG-UI 1.0 interrupts still open)
//   requests        what was POSTed (body parsed) and the response: status, headers, and the
//                   raw body text as received on the wire
//   logs            what the library wrote to the console during the turn
//   unhandled       unhandled promise rejections raised during the turn
//
// Exit codes: 0 whenever the report was written (run errors are data, not harness failures),
// 2 for bad input or a missing @ag-ui/client install, 1 for any other harness crash.
import { readFileSync } from "node:fs";
import { inspect } from "node:util";

const HARNESS_BAD_INPUT = 2;
const WIRE_GRACE_MS = 2000;

function fail(message, code = HARNESS_BAD_INPUT) {
  process.stderr.write(`run_agent.mjs: ${message}\n`);
  process.exit(code);
}

function describeError(error) {
  if (error instanceof Error) {
    const described = { name: error.name, message: error.message, stack: error.stack ?? null };
    if (Array.isArray(error.issues)) described.issues = error.issues;
    if (error.cause !== undefined) described.cause = inspect(error.cause, { depth: 4 });
    return described;
  }
  return { name: typeof error, message: String(error), stack: null };
}

/** Plain JSON copy: drops functions, freezes nothing, survives structured events. */
function plain(value) {
  return value === undefined ? null : JSON.parse(JSON.stringify(value));
}

function readInput() {
  const source = process.argv[2];
  let text;
  try {
    text = source ? readFileSync(source, "utf8") : readFileSync(0, "utf8");
  } catch (error) {
    fail(`cannot read input ${source ?? "<stdin>"}: ${error.message}`);
  }
  let input;
  try {
    input = JSON.parse(text);
  } catch (error) {
    fail(`input is not JSON: ${error.message}`);
  }
  if (typeof input?.url !== "string" || input.url === "") fail("input.url must be a non-empty string");
  if (!Array.isArray(input.turns) || input.turns.length === 0) fail("input.turns must be a non-empty array");
  input.turns.forEach((turn, index) => {
    if (turn?.truncateAfter !== undefined && turn?.userMessage === undefined && turn?.toolResult === undefined) {
      return;
    }
    if (turn?.answerInterrupts !== undefined) {
      if (!["resolved", "cancelled"].includes(turn.answerInterrupts?.status)) {
        fail(`input.turns[${index}].answerInterrupts.status must be "resolved" or "cancelled"`);
      }
      return;
    }
    const message = turn?.userMessage ?? turn?.toolResult;
    if (typeof message?.id !== "string" || typeof message?.content !== "string") {
      fail(`input.turns[${index}] needs a userMessage, toolResult or answerInterrupts`);
    }
  });
  return input;
}

// The library reports through console.*; stdout must carry only the JSON report, so every console
// method is redirected into the current turn's log (and mirrored to stderr for humans).
let currentTurn = null;
const harnessLog = [];
for (const level of ["log", "info", "debug", "warn", "error"]) {
  console[level] = (...args) => {
    const line = args.map((arg) => (typeof arg === "string" ? arg : inspect(arg, { depth: 4 }))).join(" ");
    (currentTurn ? currentTurn.logs : harnessLog).push({ level, line });
    process.stderr.write(`[${level}] ${line}\n`);
  };
}
process.on("unhandledRejection", (reason) => {
  (currentTurn ? currentTurn.unhandled : harnessLog).push(describeError(reason));
});

async function loadClient() {
  try {
    return await import("@ag-ui/client");
  } catch (error) {
    fail(`cannot load @ag-ui/client (run npm ci in this folder): ${error.message}`);
  }
}

/** A fetch that records each request (body parsed) and its response (head and raw body text). */
function recordingFetch() {
  return async (url, init) => {
    const record = {
      url,
      method: init?.method ?? "GET",
      headers: plain(init?.headers ?? {}),
      body: null,
      response: null,
    };
    try {
      record.body = typeof init?.body === "string" ? JSON.parse(init.body) : null;
    } catch {
      record.body = init.body;
    }
    const turn = currentTurn;
    (turn ? turn.requests : harnessLog).push(record);
    const response = await fetch(url, init);
    record.response = {
      status: response.status,
      headers: Object.fromEntries(response.headers.entries()),
      body: null,
    };
    // A tee of the body, read alongside the client, so the report shows the exact bytes on the wire.
    const wire = response
      .clone()
      .text()
      .then(
        (text) => {
          record.response.body = text;
        },
        (error) => {
          record.response.bodyError = describeError(error);
        },
      );
    if (turn) turn.pendingReads.push(wire);
    return response;
  };
}

async function runTurn(agent, spec, buildResumeArray) {
  const turn = {
    runId: spec.runId ?? null,
    events: [],
    runErrorEvents: [],
    runFailed: [],
    error: null,
    newMessages: null,
    result: null,
    messages: null,
    state: null,
    requests: [],
    logs: [],
    unhandled: [],
    pendingReads: [],
  };
  currentTurn = turn;
  let resume;
  if (spec.truncateAfter !== undefined) {
    const keep = spec.truncateAfter === null ? 0 : agent.messages.findIndex((m) => m.id === spec.truncateAfter) + 1;
    if (spec.truncateAfter !== null && keep === 0) fail(`truncateAfter: no message ${spec.truncateAfter}`);
    agent.setMessages(agent.messages.slice(0, keep));
  }
  if (spec.answerInterrupts) {
    const responses = Object.fromEntries(agent.pendingInterrupts.map((i) => [i.id, spec.answerInterrupts]));
    resume = buildResumeArray(agent.pendingInterrupts, responses);
  } else if (spec.toolResult) {
    const call = [...agent.messages].reverse().find((m) => m.role === "assistant" && m.toolCalls?.length)
      ?.toolCalls?.at(-1);
    if (!call) fail("toolResult turn: no assistant tool call to answer");
    agent.addMessage({ id: spec.toolResult.id, role: "tool", toolCallId: call.id, content: spec.toolResult.content });
  } else if (spec.userMessage) {
    agent.addMessage({ id: spec.userMessage.id, role: "user", content: spec.userMessage.content });
  }
  if (spec.state !== undefined) agent.setState(spec.state);
  const subscriber = {
    onEvent: ({ event }) => {
      turn.events.push({ type: event.type, event: plain(event) });
    },
    onRunErrorEvent: ({ event }) => {
      turn.runErrorEvents.push(plain(event));
    },
    onRunFailed: ({ error }) => {
      turn.runFailed.push(describeError(error));
    },
  };
  const parameters = {};
  for (const key of ["runId", "tools", "context", "forwardedProps"]) {
    if (spec[key] !== undefined) parameters[key] = spec[key];
  }
  if (resume !== undefined) parameters.resume = resume;
  try {
    const outcome = await agent.runAgent(parameters, subscriber);
    turn.newMessages = plain(outcome.newMessages);
    turn.result = plain(outcome.result);
  } catch (error) {
    turn.error = describeError(error);
  }
  // The tee ends with the response; a server that keeps the stream open after the run ended
  // (which the report should show, not hang on) gets a short grace period.
  const settled = await Promise.race([
    Promise.all(turn.pendingReads).then(() => true),
    new Promise((resolve) => setTimeout(() => resolve(false), WIRE_GRACE_MS)),
  ]);
  if (!settled) {
    turn.logs.push({ level: "harness", line: `response body still open ${WIRE_GRACE_MS} ms after the run ended` });
  }
  delete turn.pendingReads;
  // Let fire-and-forget callbacks (onFinalize, late rejections) land in this turn's record.
  await new Promise((resolve) => setTimeout(resolve, 0));
  turn.messages = plain(agent.messages);
  turn.state = plain(agent.state);
  turn.pendingInterrupts = plain(agent.pendingInterrupts);
  currentTurn = null;
  return turn;
}

async function main() {
  const input = readInput();
  const { HttpAgent, buildResumeArray } = await loadClient();
  const agent = new HttpAgent({
    url: input.url,
    headers: input.headers ?? {},
    ...(input.threadId !== undefined ? { threadId: input.threadId } : {}),
    fetch: recordingFetch(),
  });
  const turns = [];
  for (const spec of input.turns) {
    turns.push(await runTurn(agent, spec, buildResumeArray));
  }
  return { threadId: agent.threadId, turns, harnessLog };
}

// Exit explicitly once the report is flushed: keep-alive sockets would otherwise hold the process.
main().then(
  (report) => process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0)),
  (error) => fail(`harness crashed: ${error?.stack ?? error}`, 1),
);
