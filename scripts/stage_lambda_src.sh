#!/usr/bin/env bash
# Stages the one code folder all five functions are built from: build/lambda-src (template.yaml CodeUri).
#
# Why not CodeUri: . (the repo root): `sam build` copies the whole source folder into every artifact and only
# skips a fixed list (.venv, .git, ...), so tests/, docs/, node_modules and .tools/sam-venv would be shipped.
# The folder holds shared/, functions/ and tool_plugins/ and requirements.txt, a copy of the locked runtime set
# (requirements/runtime.txt: every package pinned with == and its hashes), so `sam build` installs exactly what the
# tests ran (pip turns on hash checking for a file with hashes). A lock that no longer matches pyproject.toml stops
# the staging: re-lock with `make lock` (docs/deployment.md, "What the functions ship").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/build/lambda-src}"

(cd "$ROOT" && python3 -m devtools.locks check)
rm -rf "$OUT"
mkdir -p "$OUT"
python3 - "$ROOT" "$OUT" <<'PY'
import shutil
import sys
from pathlib import Path

root, out = Path(sys.argv[1]), Path(sys.argv[2])
for package in ("shared", "functions", "tool_plugins"):
    shutil.copytree(root / package, out / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
PY
# The Web Adapter executes the handler script directly, and the streams container its command (serve.sh).
for script in run.sh serve.sh; do
  if [[ -f "$OUT/functions/agent_api/$script" ]]; then
    chmod 755 "$OUT/functions/agent_api/$script"
  fi
done
cp "$ROOT/requirements/runtime.txt" "$OUT/requirements.txt"
echo "staged $(find "$OUT" -type f | wc -l) files in $OUT"
