// The playground page: a client of the agent API built on the official @ag-ui/client HttpAgent.
// Everything it shows comes from the API under the caller's bearer token (docs/protocols/agent/).
import { HttpAgent } from "@ag-ui/client";
import { ApiError, apiJson, describe, fromAgentError } from "./api.js";
import { contentOf, partOf, thumbnailsOf } from "./attachments.js";
import { parseFrame, resumableFetch } from "./resumable_fetch.js";

const TOKEN_KEY = "playground.token";
// The front-end tool of the demo: the page runs it (a confirm dialog) and answers it in the next run.
const CONFIRM_BOOKING = {
  name: "confirm_booking",
  description: "Ask the user to confirm a booking before it is made. Returns {\"confirmed\": true|false}.",
  parameters: {
    type: "object",
    properties: { what: { type: "string" }, when: { type: "string" } },
    required: ["what"],
  },
};
const FRONTEND_TOOLS = new Map([[CONFIRM_BOOKING.name, CONFIRM_BOOKING]]);

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const state = {
  token: null,
  devTokens: false,
  threadId: null,
  agent: null,
  running: null, // {runId, view}
  freshThreads: new Set(), // created on this page, no run yet: the API does not know them
  threadStarted: false, // the current thread exists on the server (history and thread stream can be read)
  threadFollow: null, // AbortController of the thread stream
  memoryRuns: new Map(),
  threadState: { state: {}, version: 0 }, // the thread's shared state as the history API returned it
  history: [], // the current branch as the history API last returned it
  editing: null, // {messageId, parentId}: the user message being edited (the composer sends its new text)
  attachments: [], // the Files the attach button chose, sent with the next message
};

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const uid = (prefix) => `${prefix}-${crypto.randomUUID()}`;
const ms = (value) => (value === null || value === undefined ? "–" : `${Math.round(value)} ms`);
const authHeaders = () => (state.token ? { Authorization: `Bearer ${state.token}` } : {});
const api = (path, options = {}) => apiJson(path, { token: state.token, ...options });

// ---- errors and connection status -------------------------------------------------------------------------

function showError(error, context = "") {
  const { title, lines, hint } = describe(error instanceof ApiError ? error : fromAgentError(error));
  const box = $("errors");
  // replaceChildren would write a null child as the text "null": leave the absent parts out.
  const parts = [
    h("div", { class: "title", "data-testid": "error-title" }, context ? `${context}: ${title}` : title),
    lines.length ? h("ul", { "data-testid": "error-fields" }, lines.map((line) => h("li", {}, line))) : null,
    hint ? h("div", { class: "hint", "data-testid": "error-hint" }, hint) : null,
  ];
  box.replaceChildren(...parts.filter(Boolean));
}

function clearError() {
  $("errors").replaceChildren();
}

function showConnection(text) {
  $("connection").textContent = text;
}

// ---- token ----------------------------------------------------------------------------------------------------

function describeToken(token) {
  try {
    const claims = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    const scopes = claims.scope ? ` · scopes: ${claims.scope}` : "";
    return `${claims.sub ?? "?"} @ ${claims.tenant_id ?? "?"}${scopes}`;
  } catch {
    return "token set (not a JWT the page can read)";
  }
}

function setToken(token) {
  state.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-status").textContent = `token: ${describeToken(token)}`;
}

async function mintDevToken(audit = false) {
  const response = await fetch("/playground/dev-token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ audit }),
  });
  if (!response.ok) return null;
  return (await response.json()).token;
}

async function initToken() {
  // The dev-token route exists only under `make dev`; elsewhere the page asks for a token.
  const config = await fetch("/playground/config.json").then((r) => (r.ok ? r.json() : {}), () => ({}));
  state.devTokens = Boolean(config.devTokens);
  const stored = sessionStorage.getItem(TOKEN_KEY);
  if (stored) setToken(stored);
  else if (state.devTokens) {
    const minted = await mintDevToken(false).catch(() => null);
    if (minted) setToken(minted);
  }
  $("token-form").hidden = false;
  $("audit-token").hidden = !state.devTokens;
  if (!state.token) {
    $("token-status").textContent = "no token: paste one (make token)";
    showError(new ApiError(401, { error: { code: "missing_token", message: "no token yet" } }));
  }
}

// ---- threads, history, memories, audit ----------------------------------------------------------------------

async function loadThreads() {
  const list = $("thread-list");
  let items = [];
  try {
    items = (await api("/api/v1/threads?limit=50")).items;
  } catch (error) {
    showError(error, "Threads");
    return [];
  }
  const known = new Set(items.map((t) => t.threadId));
  for (const id of state.freshThreads) if (known.has(id)) state.freshThreads.delete(id);
  const fresh = [...state.freshThreads].map((threadId) => ({ threadId, updatedAt: "", fresh: true }));
  // The API lists unarchived threads, pinned ones first (docs/protocols/agent/api-endpoints.md §4).
  list.replaceChildren(...[...fresh, ...items].map(threadEntry));
  return items;
}

/** A thread of the sidebar: its title ("Untitled" without one) and last message; rename and archive once stored. */
function threadEntry(t) {
  const pick = h(
    "button",
    {
      type: "button",
      class: "pick",
      "aria-current": t.threadId === state.threadId ? "true" : "false",
      title: `${t.threadId}${t.updatedAt ? `, updated ${t.updatedAt}` : " (new)"}`,
      dataset: { threadId: t.threadId },
      onclick: () => selectThread(t.threadId),
    },
    h("span", { class: "title", "data-testid": "thread-title" }, t.title || "Untitled"),
    t.lastMessage ? h("span", { class: "preview", "data-testid": "thread-preview" }, t.lastMessage.preview) : null,
  );
  const item = h("li", { class: t.pinned ? "pinned" : null, dataset: { threadId: t.threadId } }, pick);
  if (!t.fresh) {
    item.append(
      h(
        "span",
        { class: "thread-actions" },
        control("rename-thread", "rename", () => startRename(item, t)),
        control("archive-thread", "archive", () => patchThread(t.threadId, { archived: true }, "Archive")),
      ),
    );
  }
  return item;
}

function startRename(item, t) {
  const field = h("input", { "data-testid": "rename-input", "aria-label": "thread title", value: t.title || "" });
  let finished = false; // removing the focused field fires its blur: finish once
  const done = (save) => {
    if (finished) return;
    finished = true;
    field.remove();
    item.classList.remove("renaming");
    if (save && field.value.trim() !== (t.title || "")) patchThread(t.threadId, { title: field.value.trim() || null }, "Rename");
  };
  field.addEventListener("keydown", (event) => {
    if (event.key === "Enter") done(true);
    else if (event.key === "Escape") done(false);
  });
  field.addEventListener("blur", () => done(false));
  item.classList.add("renaming");
  item.prepend(field);
  field.focus();
  field.select();
}

async function patchThread(threadId, changes, context) {
  try {
    await api(`/api/v1/threads/${encodeURIComponent(threadId)}`, { method: "PATCH", body: changes });
  } catch (error) {
    showError(error, context);
  }
  await loadThreads();
}

async function readHistory(threadId) {
  const items = [];
  let cursor = null;
  for (let page = 0; page < 20; page += 1) {
    const query = new URLSearchParams({ limit: "200" });
    if (cursor) query.set("cursor", cursor);
    let body;
    try {
      body = await api(`/api/v1/threads/${encodeURIComponent(threadId)}/history?${query}`);
    } catch (error) {
      if (error.status === 404) return []; // a new thread has no history yet
      throw error;
    }
    items.push(...body.items);
    if (page === 0) state.threadState = { state: body.state ?? {}, version: body.stateVersion ?? 0 };
    if (!body.nextCursor) break;
    cursor = body.nextCursor;
  }
  return items;
}

/** History messages as the AG-UI messages HttpAgent sends (the server takes only user messages it lacks). */
function agentMessages(history) {
  return history.map((m) => {
    if (m.role === "tool") return { id: m.id, role: "tool", toolCallId: m.toolCallId, content: m.content };
    if (m.role === "assistant") {
      const msg = { id: m.id, role: "assistant", content: m.content };
      if (m.toolCalls) msg.toolCalls = m.toolCalls;
      return msg;
    }
    // A stored message's images stay on the server (it takes only user messages it lacks): their text stands in.
    const content = m.content || (m.parts?.length ? "[attachments]" : m.content);
    return { id: m.id, role: m.role === "system" ? "system" : "user", content };
  });
}

function renderHistoryPanel(history) {
  $("history").replaceChildren(
    ...(history.length
      ? history.map((m) =>
          h(
            "li",
            { dataset: { role: m.role, messageId: m.id } },
            h("strong", {}, m.role),
            m.partial ? " (partial)" : "",
            ": ",
            m.content || (m.toolCalls ? m.toolCalls.map((c) => `calls ${c.function.name}`).join(", ") : ""),
          ),
        )
      : [h("li", { class: "muted" }, "no messages yet")]),
  );
}

function renderConversation(history) {
  const box = $("messages");
  box.replaceChildren();
  const cards = new Map();
  for (const m of history) {
    if (m.role === "user") box.append(messageBubble("user", m.id, m.content));
    else if (m.role === "assistant") {
      if (m.content) {
        const bubble = messageBubble("assistant", m.id, m.content);
        if (m.partial) bubble.classList.add("partial");
        box.append(bubble);
      }
      for (const call of m.toolCalls ?? []) {
        const card = toolCard(call.id, call.function.name);
        card.querySelector(".args").textContent = call.function.arguments;
        cards.set(call.id, card);
        box.append(card);
      }
    } else if (m.role === "tool" && cards.has(m.toolCallId)) {
      setToolResult(cards.get(m.toolCallId), m.content);
    }
  }
}

// ---- branches: edit, regenerate, and the sibling arrows (docs/protocols/agent/run-agent-input.md §3.3) -------
// The controls' labels are drawn by CSS from data attributes, so a bubble's text stays the message's text.

function control(testid, label, onclick, data = {}) {
  return h("button", { type: "button", class: `ctl ${testid}`, "data-testid": testid, "aria-label": label, title: label, dataset: data, onclick });
}

function decorateConversation(history) {
  const box = $("messages");
  box.querySelectorAll(".controls, .parts").forEach((el) => el.remove());
  history.forEach((m, index) => {
    const bubble = box.querySelector(`.msg[data-message-id="${CSS.escape(m.id)}"]`);
    if (!bubble) return;
    if (m.parts?.length) bubble.append(thumbnailsOf(m.parts, authHeaders(), h));
    const controls = h("span", { class: "controls" });
    if (m.siblingIds?.length > 1) {
      const at = m.siblingIds.indexOf(m.id);
      const go = (step) => () => switchTo(m.siblingIds[at + step]);
      controls.append(
        control("sibling-prev", "previous version", at > 0 ? go(-1) : null, {}),
        h("span", { class: "ctl-pos", "data-testid": "sibling-position", dataset: { position: `${at + 1} / ${m.siblingIds.length}` } }),
        control("sibling-next", "next version", at < m.siblingIds.length - 1 ? go(1) : null, {}),
      );
      controls.querySelector(".sibling-prev").disabled = at === 0;
      controls.querySelector(".sibling-next").disabled = at === m.siblingIds.length - 1;
    }
    if (m.role === "user") controls.append(control("edit-message", "edit", () => startEdit(m)));
    const question = history.slice(0, index).reverse().find((q) => q.role === "user");
    if (m.role === "assistant" && question) controls.append(control("regenerate", "regenerate", () => regenerate(question.id)));
    if (m.role === "assistant" && !m.partial) controls.append(...thumbs(m));
    if (controls.childElementCount) bubble.append(controls);
  });
}

/** Thumbs up and down on an answer, pressed as its stored feedback says; pressing the pressed one removes it. */
function thumbs(m) {
  const score = m.feedback?.score ?? 0;
  return [[1, "thumb-up", "good answer"], [-1, "thumb-down", "bad answer"]].map(([value, testid, label]) => {
    const button = control(testid, label, () => giveFeedback(m.id, score === value ? null : value));
    button.setAttribute("aria-pressed", score === value ? "true" : "false");
    return button;
  });
}

async function giveFeedback(messageId, score) {
  const path = `/api/v1/threads/${encodeURIComponent(state.threadId)}/messages/${encodeURIComponent(messageId)}/feedback`;
  try {
    await api(path, score === null ? { method: "DELETE" } : { method: "POST", body: { score } });
  } catch (error) {
    showError(error, "Feedback");
  }
  await refreshHistory();
}

/** The messages the agent holds for a branch cut back to ``lastId`` (inclusive; null: none). */
function messagesUpTo(lastId) {
  if (lastId === null) return [];
  const at = state.history.findIndex((m) => m.id === lastId);
  return agentMessages(state.history.slice(0, at + 1));
}

async function showBranch() {
  const history = await refreshHistory();
  renderConversation(history);
  decorateConversation(history);
  state.agent?.setMessages(agentMessages(history));
}

async function switchTo(messageId) {
  if (state.running) return;
  clearError();
  setBusy(true);
  try {
    await api(`/api/v1/threads/${encodeURIComponent(state.threadId)}/branch`, {
      method: "PUT",
      body: { throughMessageId: messageId },
    });
    await showBranch();
  } catch (error) {
    showError(error, "Switch branch");
  } finally {
    setBusy(false);
  }
}

async function regenerate(questionId) {
  if (state.running) return;
  clearError();
  state.agent.setMessages(messagesUpTo(questionId));
  await runOnce({ forwardedProps: { regenerate: true }, redraw: true });
}

function startEdit(message) {
  state.editing = { messageId: message.id, parentId: message.parentId ?? null };
  const input = $("composer").querySelector("textarea");
  input.value = message.content;
  $("editing").hidden = false;
  input.focus();
}

function stopEdit() {
  state.editing = null;
  $("editing").hidden = true;
}

// ---- shared state: the thread's STATE_SNAPSHOT, and each STATE_DELTA as it arrives ---------------------------

function renderState(value, version = null) {
  $("state").textContent = JSON.stringify(value ?? {}, null, 2);
  if (version !== null) $("state-version").textContent = `version ${version}`;
}

function addStateDelta(delta) {
  $("state-deltas").append(h("li", { class: "mono", dataset: { kind: "delta" } }, JSON.stringify(delta)));
}

async function refreshHistory() {
  if (!state.threadId || !state.token) return [];
  try {
    const history = await readHistory(state.threadId);
    state.history = history;
    renderHistoryPanel(history);
    decorateConversation(history);
    return history;
  } catch (error) {
    showError(error, "History");
    return [];
  }
}

/** The caller's usage today and this month, their limits and what remains (GET /api/v1/usage). */
async function refreshUsage() {
  if (!state.token) return;
  const box = $("usage");
  try {
    const usage = await api("/api/v1/usage");
    const tokens = (period) =>
      Object.entries(period.tokens).map(([model, t]) => `${model}: ${t.input} in, ${t.cachedInput} cached, ${t.output} out`);
    const rows = [
      // Thread titles are usage of their own kind (runs.title), not runs: shown beside them.
      h("div", { "data-testid": "usage-day" }, `today: ${usage.day.totalTokens} tokens, ${Object.entries(usage.day.runs).filter(([kind]) => kind !== "title").reduce((a, [, n]) => a + n, 0)} runs${usage.day.runs.title ? `, ${usage.day.runs.title} titles` : ""}, ~$${usage.day.estimatedCostUsd}`),
      ...tokens(usage.day).map((line) => h("div", { class: "muted" }, line)),
      h("div", { "data-testid": "usage-month" }, `this month: ${usage.month.totalTokens} tokens, ~$${usage.month.estimatedCostUsd}`),
    ];
    if (usage.limitsEnabled) {
      const limits = Object.entries(usage.limits.user).map(([k, v]) => `${k} ${usage.remaining.user[k]} left of ${v}`);
      rows.push(h("div", { "data-testid": "usage-limits" }, limits.length ? `limits: ${limits.join(" · ")}` : "no limits on you"));
      rows.push(h("div", { class: "muted" }, `counted: ${usage.counted.tokensToday} tokens today, ${usage.counted.activeRuns} runs active`));
    } else {
      rows.push(h("div", { class: "muted", "data-testid": "usage-limits" }, "limits off (LIMITS unset)"));
    }
    box.replaceChildren(...rows);
  } catch (error) {
    box.replaceChildren(h("div", { class: "muted" }, describe(error).title));
  }
}

async function refreshMemories() {
  if (!state.token) return;
  const list = $("memories");
  try {
    const { items } = await api("/api/v1/memories?includeInactive=true");
    list.replaceChildren(
      ...(items.length
        ? items.map((m) =>
            h(
              "li",
              { dataset: { memoryId: m.id, status: m.status } },
              h("strong", {}, `[${m.kind}] `),
              m.content,
              h(
                "div",
                { class: "muted" },
                `${m.status} · confidence ${m.confidence} · evidence “${m.evidenceQuote}” · from ${m.sourceMessageIds.join(", ")}`,
                m.runId ? ` · run ${m.runId}` : "",
                m.threadId ? ` · thread ${m.threadId}` : "",
              ),
            ),
          )
        : [h("li", { class: "muted" }, "no memories yet")]),
    );
  } catch (error) {
    list.replaceChildren(h("li", { class: "muted" }, describe(error).title));
  }
}

async function loadAudit() {
  const box = $("audit");
  if (!state.threadId) return;
  try {
    const audit = await api(`/api/v1/threads/${encodeURIComponent(state.threadId)}/audit`);
    const hidden = audit.messages.filter((m) => m.hiddenFromUser).length;
    box.replaceChildren(
      h("div", { class: "muted" }, `${audit.messages.length} messages (${hidden} hidden) · ${audit.decisions.length} decisions`),
      h(
        "table",
        { "data-testid": "audit-runs" },
        h("tr", {}, h("th", {}, "run"), h("th", {}, "status"), h("th", {}, "executor"), h("th", {}, "hidden"), h("th", {}, "tokens")),
        audit.runs.map((r) =>
          h(
            "tr",
            {},
            h("td", { class: "mono" }, r.runId),
            h("td", {}, r.status, r.errorCode ? ` (${r.errorCode})` : ""),
            h("td", {}, `${r.executor} / ${r.executionProfileName}`),
            h("td", {}, String(r.hiddenFromUser)),
            h("td", {}, r.usage.map((u) => `${u.input_tokens}+${u.output_tokens}${u.estimated ? " est." : ""}`).join(", ")),
          ),
        ),
      ),
      h(
        "table",
        { "data-testid": "audit-decisions" },
        h("tr", {}, h("th", {}, "kind"), h("th", {}, "at"), h("th", {}, "details")),
        audit.decisions.map((d) =>
          h("tr", {}, h("td", {}, d.kind), h("td", {}, d.at), h("td", { class: "mono" }, JSON.stringify(d.details))),
        ),
      ),
    );
  } catch (error) {
    const { title, hint } = describe(error);
    box.replaceChildren(h("div", { class: "errors", "data-testid": "audit-error" }, title, h("div", { class: "hint" }, hint)));
  }
}

async function selectThread(threadId) {
  if (state.running) return;
  const fresh = state.freshThreads.has(threadId);
  state.threadId = threadId;
  state.threadFollow?.abort();
  clearError();
  showConnection("");
  $("thread-id").textContent = threadId;
  for (const button of $("thread-list").querySelectorAll("button.pick")) {
    button.setAttribute("aria-current", button.dataset.threadId === threadId ? "true" : "false");
  }
  $("runs").replaceChildren();
  $("audit").replaceChildren();
  state.memoryRuns.clear();
  // A new thread has nothing to read yet (the API would answer 404): its history and thread stream are read once
  // its first run has started.
  state.threadState = { state: {}, version: 0 };
  stopEdit();
  state.history = [];
  const history = fresh ? [] : await refreshHistory();
  if (fresh) renderHistoryPanel([]);
  renderConversation(history);
  decorateConversation(history);
  $("state-deltas").replaceChildren();
  renderState(state.threadState.state, state.threadState.version);
  state.agent = new HttpAgent({
    url: "/api/v1/agent",
    threadId,
    initialMessages: agentMessages(history),
    initialState: state.threadState.state,
    headers: authHeaders(),
    fetch: resumableFetch({ authHeaders, onStatus: onConnectionStatus }),
  });
  state.threadStarted = !fresh;
  if (!fresh) followThread(threadId);
}

function newThread(requested) {
  const threadId = requested || uid("thread");
  state.freshThreads.add(threadId);
  selectThread(threadId).then(loadThreads);
}

// ---- the thread stream: memory runs (hidden) appear here as lifecycle and step events -------------------------

async function followThread(threadId) {
  state.threadFollow?.abort();
  const controller = new AbortController();
  state.threadFollow = controller;
  let lastEventId = null;
  while (!controller.signal.aborted && state.threadId === threadId && state.token) {
    try {
      const headers = { ...authHeaders(), Accept: "text/event-stream" };
      if (lastEventId) headers["Last-Event-ID"] = lastEventId;
      const response = await fetch(`/api/v1/threads/${encodeURIComponent(threadId)}/events`, {
        headers,
        signal: controller.signal,
      });
      if (!response.ok || !response.body) return;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const { id, event } = parseFrame(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (id) lastEventId = id;
          if (event) onThreadEvent(event);
        }
      }
    } catch {
      if (controller.signal.aborted) return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function onThreadEvent(event) {
  if (event.type === "CUSTOM" && event.name === "thread_title") {
    loadThreads(); // a generated title arrived (sse-events.md §7.2): the sidebar shows it without a reload
    return;
  }
  const runId = event.metadata?.runId;
  if (!runId) return;
  let view = state.memoryRuns.get(runId);
  if (event.type === "RUN_STARTED") {
    if (event.metadata?.executor !== "memory") return;
    view = runView(runId, `memory run (hidden, ${event.metadata.executionProfileName ?? "memory"})`);
    state.memoryRuns.set(runId, view);
  }
  if (!view) return;
  view.add(event);
  if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") {
    view.finish(event);
    refreshMemories();
  }
}

// ---- conversation and run timeline --------------------------------------------------------------------------

function messageBubble(role, id, text = "") {
  return h("li", { class: `msg ${role}`, dataset: { role, messageId: id } }, text);
}

function toolCard(toolCallId, name) {
  const frontend = FRONTEND_TOOLS.has(name);
  return h(
    "li",
    { class: "tool", dataset: { toolCallId, toolName: name, kind: frontend ? "frontend" : "server" } },
    h("span", { class: "label" }, `tool call: ${name}`),
    h("span", { class: "status" }, frontend ? "front-end tool" : "called"),
    h("pre", { class: "args" }, ""),
    h("pre", { class: "result" }, ""),
  );
}

/** A tool result's error code, from either documented error shape ({"error": "code"} or {"error": {"code"}}). */
function toolErrorCode(content) {
  try {
    const parsed = JSON.parse(content);
    const error = parsed?.error;
    if (typeof error === "string") return error;
    if (error && typeof error === "object" && typeof error.code === "string") return error.code;
  } catch {
    // not JSON: an ordinary result
  }
  return null;
}

function setToolResult(card, content) {
  const code = toolErrorCode(content);
  card.querySelector(".result").textContent = content;
  const status = card.querySelector(".status");
  if (code === "tool_not_allowed") {
    card.classList.add("refused");
    status.textContent = "refused: tool_not_allowed";
  } else if (code) {
    card.classList.add("failed");
    status.textContent = `error: ${code}`;
  } else {
    status.textContent = "result";
  }
  card.dataset.result = code ? "error" : "ok";
}

function eventDetail(event, view) {
  switch (event.type) {
    case "RUN_STARTED": {
      const m = event.metadata ?? {};
      return `run ${event.runId} · ${m.executor ?? "?"} / ${m.executionProfileName ?? "?"} · origin ${m.origin ?? "?"}${m.hiddenFromUser ? " · hidden" : ""}`;
    }
    case "STEP_STARTED":
    case "STEP_FINISHED":
      return event.stepName;
    case "TEXT_MESSAGE_START":
    case "TEXT_MESSAGE_END":
      return event.messageId;
    case "TOOL_CALL_START":
      return `${event.toolCallName} (${event.toolCallId})`;
    case "TOOL_CALL_ARGS":
      return event.delta;
    case "TOOL_CALL_END":
      return event.toolCallId;
    case "TOOL_CALL_RESULT": {
      const code = toolErrorCode(event.content);
      return code === "tool_not_allowed" ? `REFUSED tool_not_allowed: ${event.content}` : event.content;
    }
    case "RUN_FINISHED":
      return `outcome ${event.outcome?.type ?? "success"}${event.outcome?.pendingToolCallIds ? ` · pending ${event.outcome.pendingToolCallIds.join(", ")}` : ""}${event.outcome?.interrupts ? ` · waiting for approval: ${event.outcome.interrupts.map((i) => i.metadata?.toolName ?? i.toolCallId).join(", ")}` : ""} · ${usageText(event.usage)}`;
    case "RUN_ERROR":
      return `${event.code}: ${event.message} · ${usageText(event.usage)}`;
    default:
      return view ? "" : JSON.stringify(event);
  }
}

function usageText(usage) {
  if (!usage || !usage.length) return "usage: none";
  return `usage: ${usage.map((u) => `${u.model} ${u.inputTokens} in + ${u.outputTokens} out`).join("; ")}`;
}

/** The timeline of one run: a <details> with one row per event (text deltas folded into one row). */
function runView(runId, label) {
  const started = performance.now();
  const events = h("ol", { class: "events", "data-testid": "events" });
  const metrics = h("span", { class: "metrics", "data-testid": "run-metrics" }, "running…");
  const status = h("span", { class: "status", "data-testid": "run-status" }, "running");
  const box = h("details", { class: "run", open: true, dataset: { runId } }, h("summary", {}, h("strong", {}, label), status, metrics), events);
  $("runs").prepend(box);
  const view = { runId, started, firstText: null, box, contentRow: null, deltas: 0, chars: 0 };
  const row = (type, detail, cls = "") => {
    const item = h(
      "li",
      { class: `ev ${cls}`, dataset: { type } },
      h("span", { class: "t" }, `+${Math.round(performance.now() - started)}`),
      h("span", { class: "type" }, type),
      h("span", { class: "detail" }, detail),
    );
    events.append(item);
    item.scrollIntoView?.({ block: "nearest" });
    return item;
  };
  view.add = (event) => {
    if (event.type === "TEXT_MESSAGE_CONTENT") {
      view.deltas += 1;
      view.chars += event.delta.length;
      if (view.firstText === null) {
        view.firstText = performance.now() - started;
        metrics.textContent = `time to first text ${ms(view.firstText)}`;
      }
      const detail = `${view.deltas} deltas, ${view.chars} chars`;
      if (!view.contentRow) view.contentRow = row("TEXT_MESSAGE_CONTENT", detail);
      else view.contentRow.querySelector(".detail").textContent = detail;
      return;
    }
    if (event.type === "TEXT_MESSAGE_END") view.contentRow = null;
    let cls = "";
    if (event.type.startsWith("STEP_")) cls = "step";
    if (event.type === "RUN_ERROR") cls = "error";
    if (event.type === "TOOL_CALL_RESULT" && toolErrorCode(event.content) === "tool_not_allowed") cls = "refused";
    row(event.type, eventDetail(event, view), cls);
  };
  view.connection = (type, detail) => row(type, detail, "conn");
  view.finish = (event) => {
    const total = performance.now() - started;
    let text = "finished";
    if (event?.type === "RUN_ERROR") {
      text = `failed: ${event.code}`;
      box.classList.add("failed");
    } else if (event?.type === "RUN_FINISHED") {
      text = event.outcome?.type === "cancelled" ? "cancelled" : "finished";
    } else if (event === null) {
      text = "not started";
      box.classList.add("failed");
    }
    status.textContent = text;
    box.dataset.status = text;
    const tokens = event?.usage?.reduce((sum, u) => sum + (u.totalTokens ?? u.inputTokens + u.outputTokens), 0);
    metrics.textContent = `time to first text ${ms(view.firstText)} · total ${ms(total)}${tokens !== undefined ? ` · ${tokens} tokens` : ""}`;
  };
  return view;
}

function onConnectionStatus(status) {
  const view = state.running?.view;
  const at = status.lastEventId ? `Last-Event-ID ${status.lastEventId}` : "the start of the run";
  if (status.kind === "dropped") {
    showConnection(`Connection lost during run ${status.runId}; resuming from ${at}…`);
    view?.connection("CONNECTION_LOST", `stream dropped after ${at}`);
  } else if (status.kind === "retrying") {
    showConnection(`Connection lost; reconnecting (attempt ${status.attempt}) with ${at}…`);
  } else if (status.kind === "resumed") {
    showConnection(`Resumed run ${status.runId} with ${at}.`);
    view?.connection("RESUMED", `GET /api/v1/agent/runs/${status.runId}/events with ${at}`);
  } else if (status.kind === "lost") {
    showConnection(`Could not resume run ${status.runId}${status.status ? ` (HTTP ${status.status})` : ""}. Its messages are in the history.`);
    view?.connection("RESUME_FAILED", status.status ? `HTTP ${status.status}` : "gave up");
  }
}

/** One run on the current thread (``resume``: the answers to the previous run's interrupts); returns the front-end
 * tool calls left for the page to answer and the interrupts (tool calls waiting for approval) the run ended with. */
async function runOnce({ userMessageId = null, resume = undefined, forwardedProps = undefined, redraw = false } = {}) {
  const agent = state.agent;
  agent.headers = authHeaders();
  const runId = uid("run");
  const view = runView(runId, `run ${runId.slice(0, 12)}…`);
  state.running = { runId, view };
  showConnection(""); // a resume notice stays up until the next run
  setBusy(true);
  const box = $("messages");
  const bubbles = new Map();
  const cards = new Map();
  const pending = new Map();
  let terminal = null;
  let failure = null;
  const declareTool = $("declare-frontend-tool").checked;
  const subscriber = {
    onEvent: ({ event }) => {
      view.add(event);
      switch (event.type) {
        case "TEXT_MESSAGE_START": {
          const bubble = messageBubble("assistant", event.messageId);
          bubbles.set(event.messageId, bubble);
          box.append(bubble);
          break;
        }
        case "TEXT_MESSAGE_CONTENT":
          bubbles.get(event.messageId)?.append(event.delta);
          break;
        case "TOOL_CALL_START": {
          // A call approved in an earlier run is named again before its result: its card is already on the page.
          const shown = box.querySelector(`[data-tool-call-id="${CSS.escape(event.toolCallId)}"]`);
          const card = shown ?? toolCard(event.toolCallId, event.toolCallName);
          cards.set(event.toolCallId, card);
          if (!shown) box.append(card);
          if (FRONTEND_TOOLS.has(event.toolCallName)) pending.set(event.toolCallId, { name: event.toolCallName, args: "" });
          break;
        }
        case "TOOL_CALL_ARGS": {
          const card = cards.get(event.toolCallId);
          if (card) card.querySelector(".args").textContent += event.delta;
          if (pending.has(event.toolCallId)) pending.get(event.toolCallId).args += event.delta;
          break;
        }
        case "TOOL_CALL_RESULT": {
          const card = cards.get(event.toolCallId);
          if (card) setToolResult(card, event.content);
          pending.delete(event.toolCallId);
          break;
        }
        case "STATE_SNAPSHOT":
          $("state-deltas").replaceChildren();
          renderState(event.snapshot);
          break;
        case "STATE_DELTA":
          addStateDelta(event.delta);
          break;
        case "RUN_ERROR":
          terminal = event;
          showError(new ApiError(200, { error: { code: event.code, message: event.message } }), "Run failed (RUN_ERROR)");
          break;
        case "RUN_FINISHED":
          terminal = event;
          break;
        default:
          break;
      }
    },
    onStateChanged: ({ state: changed }) => renderState(changed),
    onRunFailed: ({ error }) => {
      failure = fromAgentError(error);
      return { stopPropagation: true };
    },
  };
  try {
    const parameters = { runId, tools: declareTool ? [CONFIRM_BOOKING] : [] };
    if (resume) parameters.resume = resume;
    if (forwardedProps) parameters.forwardedProps = forwardedProps;
    await agent.runAgent(parameters, subscriber);
  } catch (error) {
    failure = fromAgentError(error);
  }
  state.running = null;
  if (failure) {
    if (failure.status && failure.status !== 200 && userMessageId) {
      // Refused before the stream started: nothing was stored, so the message must not ride along next time.
      agent.setMessages(agent.messages.filter((m) => m.id !== userMessageId));
      box.querySelector(`[data-message-id="${userMessageId}"]`)?.classList.add("unsent");
    }
    showError(failure, failure.status ? "Request refused" : "Run failed");
    view.connection(failure.status ? `HTTP_${failure.status}` : "FAILED", describe(failure).title);
    view.finish(terminal);
  } else {
    view.finish(terminal);
  }
  if (terminal?.type === "RUN_FINISHED" && terminal.outcome?.type === "cancelled") {
    [...bubbles.values()].at(-1)?.classList.add("partial");
  }
  if (terminal?.type === "RUN_FINISHED") {
    for (const id of terminal.outcome?.pendingToolCallIds ?? []) {
      if (!pending.has(id) && cards.has(id)) pending.set(id, { name: cards.get(id).dataset.toolName, args: cards.get(id).querySelector(".args").textContent });
    }
  }
  if (!failure || failure.status === 200 || !failure.status) {
    state.freshThreads.delete(state.threadId);
    if (!state.threadStarted) {
      state.threadStarted = true;
      followThread(state.threadId);
    }
    await Promise.all([refreshHistory(), refreshMemories(), loadThreads()]);
    renderState(agent.state, state.threadState.version);
  }
  await refreshUsage();
  if (redraw) await showBranch(); // an edit or a regenerate: the conversation is the new branch, drawn before idle
  setBusy(false);
  if (terminal?.type !== "RUN_FINISHED") return { pending: [], interrupts: [] };
  const interrupts = terminal.outcome?.type === "interrupt" ? terminal.outcome.interrupts : [];
  for (const interrupt of interrupts) {
    const card = cards.get(interrupt.toolCallId);
    if (card) card.querySelector(".status").textContent = "waiting for approval";
  }
  return { pending: [...pending.entries()], interrupts };
}

/** A tool call waiting for approval (an AG-UI interrupt): the tool and its arguments, which the person may edit;
 * resolves to the resume entry that answers it (approve, approve with the edited arguments, or decline). */
function askApproval(interrupt) {
  const dialog = $("approval-dialog");
  const args = interrupt.metadata?.arguments ?? {};
  $("approval-tool").textContent = interrupt.metadata?.toolName ?? interrupt.toolCallId;
  $("approval-message").textContent = interrupt.message ?? "";
  $("approval-expires").textContent = interrupt.expiresAt ?? "";
  $("approval-args").value = JSON.stringify(args, null, 2);
  $("approval-problem").textContent = "";
  return new Promise((resolve) => {
    const done = (entry) => {
      dialog.close();
      resolve({ interruptId: interrupt.id, ...entry });
    };
    $("approval-approve").onclick = () => done({ status: "resolved" });
    $("approval-decline").onclick = () => done({ status: "cancelled" });
    $("approval-edit").onclick = () => {
      try {
        done({ status: "resolved", payload: JSON.parse($("approval-args").value) });
      } catch (error) {
        $("approval-problem").textContent = `The arguments are not JSON: ${error.message}`;
      }
    };
    dialog.oncancel = (event) => event.preventDefault(); // every open interrupt must be answered
    dialog.showModal();
  });
}

/** The front-end tool: a confirm dialog; its answer is sent as a tool message in the next run. */
function askConfirmBooking(args) {
  const dialog = $("confirm-dialog");
  $("confirm-args").textContent = args;
  return new Promise((resolve) => {
    const done = (confirmed) => {
      dialog.close();
      resolve(confirmed);
    };
    $("confirm-accept").onclick = () => done(true);
    $("confirm-decline").onclick = () => done(false);
    dialog.oncancel = () => resolve(false);
    dialog.showModal();
  });
}

async function send(text) {
  if (!state.threadId) newThread("");
  while (!state.agent) await new Promise((resolve) => setTimeout(resolve, 20));
  const files = state.attachments;
  if (state.running || (!text.trim() && !files.length)) return;
  clearError();
  const id = uid("msg");
  const editing = state.editing;
  stopEdit();
  setAttachments([]);
  const parts = await Promise.all(files.map(partOf));
  if (editing) state.agent.setMessages(messagesUpTo(editing.parentId)); // the new text branches off its parent
  $("messages").append(messageBubble("user", id, text));
  state.agent.addMessage({ id, role: "user", content: contentOf(text, parts) });
  const forwardedProps = editing ? { parentMessageId: editing.parentId } : undefined;
  let { pending, interrupts } = await runOnce({ userMessageId: id, forwardedProps, redraw: Boolean(editing) });
  if (parts.length) {
    // Stored now: later runs send the text only (the server keeps the parts; the bytes need not travel again).
    state.agent.setMessages(state.agent.messages.map((m) => (m.id === id ? { ...m, content: text || "[attachments]" } : m)));
  }
  // A front-end tool call ends the run unanswered (AG-UI convention); the page answers it in the next run. Tool
  // calls waiting for approval end it with interrupts; the next run's resume answers every one of them.
  while (pending.length || interrupts.length) {
    const resume = [];
    for (const interrupt of interrupts) resume.push(await askApproval(interrupt));
    for (const [toolCallId, call] of pending) {
      const confirmed = await askConfirmBooking(call.args);
      const content = JSON.stringify({ confirmed });
      state.agent.addMessage({ id: uid("msg"), role: "tool", toolCallId, content });
      const card = $("messages").querySelector(`[data-tool-call-id="${toolCallId}"]`);
      if (card) setToolResult(card, content);
    }
    ({ pending, interrupts } = await runOnce({ resume: resume.length ? resume : undefined }));
  }
}

/** The files chosen with the attach button, listed under the composer until the message is sent. */
function setAttachments(files) {
  state.attachments = files;
  $("attach-input").value = "";
  $("attachments").replaceChildren(
    ...files.map((file) => h("li", { "data-testid": "attachment" }, `${file.name} (${file.type || "unknown type"}, ${file.size} bytes)`)),
  );
  $("clear-attachments").hidden = !files.length;
}

function setBusy(busy) {
  document.body.dataset.running = busy ? "true" : "false";
  $("send").disabled = busy;
  $("cancel-run").disabled = !busy;
  for (const button of $("thread-list").querySelectorAll("button")) button.disabled = busy;
  document.body.classList.toggle("busy", busy);
}

// ---- wiring -------------------------------------------------------------------------------------------------

function wire() {
  const input = $("composer").querySelector("textarea");
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = input.value;
    if ((!text.trim() && !state.attachments.length) || state.running) return;
    input.value = "";
    send(text);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("cancel-run").addEventListener("click", async () => {
    if (!state.running) return;
    try {
      await api(`/api/v1/agent/runs/${encodeURIComponent(state.running.runId)}/cancel`, { method: "POST" });
    } catch (error) {
      showError(error, "Cancel");
    }
  });
  $("new-thread-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = $("new-thread-form").querySelector("input");
    const requested = field.value.trim();
    field.value = "";
    newThread(requested);
    input.focus();
  });
  $("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const field = $("token-form").querySelector("input");
    if (!field.value.trim()) return;
    setToken(field.value.trim());
    field.value = "";
    clearError();
    await afterToken();
  });
  $("audit-token").addEventListener("click", async () => {
    const token = await mintDevToken(true);
    if (token) {
      setToken(token);
      await loadAudit();
    }
  });
  $("cancel-edit").addEventListener("click", () => {
    stopEdit();
    input.value = "";
  });
  $("attach-input").addEventListener("change", (event) => setAttachments([...state.attachments, ...event.target.files]));
  $("clear-attachments").addEventListener("click", () => setAttachments([]));
  $("refresh-memories").addEventListener("click", refreshMemories);
  $("refresh-usage").addEventListener("click", refreshUsage);
  $("load-audit").addEventListener("click", loadAudit);
}

async function afterToken() {
  const threads = await loadThreads();
  const wanted = new URLSearchParams(window.location.search).get("thread");
  if (wanted) await selectThread(wanted);
  else if (threads.length) await selectThread(threads[0].threadId);
  else newThread("");
  await Promise.all([refreshMemories(), refreshUsage()]);
}

async function main() {
  wire();
  await initToken();
  if (state.token) await afterToken();
  document.body.dataset.ready = "true";
}

main();
