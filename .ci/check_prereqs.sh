#!/usr/bin/env bash
# What `make test` needs from the system, checked before anything is installed or run (issue 40 item 6): zsh, fish
# and tmux (the completion tests type into real shells under tmux), Node.js >= 20 with npm (the interop servers) and a
# Python >= 3.10 (the official SDK's venv; .ci/install_interop.sh finds it the same way). Prints every missing one
# with the exact line that installs it, then exits 1; prints nothing and exits 0 when all are there.
#
#   .ci/check_prereqs.sh
set -uo pipefail

missing=()
packages=()  # what the package manager installs
have() { command -v "$1" >/dev/null 2>&1; }

for tool in zsh tmux fish; do
  have "$tool" || { missing+=("$tool (the completion tests run real shells under tmux)"); packages+=("$tool"); }
done
node_ok=0
if have node && have npm; then
  [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ] && node_ok=1
fi
if [ "$node_ok" = 0 ]; then
  found=$(have node && node --version 2>/dev/null || echo "none")
  missing+=("Node.js >= 20 with npm (found: node $found, npm $(have npm && echo present || echo none))")
fi
python_ok=0
for py in ${BKMCP_SDK_BASE_PYTHON:-} python3 python3.13 python3.12 python3.11 python3.10; do
  if have "$py" && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    python_ok=1
    break
  fi
done
[ "$python_ok" = 1 ] || { missing+=("a Python >= 3.10 (the official MCP SDK's venv)"); packages+=("python3.11"); }

[ "${#missing[@]}" = 0 ] && exit 0

sudo=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo ")
echo "make test: missing system prerequisites:" >&2
for item in "${missing[@]}"; do echo "  - $item" >&2; done
echo "install them with:" >&2
if have apt-get; then
  [ "${#packages[@]}" = 0 ] || echo "  ${sudo}apt-get update && ${sudo}apt-get install -y ${packages[*]}" >&2
  [ "$node_ok" = 1 ] || echo "  curl -fsSL https://deb.nodesource.com/setup_22.x | ${sudo}bash - && ${sudo}apt-get install -y nodejs" >&2
elif have brew; then
  brew_packages=("${packages[@]/python3.11/python@3.11}")
  [ "$node_ok" = 1 ] || brew_packages+=("node")
  echo "  brew install ${brew_packages[*]}" >&2
else
  wanted="${packages[*]}"
  [ "$node_ok" = 1 ] || wanted="${wanted:+$wanted, }Node.js 22 with npm (https://nodejs.org)"
  echo "  your system's packages for: $wanted" >&2
fi
[ "$python_ok" = 1 ] || echo "(or set BKMCP_SDK_BASE_PYTHON to a Python >= 3.10 you have)" >&2
exit 1
