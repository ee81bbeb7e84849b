// JSON calls to the agent API, and errors described the way a person should read them (docs/protocols/agent/errors.md).

export class ApiError extends Error {
  constructor(status, body) {
    const error = body && typeof body === "object" && body.error && typeof body.error === "object" ? body.error : {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || (status === 0 ? "network_error" : "http_error");
    this.details = error.details;
  }
}

export async function apiJson(path, { token, method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (error) {
    throw new ApiError(0, { error: { code: "network_error", message: `cannot reach the server (${error.message})` } });
  }
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = text;
  }
  if (!response.ok) throw new ApiError(response.status, parsed);
  return parsed;
}

/** An HttpAgent failure (it attaches `status` and the parsed `payload` to HTTP errors) as an ApiError. */
export function fromAgentError(error) {
  if (error instanceof ApiError) return error;
  if (typeof error?.status === "number") return new ApiError(error.status, error.payload);
  return new ApiError(0, { error: { code: "stream_failed", message: error?.message || String(error) } });
}

function fieldOf(loc) {
  return Array.isArray(loc) ? loc.join(".") : String(loc ?? "");
}

/** What a 429 means for the person in front of the page (docs/protocols/agent/errors.md §2.2). */
function limitHint(code, details) {
  const d = details && typeof details === "object" && !Array.isArray(details) ? details : {};
  const who = d.scope === "tenant" ? "your organisation's" : "your";
  if (code === "too_many_runs") {
    return `Nothing was started: ${who} runs in progress are at the limit (${d.used} of ${d.limit}). ` +
      "Send again when one ends (the server suggests waiting a few seconds).";
  }
  const resets = d.resetAt ? ` It resets at ${d.resetAt}.` : "";
  return `Nothing was started: ${who} ${d.kind} limit is reached (${d.used} of ${d.limit}` +
    `${d.reserve ? `; a run reserves ${d.reserve} tokens` : ""}).${resets} See Usage.`;
}

/** What to do about a refused image or file (docs/protocols/agent/errors.md, run-agent-input.md §3.4). */
const ATTACHMENT_HINTS = {
  media_type_mismatch: "a file is not what its name says (its bytes are another type). Attach the real file.",
  unsupported_media_type: "images must be PNG, JPEG, WebP or GIF; documents PDF or plain text.",
  unsupported_modality: "this profile's model does not take that kind of input. Send text, or use a profile that does.",
  attachment_too_large: "a file is over 512 KiB, or the message's files over 720 KiB together.",
  image_too_large: "an image has too many pixels (at most 12,845,056). Send a smaller one.",
  too_many_parts: "at most 8 images and files per message.",
  unreadable_document: "the PDF could not be read.",
  unsafe_url: "a URL source is not allowed (https only, public hosts, and only when the profile allows it).",
};

/** {title, lines[], hint} for the error banner. */
export function describe(error) {
  const { status, code, message, details } = error;
  const lines = [];
  if (status !== 429 && Array.isArray(details)) {
    for (const d of details) {
      if (d && typeof d === "object" && "loc" in d) lines.push(`${fieldOf(d.loc)}: ${d.msg}`);
      else lines.push(JSON.stringify(d));
    }
  }
  let hint = "";
  if (status === 401) {
    hint = "Get a token: run `make token` (add SCOPES=agent:audit for the audit panel) and paste it above.";
  } else if (status === 403 && code === "missing_scope") {
    hint = "This needs a token with the agent:audit scope: `SCOPES=agent:audit make token`.";
  } else if (status === 409 && code === "thread_busy") {
    hint = "This thread already has a run in progress. Wait for it to end (or cancel it), then send again.";
  } else if (status === 409 && code === "run_id_conflict") {
    hint = "This run id was used with another body; send again (a new run id is generated).";
  } else if (status === 422 && ATTACHMENT_HINTS[code]) {
    hint = `Nothing was sent: ${ATTACHMENT_HINTS[code]}`;
  } else if (status === 422) {
    hint = lines.length ? "Fix the field named above and send again." : "The request was refused as invalid.";
  } else if (status === 429) {
    hint = limitHint(code, details);
  } else if (status === 503) {
    hint = "Nothing was started; retry in a moment.";
  } else if (status === 0) {
    hint = "Check that `make dev` is still running.";
  }
  return { title: `${status ? `${status} ` : ""}${code}: ${message}`, lines, hint };
}
