# Sourced by the tool installers (install_sam_tools.sh, install_checkov.sh): a tool's venv kept in the machine's
# cache, outside the clone, keyed by what it installs and the interpreter, and reached from the clone by a link.
# A fresh clone on the same machine (CI's) then links the venv a previous run built instead of installing it again.
# Expects ROOT and PYTHON to be set.

CACHE_ROOT="${AGENT_BACKEND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agent-backend}"

# tool_venv_dir OVERRIDE NAME KEY_TEXT: the override when given, else the cached venv for that key.
tool_venv_dir() {
  if [[ -n "$1" ]]; then
    echo "$1"
    return
  fi
  local key
  key="$(printf '%s\n%s\n' "$3" "$("$PYTHON" -c 'import sys; print(sys.version)')" | sha256sum | cut -c1-16)"
  echo "$CACHE_ROOT/$2-$key"
}

# One installer of a tool at a time on the machine: a second clone's run waits for the first one's install.
tool_venv_lock() {
  mkdir -p "$CACHE_ROOT"
  exec 8>"$CACHE_ROOT/.$1.lock"
  flock 8
}

tool_venv_unlock() {
  exec 8>&-
}

# tool_venv_link OVERRIDE VENV LINK: with no override, point LINK (inside the clone) at the cached VENV.
tool_venv_link() {
  if [[ -n "$1" ]]; then
    return
  fi
  mkdir -p "$(dirname "$3")"
  if [[ -d "$3" && ! -L "$3" ]]; then
    rm -rf "$3"  # a venv of the older layout, installed inside the clone
  fi
  ln -sfn "$2" "$3"
}
