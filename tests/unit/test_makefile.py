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


def _fake_bin(tmp_path, *, have: tuple[str, ...], node_major: int = 22):
    """A PATH holding make, bash and id, plus stand-ins for the prerequisites named in ``have``."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    for tool in ("make", "bash", "id", "cat"):
        (folder / tool).symlink_to(shutil.which(tool))
    stand_ins = {
        "zsh": "exit 0",
        "fish": "exit 0",
        "tmux": "exit 0",
        "npm": "exit 0",
        "node": f'[ "$1" = --version ] && echo v{node_major}.1.0 || echo {node_major}',
        "python3": "exit 0",  # answers the version check: >= 3.10
    }
    for tool in have:
        script = folder / tool
        script.write_text(f"#!/bin/sh\n{stand_ins[tool]}\n")
        script.chmod(0o755)
    return str(folder)


def test_make_test_checks_the_system_prerequisites_first_and_stops_with_the_install_line(tmp_path) -> None:
    """Issue 40 item 6: `make test` checks zsh, fish, tmux, Node.js >= 20 with npm and a Python >= 3.10 before anything
    else (no venv, no npm install, no build, no test) and stops at once naming each missing one and the line that
    installs it."""
    plan = _plan("test")
    assert [line for line in plan.splitlines() if not line.startswith("make")][0] == "bash .ci/check_prereqs.sh"
    path = _fake_bin(tmp_path, have=("npm", "node", "python3"), node_major=18)
    done = subprocess.run(
        ["make", "-C", str(ROOT), "test"], capture_output=True, text=True, timeout=60, env={"PATH": path}
    )
    assert done.returncode != 0
    assert "install_interop" not in done.stdout and "pip" not in done.stdout and "pytest" not in done.stdout
    message = done.stderr
    assert "make test: missing system prerequisites:" in message
    assert "  - zsh (" in message and "  - tmux (" in message and "  - fish (" in message
    assert "Node.js >= 20 with npm (found: node v18.1.0, npm present)" in message
    assert "Python >= 3.10" not in message
    assert "your system's packages for: zsh tmux fish, Node.js 22 with npm" in message
    ok = subprocess.run(
        ["bash", str(ROOT / ".ci" / "check_prereqs.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": _fake_bin(tmp_path / "all", have=("zsh", "fish", "tmux", "npm", "node", "python3"))},
    )
    assert ok.returncode == 0 and ok.stdout == ok.stderr == ""
