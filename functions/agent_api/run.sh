#!/bin/bash
# Start command of the streaming API function under the AWS Lambda Web Adapter (response streaming).
# The adapter forwards every invocation to this server on $PORT and streams the body back as it is written.
# Locally, the same command serves the same app: PORT=8080 functions/agent_api/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python}"
exec "$PYTHON" -m uvicorn functions.agent_api.app:create_app --factory \
  --host "${HOST:-0.0.0.0}" --port "${PORT:-8080}" --no-access-log --timeout-graceful-shutdown 5
