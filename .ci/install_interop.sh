#!/usr/bin/env bash
# Install the third-party MCP servers used by bkmcp's interop tests
# (tests/integration/conftest_interop.py). Idempotent: a second run only verifies.
#
#   .ci/install_interop.sh [VENV]     # VENV: where the Python SDK goes; default .venv-sdk (what .ci/run passes)
#
# Do not point VENV at the test venv (.venv): mcp 2.3.0 requires jsonschema>=4.20 and pip would upgrade
# bkmcp's pinned jsonschema==4.17.3 there. The SDK server only ever runs from its own venv.
#
# 1. npm ci in tests/interop_servers/node  -> @modelcontextprotocol/server-everything@2026.8.31 and the real stdio
#    servers of tests/integration/test_interop_real_servers.py (time-mcp, mcp-server-code-runner, mcp-hello-world,
#    server-sequential-thinking, the TypeScript SDK @modelcontextprotocol/server), all pinned in package.json
#    (skipped when node_modules already holds exactly those versions; FORCE=1 reinstalls).
# 2. pip install 'mcp==2.3.0' into VENV (created if missing, with python3 if >= 3.10, else python3.11/3.12/3.13/3.10
#    found, or $BKMCP_SDK_BASE_PYTHON). If VENV exists but its Python is older than 3.10 (the project
#    supports 3.9), the SDK goes into <repo>/.venv-sdk instead.
# 3. pip install 'mcp==1.30.0' (the newest 1.x: FastMCP, legacy era only) into <repo>/.venv-mcp1 (Python >= 3.10).
# 4. pip install 'chroma-mcp==0.2.6' (its newest release; it pins mcp 1.6.0, which answers initialize with 2024-11-05:
#    issue 36) into <repo>/.venv-chroma, with pydantic 2.10.6 (mcp 1.6.0 imports a pydantic internal that 2.11
#    removed) and chromadb 1.0.20 (newer ones need a pydantic >= 2.11 through kubernetes). ~640 MB, ~1 min.
# The fixtures find the SDK in the test interpreter itself or in <repo>/.venv-sdk, else via
# BKMCP_SDK_PYTHON; the script prints which. mcp 1.x: <repo>/.venv-mcp1, else BKMCP_MCP1_PYTHON.
#
# Needs: bash, coreutils timeout, Node.js >= 20 + npm, a Python >= 3.10. Network: npm registry, PyPI.
set -euo pipefail

SDK_PIN="mcp==2.3.0"
SDK_VERSION="2.3.0"
EVERYTHING_VERSION="2026.8.31"
MCP1_PIN="mcp==1.30.0"
MCP1_VERSION="1.30.0"
# package@version of every npm server the tests run; each must be what npm ci installed (package.json pins them)
NODE_PINS="@modelcontextprotocol/server-everything@$EVERYTHING_VERSION time-mcp@1.0.6 mcp-server-code-runner@0.1.8
mcp-hello-world@1.1.2 @modelcontextprotocol/server-sequential-thinking@2026.8.31 @modelcontextprotocol/server@2.4.0
n8n-mcp@2.87.0"
CHROMA_PINS="chroma-mcp==0.2.6 chromadb==1.0.20 pydantic==2.10.6"
CHROMA_VERSION="0.2.6"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${1:-.venv-sdk}"
NODE_DIR="$ROOT/tests/interop_servers/node"
SDK_VENV_FALLBACK="$ROOT/.venv-sdk"
MCP1_VENV="$ROOT/.venv-mcp1"
CHROMA_VENV="$ROOT/.venv-chroma"

start=$(date +%s)
log() { printf 'install_interop: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- node + server-everything
command -v node >/dev/null 2>&1 || die "node not found (need Node.js >= 20)"
command -v npm >/dev/null 2>&1 || die "npm not found"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "Node.js >= 20 required, found $(node --version)"

node_pins_ok() {  # every pinned package installed at its version, and installed after the lock file changed
  local pin name
  [ "$NODE_DIR/node_modules/.package-lock.json" -nt "$NODE_DIR/package-lock.json" ] || return 1
  for pin in $NODE_PINS; do
    name="${pin%@*}"
    [ "$(node -p "require(process.argv[1]).version" "$NODE_DIR/node_modules/$name/package.json" 2>/dev/null)" = "${pin##*@}" ] || return 1
  done
}
if [ "${FORCE:-0}" != "1" ] && node_pins_ok; then
  log "npm servers already installed in $NODE_DIR (FORCE=1 to reinstall)"
else
  log "npm ci in $NODE_DIR (node $(node --version), npm $(npm --version))"
  (cd "$NODE_DIR" && timeout 600 npm ci --no-audit --no-fund --loglevel=error)
  node_pins_ok || die "npm ci in $NODE_DIR did not install the pinned versions: $NODE_PINS"
fi
installed_version="$EVERYTHING_VERSION"

# ---------------------------------------------------------------- Python SDK
py_ok() {  # $1 = python; true if >= 3.10
  "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}
sdk_ok() {  # $1 = python; true if mcp==2.3.0 (and pytest, for the mock-vs-SDK-client tests) importable
  "$1" -c "import importlib.metadata as m, sys; import mcp.server.mcpserver, pytest; sys.exit(0 if m.version('mcp') == '$SDK_VERSION' else 1)" >/dev/null 2>&1
}
install_sdk() {  # $1 = venv dir
  local py="$1/bin/python"
  if sdk_ok "$py"; then
    log "$SDK_PIN already installed in $1"
  else
    log "pip install '$SDK_PIN' into $1"
    timeout 900 "$py" -m pip install --quiet --disable-pip-version-check "$SDK_PIN" pytest
    sdk_ok "$py" || die "$SDK_PIN not importable from $py after install"
  fi
}

find_base_python() {  # python3 if >= 3.10, else python3.11/3.12/3.13/3.10 (or $BKMCP_SDK_BASE_PYTHON)
  if [ -n "${BKMCP_SDK_BASE_PYTHON:-}" ]; then echo "$BKMCP_SDK_BASE_PYTHON"; return; fi
  local cand
  for cand in python3 python3.11 python3.12 python3.13 python3.10; do
    if command -v "$cand" >/dev/null 2>&1 && py_ok "$(command -v "$cand")"; then command -v "$cand"; return; fi
  done
}

if [ ! -x "$VENV/bin/python" ]; then
  base="$(find_base_python)"
  [ -n "$base" ] || die "no Python >= 3.10 found to create $VENV (set BKMCP_SDK_BASE_PYTHON)"
  log "creating venv $VENV with $base ($("$base" --version 2>&1))"
  timeout 300 "$base" -m venv "$VENV"
fi
VENV_ABS="$(cd "$VENV" && pwd)"

if py_ok "$VENV_ABS/bin/python"; then
  install_sdk "$VENV_ABS"
  SDK_PY="$VENV_ABS/bin/python"
else
  [ "$VENV_ABS" != "$SDK_VENV_FALLBACK" ] || die "$VENV uses $("$VENV_ABS/bin/python" --version 2>&1); the SDK needs Python >= 3.10 (remove it, set BKMCP_SDK_BASE_PYTHON)"
  log "$VENV uses $("$VENV_ABS/bin/python" --version 2>&1); the SDK needs Python >= 3.10 -> $SDK_VENV_FALLBACK"
  if [ ! -x "$SDK_VENV_FALLBACK/bin/python" ]; then
    base="$(find_base_python)"
    [ -n "$base" ] || die "no Python >= 3.10 found for the SDK (set BKMCP_SDK_BASE_PYTHON)"
    timeout 300 "$base" -m venv "$SDK_VENV_FALLBACK"
  fi
  install_sdk "$SDK_VENV_FALLBACK"
  SDK_PY="$SDK_VENV_FALLBACK/bin/python"
fi
case "$SDK_PY" in
  "$SDK_VENV_FALLBACK/bin/python") sdk_note="the fixtures find $SDK_PY by themselves (no BKMCP_SDK_PYTHON needed)" ;;
  *) sdk_note="tests run by $SDK_PY find the SDK in-process; any other test interpreter needs: export BKMCP_SDK_PYTHON=$SDK_PY" ;;
esac

# ---------------------------------------------------------------- pinned venvs: mcp 1.x (FastMCP), chroma-mcp
# pinned_venv VENV DIST VERSION MODULE PINS...: VENV (re)created on a Python >= 3.10 when it is missing or too old,
# then DIST==VERSION installed from PINS unless MODULE already imports at that version.
pinned_venv() {
  local venv="$1" dist="$2" version="$3" module="$4" base
  shift 4
  pinned_ok() {
    "$venv/bin/python" -c "import importlib.metadata as m, sys; import $module; sys.exit(0 if m.version('$dist') == '$version' else 1)" >/dev/null 2>&1
  }
  if [ ! -x "$venv/bin/python" ] || ! py_ok "$venv/bin/python"; then
    base="$(find_base_python)"
    [ -n "$base" ] || die "no Python >= 3.10 found to create $venv (set BKMCP_SDK_BASE_PYTHON)"
    rm -rf "$venv"
    log "creating venv $venv with $base"
    timeout 300 "$base" -m venv "$venv"
  fi
  if pinned_ok; then
    log "$dist $version already installed in $venv"
  else
    log "pip install $* into $venv"
    timeout 1200 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    pinned_ok || die "$dist $version not importable from $venv after install"
  fi
}
pinned_venv "$MCP1_VENV" mcp "$MCP1_VERSION" mcp.server.fastmcp "$MCP1_PIN"
# chroma-mcp 0.2.6 pins mcp 1.6.0: a 2024-11-05 server
# shellcheck disable=SC2086  # the pins are words
pinned_venv "$CHROMA_VENV" chroma-mcp "$CHROMA_VERSION" chroma_mcp $CHROMA_PINS

end=$(date +%s)
log "done in $((end - start)) s"
log "server-everything $installed_version: $NODE_DIR  (BKMCP_EVERYTHING_DIR default)"
log "mcp $SDK_VERSION: $SDK_PY ($("$SDK_PY" --version 2>&1))"
log "$sdk_note"
log "mcp $MCP1_VERSION (FastMCP): $MCP1_VENV/bin/python"
log "chroma-mcp $CHROMA_VERSION: $CHROMA_VENV/bin/chroma-mcp"
log "smoke: <test venv>/bin/python -m pytest tests/integration/test_interop_smoke.py"
