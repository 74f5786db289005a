"""The artifact on "foreign" CPythons: aarch64 (under qemu), musl, 3.14 — targets whose jq natives the pyz carries
but that this x86_64 glibc machine's pyenv does not have (docs/building.md, "Foreign targets").

BKMCP_FOREIGN_PYTHONS lists launcher commands separated by os.pathsep; each is a path to a wrapper script (what
`.ci/install_foreign.sh DIR` writes: `export BKMCP_FOREIGN_PYTHONS="$(cat DIR/foreign_pythons)"`) or a command
line split with shlex (`qemu-aarch64-static -L /sysroot /sysroot/usr/bin/python3.11`). Each launcher runs the pyz
(`--version`, `--help`, a `--dry-run --jq`) and must load the pyz's own native for its platform: the runs use
`-S` (no installed jq module) and a PATH without `jq` (no executable fallback), and the native extracted into the
cache must be the one BUILD-INFO.json records for that interpreter's folder and extension suffix.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.helpers import write_mcp_json

ENV_VAR = "BKMCP_FOREIGN_PYTHONS"
TIMEOUT = 300  # qemu-emulated first runs (extract + compile the pure-Python copy) take tens of seconds
BODY = '{"n": 100000000000000000001, "x": 1.50, "s": "1.50", "list": [1, 2]}'
JQ = ".data.arguments | .n, .x, .s, (.list | add)"
JQ_OUT = ["100000000000000000001", "1.50", '"1.50"', "3"]

PROBE = """
import importlib.machinery, json, os, platform, sys
try:
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
except (ValueError, OSError, AttributeError):
    glibc = ""
print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "full": sys.version.split()[0],
                  "machine": platform.machine(), "glibc": glibc,
                  "suffixes": importlib.machinery.EXTENSION_SUFFIXES}))
"""


def _launchers() -> list[str]:
    return [entry.strip() for entry in os.environ.get(ENV_VAR, "").split(os.pathsep) if entry.strip()]


def _command(launcher: str) -> list[str]:
    return [launcher] if os.path.exists(launcher) else shlex.split(launcher)


def _run(cmd: list[str], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False)


# Skipped at collection, so an empty variable costs nothing (no pyz is built for these tests alone).
pytestmark = pytest.mark.skipif(
    not _launchers(),
    reason=f"{ENV_VAR} is empty: no foreign CPython to run the pyz on (`.ci/install_foreign.sh DIR`, then "
    f'export {ENV_VAR}="$(cat DIR/foreign_pythons)")',
)


def _dry_run(foreign: dict, pyz: Path, config: Path, env: dict, body: str, jq: str) -> subprocess.CompletedProcess[str]:
    """`-S pyz --config CFG demo some_tool --body BODY --dry-run --jq JQ`; -S hides any installed jq module."""
    args = ("--config", str(config), "demo", "some_tool", "--body", body, "--dry-run", "--jq", jq)
    return _run(foreign["cmd"], "-S", str(pyz), *args, env=env)


@pytest.fixture(scope="module", params=_launchers() or [None], ids=lambda p: Path(p.split()[0]).name if p else "none")
def foreign(request: pytest.FixtureRequest) -> dict:
    """{"cmd": [...], "version": "3.X", "machine", "glibc" ("" on musl), "suffixes", "folder"} of one launcher."""
    cmd = _command(request.param)
    try:
        proc = _run(cmd, "-S", "-c", PROBE)
    except OSError as exc:  # a listed launcher that cannot start is a broken setup, not a skip
        pytest.fail(f"{ENV_VAR} entry {request.param!r} does not start: {exc}")
    assert proc.returncode == 0, f"{request.param}: {proc.stdout}{proc.stderr}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    info["cmd"] = cmd
    info["folder"] = "linux" if info["glibc"] else "linux-musl"  # as zipapp_support._native_folders decides
    return info


def test_foreign_version(foreign: dict, pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    proc = _run(foreign["cmd"], str(pyz_path), "--version", env=pyz_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"bkmcp {build_info['version']}"


def test_foreign_help(foreign: dict, pyz_path: Path, pyz_env: dict) -> None:
    proc = _run(foreign["cmd"], str(pyz_path), "--help", env=pyz_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("bkmcp ") and "Usage:" in proc.stdout and "--dry-run" in proc.stdout


def test_foreign_jq_native(foreign: dict, pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict) -> None:
    """--jq under -S with no `jq` on PATH: only the pyz's native can serve it. Exactly one native is extracted,
    named for this interpreter, with the sha256 BUILD-INFO.json records for it, and the runtime support reports
    having loaded that very file."""
    config = write_mcp_json(tmp_path, {"demo": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = dict(pyz_env, PATH=str(empty_bin))
    proc = _dry_run(foreign, pyz_path, config, env, BODY, JQ)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == JQ_OUT

    # the whole dry-run envelope, as documented (docs/user-guide.md, "Dry-run"), projected by --jq '.data'
    proc = _dry_run(foreign, pyz_path, config, env, '{"a": 1.50}', ".data")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        '{"dry_run":true,"server":"demo","tool":"some_tool","transport":"http","url":"http://127.0.0.1:9/mcp",'
        '"headers":{},"arguments":{"a":1.50},"unverified":["tool_exists","input_schema","authentication",'
        '"permissions"]}'
    ]

    native_dir = Path(env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"] / "native"
    (so,) = native_dir.iterdir()
    suffix = so.name[len("jq") :]
    assert so.name.startswith("jq") and suffix in foreign["suffixes"], (so.name, foreign["suffixes"])
    member = f"_bkmcp_native/{foreign['folder']}/{so.name}"
    assert member in build_info["natives"], f"{member} is not in the pyz (natives for {foreign['full']})"
    assert hashlib.sha256(so.read_bytes()).hexdigest() == build_info["natives"][member]
    tag = "cpython-{}-{}-linux-".format(foreign["version"].replace(".", ""), foreign["machine"])
    assert tag in so.name, (so.name, tag)  # musl 3.9/3.10 say linux-gnu too: hence the folder check above

    # and the runtime support itself says it loaded that file (None would mean bkmcp fell back)
    code = (
        f"import sys; sys.path.insert(0, {str(pyz_path)!r}); import _bkmcp_boot as boot\n"
        "m = boot.load_native_module('jq'); print(getattr(m, '__file__', None))"
    )
    proc = _run(foreign["cmd"], "-S", "-c", code, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == str(so)
