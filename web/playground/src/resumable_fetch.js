// A fetch for HttpAgent that survives a dropped run stream.
//
// AG-UI 1.0 has no resume; this backend adds `id:` lines and GET /api/v1/agent/runs/{runId}/events, which sends
// the events after `Last-Event-ID`. The wrapper hands HttpAgent one continuous SSE body: it forwards only whole
// frames (a frame cut by the drop is discarded), remembers the last `id:`, and when the connection ends before a
// terminal event it reconnects with `Last-Event-ID` and goes on where the stream stopped. HttpAgent's own parser
// and event checks see exactly the events of the run, once each.

const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);
const RETRY_DELAYS_MS = [200, 400, 800, 1500, 2500, 4000, 6000, 8000, 10000];

/** One SSE frame's `id:` and parsed `data:` (null when absent or not JSON). */
export function parseFrame(frame) {
  let id = null;
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("id:")) id = line.slice(3).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  let event = null;
  if (data.length) {
    try {
      event = JSON.parse(data.join("\n"));
    } catch {
      event = null;
    }
  }
  return { id, event };
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * @param {object} options
 * @param {() => Record<string,string>} options.authHeaders  headers for the resume request (the bearer token)
 * @param {(status: object) => void} options.onStatus  {kind: "dropped"|"retrying"|"resumed"|"lost", ...}
 * @param {(runId: string, lastEventId: string|null) => void} [options.onFrame]  after each forwarded frame
 */
export function resumableFetch({ authHeaders, onStatus, onFrame = () => {} }) {
  return async (url, init) => {
    const response = await fetch(url, init);
    if (!response.ok || !response.body) return response;
    let runId = null;
    try {
      runId = JSON.parse(init.body).runId;
    } catch {
      return response;
    }
    const signal = init.signal;
    const origin = new URL(url, window.location.href).origin;
    const encoder = new TextEncoder();
    let lastEventId = null;
    let finished = false;

    async function pump(body, controller) {
      const reader = body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const { id, event } = parseFrame(frame);
            controller.enqueue(encoder.encode(`${frame}\n\n`));
            if (id) lastEventId = id;
            if (event) onFrame(runId, lastEventId);
            if (event && TERMINAL.has(event.type)) {
              finished = true;
              reader.cancel().catch(() => {});
              return;
            }
          }
        }
      } catch (error) {
        if (signal?.aborted) throw error;
        // A reset connection: fall through to resume.
      }
    }

    async function resume(controller) {
      onStatus({ kind: "dropped", runId, lastEventId });
      for (let attempt = 1; attempt <= RETRY_DELAYS_MS.length; attempt += 1) {
        await sleep(RETRY_DELAYS_MS[attempt - 1], signal);
        if (signal?.aborted) return null;
        onStatus({ kind: "retrying", runId, lastEventId, attempt });
        let next;
        try {
          const headers = { ...authHeaders(), Accept: "text/event-stream" };
          if (lastEventId) headers["Last-Event-ID"] = lastEventId;
          next = await fetch(`${origin}/api/v1/agent/runs/${encodeURIComponent(runId)}/events`, { headers, signal });
        } catch {
          continue; // still unreachable
        }
        if (next.ok && next.body) {
          onStatus({ kind: "resumed", runId, lastEventId, attempt });
          return next.body;
        }
        const text = await next.text().catch(() => "");
        onStatus({ kind: "lost", runId, lastEventId, status: next.status, body: text });
        controller.error(Object.assign(new Error(`resume failed with HTTP ${next.status}`), { status: next.status }));
        return null;
      }
      onStatus({ kind: "lost", runId, lastEventId });
      controller.error(new Error("the run stream was lost and could not be resumed"));
      return null;
    }

    const stream = new ReadableStream({
      async start(controller) {
        let body = response.body;
        try {
          while (body) {
            await pump(body, controller);
            if (finished || signal?.aborted) break;
            body = await resume(controller);
          }
          if (finished || signal?.aborted) controller.close();
        } catch (error) {
          controller.error(error);
        }
      },
    });
    return new Response(stream, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}
