"""The Makefile's entry points (issue 17 item 5): `make test CASE=…` runs one test or a -k expression."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _recipe(*args: str) -> list[str]:
    """The commands `make -n` would run (printed, never executed)."""
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    joined = proc.stdout.replace("\\\n", " ")  # continued recipe lines, as the shell would see them
    # not the venv step's echo; runs of blanks (continuation indents) as one space
    return [" ".join(line.split()) for line in joined.splitlines() if "-m pytest" in line]


def test_make_test_case_runs_one_test_by_node_id() -> None:
    case = "tests/unit/test_cli.py::test_keyboard_interrupt_is_130"
    [run] = _recipe("test", f"CASE={case}")
    assert run.rstrip().endswith(case) and " tests" not in run.replace(case, "")
    assert "--cov-fail-under" not in run  # one test cannot cover 90 % of bkmcp.py


def test_make_test_case_runs_a_k_expression() -> None:
    [run] = _recipe("test", "CASE=jq and not halt")
    assert '-k "jq and not halt"' in run and run.rstrip().endswith("tests")


def test_make_test_without_case_is_the_whole_suite() -> None:
    runs = _recipe("test")
    # the whole suite: the artifact tests, then the fuzz-marked ones, in one run beside the rest (with the coverage
    # threshold) in another; every test is in exactly one of them (the same paths, "fuzz" and "not fuzz")
    assert any("--cov-fail-under=90" in run and '--ignore=tests/artifact -m "not fuzz" tests;' in run for run in runs)
    # both side runs run whatever the first gives, and the side's status is the first failure's
    assert any("-p no:cacheprovider tests/artifact; artifact=$?;" in run for run in runs)
    assert any(
        "-m fuzz --ignore=tests/conformance --ignore=tests/artifact tests && exit $artifact; }" in run for run in runs
    )
    assert any("wait $side" in run and "test $main -eq 0 && test $side_status -eq 0" in run for run in runs)
    assert any("-m interop tests/integration/test_mock_server.py" in run for run in runs)


def test_make_install_builds_then_puts_the_pyz_on_prefix_bin_as_bkmcp(tmp_path) -> None:
    """`make install PREFIX=…` (issue 28 item 3): `make -n` shows the build first, then the copy; the copy itself
    runs for real (install-pyz, with a stand-in for the built file) and the result runs as `bkmcp` from PATH."""
    dry = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "install", f"PREFIX={tmp_path}/p"], capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.index("build_zipapp.py") < dry.stdout.index(
        f'install -m 755 "dist/bkmcp.pyz" "{tmp_path}/p/bin/bkmcp"'
    )
    assert not (tmp_path / "p").exists()
    stand_in = tmp_path / "built.pyz"
    stand_in.write_text('#!/bin/sh\necho "stand-in $*"\n')
    for path_env, said in (
        ("/usr/bin:/bin", "is not on PATH: add export PATH="),
        (f"{tmp_path}/p/bin:/usr/bin:/bin", "run bkmcp --help"),
    ):
        done = subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), "install-pyz", f"PREFIX={tmp_path}/p", f"PYZ={stand_in}"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "PATH": path_env
                if shutil.which("make", path=path_env)
                else f"{path_env}:{os.path.dirname(shutil.which('make') or '')}",
            },
        )
        assert done.returncode == 0, done.stderr
        assert said in done.stdout
    installed = tmp_path / "p" / "bin" / "bkmcp"
    assert installed.stat().st_mode & 0o777 == 0o755
    run = subprocess.run(["bkmcp", "--version"], env={"PATH": str(installed.parent)}, capture_output=True, text=True)
    assert run.stdout == "stand-in --version\n"


def _plan(*args: str) -> str:
    """Every command `make -n` would run for ``args`` (the venv taken as made: `-o`), continued lines joined."""
    proc = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.replace("\\\n", " ")


def test_make_check_is_lint_and_the_unit_tests_but_fuzz_offline() -> None:
    """Issue 31 item 3: the quick loop runs ruff, the format check, mypy and tests/unit without the fuzz-marked
    tests; it builds nothing and installs nothing (no npm, no pip, no vendored wheels), so it runs offline."""
    plan = _plan("check")
    assert "ruff check" in plan and "ruff format --check" in plan and "mypy bkmcp.py" in plan
    [run] = [line for line in plan.splitlines() if "-m pytest" in line]
    assert run.rstrip().endswith('-m "not fuzz" tests/unit')
    for downloads in ("pip install", "npm", "install_", "python3 build_zipapp.py", ".venv-sdk"):
        assert downloads not in plan, downloads
    assert "-m fuzz " in _plan("test")  # the whole suite keeps them (beside the rest)


def test_the_fuzz_marker_is_declared_and_marks_the_heavy_property_tests() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"fuzz: ' in pyproject
    marked = set()
    for path in (ROOT / "tests" / "unit").glob("test_*.py"):
        marked |= set(re.findall(r"^@pytest\.mark\.fuzz\n(?:[@ )].*\n)*def (\w+)", path.read_text(), re.M))
    assert {"test_p05_decided_keywords_same_result", "test_p01_p02_flag_values_reach_json_exactly"} <= marked
