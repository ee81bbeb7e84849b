#!/usr/bin/env bash
# Installs checkov (the template scan of scripts/sam_gate.sh and tests/infra/test_checkov.py) in its own
# virtualenv, reached as .tools/checkov-venv, from the hashed lock requirements/checkov.txt.
#
# Why a separate venv: checkov pins its own boto3, pydantic and packaging, which clash with both the application's
# and the SAM tools' pins. The gate and the tests run this venv's python, never import from it.
#
# Where: by default in the machine's cache, keyed by the lock's sha256 and the interpreter, with .tools/checkov-venv
# a link to it (scripts/tool_venv_cache.sh), so a fresh clone on the same machine reuses it.
#
# Environment:
#   CHECKOV_VENV    where to create the venv instead (no cache, no link)
#   CHECKOV_PYTHON  interpreter used to create it (default: python3; the lock is resolved for 3.11)
# Idempotent: a venv whose stamp holds the sha256 of the current lock is left as it is; a changed lock
# installs a new one.
#
# The lock is made from requirements/checkov.in by `make lock` (devtools/locks.py), with the project's other locks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${CHECKOV_PYTHON:-python3}"
# shellcheck source=scripts/tool_venv_cache.sh
source "$ROOT/scripts/tool_venv_cache.sh"
LOCK="$ROOT/requirements/checkov.txt"
WANT="$(sha256sum "$LOCK" | cut -d' ' -f1)"
VENV="$(tool_venv_dir "${CHECKOV_VENV:-}" checkov "$WANT")"
STAMP="$VENV/.lock-sha256"

tool_venv_lock checkov
if [[ -x "$VENV/bin/checkov" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "checkov already installed in $VENV"
else
  start=$SECONDS
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
  # --require-hashes: every package, dependencies included, must match a hash in the lock; --no-deps: the lock is
  # the whole set, so pip resolves nothing on its own.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$LOCK"
  printf '%s\n' "$WANT" > "$STAMP"
  echo "checkov installed in $VENV in $((SECONDS - start))s: checkov $("$VENV/bin/checkov" --version)"
fi
tool_venv_unlock
tool_venv_link "${CHECKOV_VENV:-}" "$VENV" "$ROOT/.tools/checkov-venv"
