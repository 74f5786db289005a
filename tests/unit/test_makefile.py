"""The Makefile's entry points (issue 17 item 5): `make test CASE=…` runs one test or a -k expression."""

from __future__ import annotations

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
    return [line for line in joined.splitlines() if "pytest" in line]


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
    # the whole suite: the artifact tests in one run, beside the rest (with the coverage threshold) in another
    assert any("--cov-fail-under=90" in run and "--ignore=tests/artifact tests;" in run for run in runs)
    assert any("-p no:cacheprovider tests/artifact >" in run for run in runs)
    assert any("wait $side" in run and "test $main -eq 0 && test $side_status -eq 0" in run for run in runs)
    assert any("-m interop tests/integration/test_mock_server.py" in run for run in runs)
