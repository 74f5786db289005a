"""Fixtures for tests that run the built artifact `bkmcp.pyz` (docs/building.md).

Reusable by every artifact scenario:

* `pyz_path` (session): the pyz, built once per session from the repo's bkmcp.py into a temp dir (or the file
  named by BKMCP_PYZ, to test a prebuilt artifact).
* `pythons` (session): {"3.9": "/path/to/python3", ...} for the CPython 3.9-3.14 that pyenv has (real
  interpreters, not shims), else a launcher of `.ci/install_foreign.sh` in BKMCP_FOREIGN_PYTHONS that runs natively
  here (Debian's 3.14); `python` is parametrised over 3.9-3.14 and skips, saying why, the ones missing.
* `pyz_env(tmp_path)`: an environment whose HOME, XDG_CACHE_HOME and TMPDIR are private to the test.
* `run_pyz(python, pyz, *args, env=..., timeout=...)`: run it, return the CompletedProcess (text).
"""

from __future__ import annotations

import json
import os
import platform
import zipfile
from pathlib import Path

import pytest
from artifact_helpers import PY_VERSIONS, build_pyz, find_python, program_source


@pytest.fixture(scope="session")
def pyz_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prebuilt = os.environ.get("BKMCP_PYZ")
    if prebuilt:
        return Path(prebuilt).resolve()
    out = tmp_path_factory.mktemp("pyz") / "bkmcp.pyz"
    return build_pyz(out, source=program_source())


@pytest.fixture(scope="session")
def pyz_no_natives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pyz whose jq natives exclude this machine (the "missing target" case): musl/aarch64 only, or, on such
    a machine, none at all."""
    out = tmp_path_factory.mktemp("pyz-foreign") / "bkmcp.pyz"
    foreign = "musllinux_1_2_aarch64"
    this_machine = platform.machine() in ("aarch64", "arm64") and not os.confstr("CS_GNU_LIBC_VERSION")
    return build_pyz(out, "--platform", "none" if this_machine else foreign, source=program_source())


@pytest.fixture(scope="session")
def build_info(pyz_path: Path) -> dict:
    with zipfile.ZipFile(pyz_path) as zf:
        return json.loads(zf.read("BUILD-INFO.json"))


@pytest.fixture(scope="session")
def pythons() -> dict[str, str]:
    return {v: p for v in PY_VERSIONS if (p := find_python(v))}


@pytest.fixture(params=PY_VERSIONS)
def python(request: pytest.FixtureRequest, pythons: dict[str, str]) -> str:
    if request.param not in pythons:
        pytest.skip(f"CPython {request.param} is not installed here (pyenv versions, BKMCP_FOREIGN_PYTHONS)")
    return pythons[request.param]


@pytest.fixture
def pyz_env(tmp_path: Path) -> dict[str, str]:
    home, cache, tmp = tmp_path / "home", tmp_path / "cache", tmp_path / "tmp"
    for d in (home, cache, tmp):
        d.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(cache), TMPDIR=str(tmp))
    for var in ("BKMCP_NO_COMPILED_CACHE", "PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    return env
