#!/usr/bin/env bash
# Stages the one code folder all five functions are built from: build/lambda-src (template.yaml CodeUri).
#
# Why not CodeUri: . (the repo root): `sam build` copies the whole source folder into every artifact and only
# skips a fixed list (.venv, .git, ...), so tests/, docs/, node_modules and .tools/sam-venv would be shipped.
# The folder holds shared/, functions/ and tool_plugins/ and a requirements.txt written from pyproject.toml's
# [project].dependencies, so the runtime dependency list has a single source.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/build/lambda-src}"

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
# The Web Adapter executes the handler script directly.
if [[ -f "$OUT/functions/agent_api/run.sh" ]]; then
  chmod 755 "$OUT/functions/agent_api/run.sh"
fi
python3 - "$ROOT/pyproject.toml" "$OUT/requirements.txt" <<'PY'
import sys
import tomllib

with open(sys.argv[1], "rb") as fh:
    deps = tomllib.load(fh)["project"]["dependencies"]
with open(sys.argv[2], "w", encoding="utf-8") as fh:
    fh.write("# Generated from pyproject.toml by scripts/stage_lambda_src.sh; do not edit.\n")
    fh.writelines(f"{dep}\n" for dep in deps)
PY
echo "staged $(find "$OUT" -type f | wc -l) files in $OUT"
