#!/bin/bash
# Start command of the streams service on ECS Fargate (template.yaml StreamHost, docs/deployment.md "Fargate
# option"): the app run.sh serves, from the same staged folder, with uvicorn answering the ALB directly (no Lambda
# Web Adapter). It differs from run.sh in one setting the ALB needs: idle connections are kept 5 s longer than the
# ALB keeps them (ALB_IDLE_TIMEOUT_S, the template's StreamHostIdleTimeoutSeconds), so the ALB never sends a request
# on a connection uvicorn is closing, which it would answer with a 502.
# Locally: PORT=8080 functions/agent_api/serve.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python}"
exec "$PYTHON" -m uvicorn functions.agent_api.app:create_app --factory \
  --host "${HOST:-0.0.0.0}" --port "${PORT:-8080}" --no-access-log --timeout-graceful-shutdown 5 \
  --timeout-keep-alive "$((${ALB_IDLE_TIMEOUT_S:-120} + 5))"
