#!/usr/bin/env bash
# Installs checkov (the template scan of scripts/sam_gate.sh and tests/infra/test_checkov.py) in its own
# virtualenv (.tools/checkov-venv), from the hashed lock requirements/checkov.txt.
#
# Why a separate venv: checkov pins its own boto3, pydantic and packaging, which clash with both the application's
# and the SAM tools' pins. The gate and the tests run this venv's python, never import from it.
#
# Environment:
#   CHECKOV_VENV    where to create the venv (default: <repo>/.tools/checkov-venv)
#   CHECKOV_PYTHON  interpreter used to create it (default: python3; the lock is resolved for 3.11)
# Idempotent: a venv whose stamp holds the sha256 of the current lock is left as it is; a changed lock
# reinstalls it from scratch.
#
# The lock is made from requirements/checkov.in by `make lock` (devtools/locks.py), with the project's other locks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHECKOV_VENV:-$ROOT/.tools/checkov-venv}"
PYTHON="${CHECKOV_PYTHON:-python3}"
LOCK="$ROOT/requirements/checkov.txt"
STAMP="$VENV/.lock-sha256"
WANT="$(sha256sum "$LOCK" | cut -d' ' -f1)"

if [[ -x "$VENV/bin/checkov" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "checkov already installed in $VENV"
  exit 0
fi

start=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
# --require-hashes: every package, dependencies included, must match a hash in the lock; --no-deps: the lock is
# the whole set, so pip resolves nothing on its own.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$LOCK"
printf '%s\n' "$WANT" > "$STAMP"
echo "checkov installed in $VENV in $((SECONDS - start))s: checkov $("$VENV/bin/checkov" --version)"
