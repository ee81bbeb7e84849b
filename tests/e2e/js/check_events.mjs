// Checks AG-UI events against @ag-ui/core's own zod schemas (what @ag-ui/client applies to each event it reads),
// for streams the HttpAgent does not consume, such as a thread's follower stream (GET /threads/{id}/events).
//
// Usage: node check_events.mjs < events.json   (a JSON array of events)
// Output: one JSON array on stdout, one entry per event: the list of its problems ("path: message"), [] when valid.
import { readFileSync } from "node:fs";
import { EventSchemas } from "@ag-ui/core/schemas";

const events = JSON.parse(readFileSync(0, "utf8"));
const problems = events.map((event) => {
  const parsed = EventSchemas.safeParse(event);
  return parsed.success ? [] : parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
});
process.stdout.write(JSON.stringify(problems));
