"""Helpers shared by the artifact tests and their fixtures (imported by conftest.py and the tests)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build_zipapp.py"
PY_VERSIONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
TIMEOUT = 120


def _pyenv_root() -> str:
    return os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")


def find_python(version: str) -> str | None:
    """The newest real pyenv interpreter of `version` (3.13, not 3.13t), else this one if it matches."""
    paths = glob.glob(os.path.join(_pyenv_root(), "versions", version + ".*", "bin", "python3"))
    paths = paths or glob.glob(os.path.join(_pyenv_root(), "versions", version + ".*", "bin", "python"))
    paths = [p for p in paths if Path(p).parents[1].name.replace(".", "").isdigit()]
    if paths:
        return sorted(paths, key=lambda p: [int(x) for x in Path(p).parents[1].name.split(".")])[-1]
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    return foreign_native_python(version)


def foreign_native_python(version: str) -> str | None:
    """A launcher of `.ci/install_foreign.sh` (in BKMCP_FOREIGN_PYTHONS) for `version` that runs natively here:
    this machine's architecture and glibc (e.g. Debian's CPython 3.14 when pyenv has none)."""
    import platform

    wanted = f"python{version}-{platform.machine()}-linux-gnu"
    for entry in os.environ.get("BKMCP_FOREIGN_PYTHONS", "").split(os.pathsep):
        if entry and os.path.basename(entry) == wanted and os.access(entry, os.X_OK):
            return entry
    return None


def build_pyz(
    output: Path, *options: str, epoch: str | None = None, source: Path | None = None, python: str = sys.executable
) -> Path:
    """Build the pyz with `python` as the build Python (its bytecode goes inside)."""
    env = dict(os.environ)
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = epoch
    cmd = [python, str(BUILD), "--output", str(output), *options]
    if source is not None:
        cmd += ["--source", str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        pytest.fail(f"build_zipapp.py failed:\n{proc.stdout}\n{proc.stderr}")
    return output


def program_source() -> Path:
    source = Path(os.environ.get("BKMCP_SOURCE") or ROOT / "bkmcp.py")
    if not source.exists():
        pytest.skip(f"no {source} to package (set BKMCP_SOURCE)")
    return source


def run_pyz(
    python: str,
    pyz: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
    stdin: str = "",
    no_site: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the artifact; `no_site` (-S) hides the interpreter's site-packages (e.g. an installed jq module)."""
    cmd = [python, *(["-S"] if no_site else []), str(pyz), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, input=stdin, timeout=timeout, check=False)


def run_in_pyz(
    python: str,
    pyz: Path,
    code: str,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
    no_site: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run `code` with the pyz first on sys.path and its runtime support imported as `boot`."""
    prelude = f"import sys; sys.path.insert(0, {str(pyz)!r}); import _bkmcp_boot as boot\n"
    cmd = [python, *(["-S"] if no_site else []), "-c", prelude + code]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
