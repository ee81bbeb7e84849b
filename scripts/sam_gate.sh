#!/usr/bin/env bash
# Offline CI gate for template.yaml: no AWS account, no Docker.
#
#   1. sam validate                 (needs only AWS_DEFAULT_REGION)
#   2. sam validate --lint          (cfn-lint on the SAM template)
#   3. expand the template offline  (scripts/expand_template.py: samtranslator, ZIP CodeUris -> s3://)
#   4. cfn-lint on the expansion    (catches bad values on generated resources, which step 2 cannot see)
#   5. template checks              (tests/infra/template_checks.py: streaming URIs, ReportBatchItemFailures,
#                                    6-field crons, visibility timeouts, wildcard data permissions, log groups,
#                                    CORS, dead letters, Errors/Throttles/5XX alarms, buffered timeouts, task-only
#                                    schedule permissions, queue encryption, an alarm topic key CloudWatch may use)
#   6. checkov                      (scripts/checkov_gate.py, offline, on the SAM template: every failed check
#                                    must be accepted with a reason in infra/checkov-accepted.yaml, and every
#                                    accepted one must still fail)
#   7. sam build                    only when a working python3.12 is on PATH (the Lambda runtime); e.g.
#                                    `PYENV_VERSION=3.12.1 bash scripts/sam_gate.sh` with pyenv, see infra/README.md
#
# Steps 1-6 run for each StreamHost choice in SAM_GATE_STREAM_HOSTS (default "lambda fargate-all"): the template
# itself (lambda, its default), then a copy whose defaults turn the Fargate option on (scripts/template_variant.py),
# so checkov and the checks see the ECS service, the ALB and their roles, which the defaults do not create.
# fargate-follow is fargate-all less one listener rule; add it to the list to check it on its own.
#
# Usage: bash scripts/sam_gate.sh [TEMPLATE]   (default: template.yaml)
# Environment: SAM_TOOLS_VENV (default .tools/sam-venv), CHECKOV_VENV (default .tools/checkov-venv),
#              SAM_GATE_OUT_DIR (default build/, holds the expansions), SAM_GATE_SKIP_BUILD=1 to skip step 7,
#              SAM_GATE_STREAM_HOSTS (default "lambda fargate-all").
# Install the tools first: bash scripts/install_sam_tools.sh (it installs checkov too)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SAM_TOOLS_VENV:-$ROOT/.tools/sam-venv}"
CHECKOV_VENV="${CHECKOV_VENV:-$ROOT/.tools/checkov-venv}"
TEMPLATE="${1:-$ROOT/template.yaml}"
OUT_DIR="${SAM_GATE_OUT_DIR:-$ROOT/build}"
STREAM_HOSTS="${SAM_GATE_STREAM_HOSTS:-lambda fargate-all}"

if [[ ! -x "$VENV/bin/sam" ]]; then
  echo "sam_gate: no SAM tools venv at $VENV; run: bash scripts/install_sam_tools.sh" >&2
  exit 2
fi
if [[ ! -x "$CHECKOV_VENV/bin/checkov" ]]; then
  echo "sam_gate: no checkov venv at $CHECKOV_VENV; run: bash scripts/install_sam_tools.sh" >&2
  exit 2
fi

cd "$ROOT"  # sam build keeps its dependency cache under ./.aws-sam
export SAM_CLI_TELEMETRY=0
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
# Offline means offline: never pick up a developer's credentials or profile.
unset AWS_PROFILE AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN

gate_start=$SECONDS
step() {
  local name="$1"
  shift
  local start=$SECONDS
  echo "== $name"
  "$@"
  echo "   ($((SECONDS - start))s)"
}

mkdir -p "$OUT_DIR"
for host in $STREAM_HOSTS; do
  if [[ "$host" == "lambda" ]]; then
    checked="$TEMPLATE"
    expanded="$OUT_DIR/template.expanded.json"
  else
    checked="$OUT_DIR/template.$host.yaml"
    expanded="$OUT_DIR/template.$host.expanded.json"
    step "StreamHost=$host: a copy of the template with it as the default" \
      "$VENV/bin/python" "$ROOT/scripts/template_variant.py" "$TEMPLATE" "$checked" "$host"
  fi
  step "[$host] sam validate" "$VENV/bin/sam" validate -t "$checked"
  step "[$host] sam validate --lint" "$VENV/bin/sam" validate --lint -t "$checked"
  step "[$host] expand (samtranslator, offline)" "$VENV/bin/python" "$ROOT/scripts/expand_template.py" "$checked" "$expanded"
  step "[$host] cfn-lint on the expansion" "$VENV/bin/cfn-lint" "$expanded"
  step "[$host] template checks on the expansion" "$VENV/bin/python" "$ROOT/tests/infra/template_checks.py" "$expanded"
  step "[$host] checkov (accepted list: infra/checkov-accepted.yaml)" \
    "$CHECKOV_VENV/bin/python" "$ROOT/scripts/checkov_gate.py" "$checked"
done

if [[ "${SAM_GATE_SKIP_BUILD:-0}" == "1" ]]; then
  echo "== sam build: skipped (SAM_GATE_SKIP_BUILD=1)"
elif python3.12 -c "import sys; assert sys.version_info[:2] == (3, 12)" >/dev/null 2>&1; then
  step "stage code folder" bash "$ROOT/scripts/stage_lambda_src.sh"
  step "sam build (python3.12: $(python3.12 --version 2>&1))" \
    "$VENV/bin/sam" build -t "$TEMPLATE" --build-dir "$OUT_DIR/sam-build" --cache-dir "$OUT_DIR/sam-cache" --cached
else
  echo "== sam build: skipped (no working python3.12 on PATH; with pyenv: PYENV_VERSION=3.12.1 bash scripts/sam_gate.sh)"
fi

echo "sam_gate: all steps passed in $((SECONDS - gate_start))s"
