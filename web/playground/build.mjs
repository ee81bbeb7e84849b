// Bundles the playground page into the folder the app serves (functions/agent_api/playground_static).
// Run by `make playground`, which `make dev` and `make test` depend on. No CDN at run time: every byte the
// page loads comes from this bundle.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "..", "functions", "agent_api", "playground_static");
mkdirSync(out, { recursive: true });

await build({
  entryPoints: [join(here, "src", "main.js")],
  outfile: join(out, "app.js"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2022"],
  platform: "browser",
  legalComments: "none",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
});
for (const name of ["index.html", "app.css"]) copyFileSync(join(here, "src", name), join(out, name));
console.log(`playground built in ${out}`);
