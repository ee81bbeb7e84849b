#!/usr/bin/env bash
# Installs the offline SAM tooling in its own virtualenv, reached as .tools/sam-venv.
#
# Why a separate venv: aws-sam-cli pins older boto3/pydantic than the application does, so installing it into
# the project venv would downgrade them. The gate (scripts/sam_gate.sh) and tests/infra only use this venv's
# executables, never import from it.
#
# Where: by default the venv lives in the machine's cache (${AGENT_BACKEND_CACHE:-~/.cache/agent-backend}), keyed by
# the pins and the interpreter, and .tools/sam-venv is a link to it, so a fresh clone on the same machine (CI's)
# reuses it instead of installing again (docs/testing.md).
#
# Environment:
#   SAM_TOOLS_VENV    where to create the venv instead (no cache, no link)
#   SAM_TOOLS_PYTHON  interpreter used to create it (default: python3; any 3.9-3.13 works)
# Idempotent: a venv whose stamp matches the pinned versions is left as it is.
#
# It then runs scripts/install_checkov.sh (checkov, the gate's template scan, reached as .tools/checkov-venv, from a
# hashed lock), whether or not the SAM tools needed installing: `make sam-tools` runs this script only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${SAM_TOOLS_PYTHON:-python3}"
# shellcheck source=scripts/tool_venv_cache.sh
source "$ROOT/scripts/tool_venv_cache.sh"

# Versions checked together: aws-sam-cli 1.170.0 requires aws-sam-translator==1.115.0 (the first with
# ResponseTransferMode on Api events is older; 1.115 is what the CLI bundles) and cfn-lint 1.58.x.
PINS=(
  "aws-sam-cli==1.170.0"
  "aws-sam-translator==1.115.0"
  "cfn-lint==1.58.0"
)
WANT="$(printf '%s\n' "${PINS[@]}")"
VENV="$(tool_venv_dir "${SAM_TOOLS_VENV:-}" sam-tools "$WANT")"
STAMP="$VENV/.pins"

install_sam_tools() {
  local start=$SECONDS
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PINS[@]}"
  printf '%s\n' "$WANT" > "$STAMP"
  echo "sam tools installed in $VENV in $((SECONDS - start))s:"
  "$VENV/bin/sam" --version
  "$VENV/bin/cfn-lint" --version
}

tool_venv_lock sam-tools
if [[ -x "$VENV/bin/sam" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "sam tools already installed in $VENV"
else
  install_sam_tools
fi
tool_venv_unlock
tool_venv_link "${SAM_TOOLS_VENV:-}" "$VENV" "$ROOT/.tools/sam-venv"

bash "$ROOT/scripts/install_checkov.sh"
