"""`make examples` prints what to paste into another shell, and it runs exactly as printed, from any folder, with no
bkmcp on PATH (issue 28 item 3): mock_server/examples.py against real loopback servers, the pasted lines in bash."""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")]


def start_examples(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``mock_server/examples.py ARGS`` (what ``make examples`` runs) from the repository, its output piped."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "mock_server" / "examples.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )


def test_the_printed_next_steps_run_as_printed(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "examples", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    assert shutil.which("bkmcp", path=env["PATH"]) is None
    proc = start_examples(["--bkmcp", f"{sys.executable} {ROOT / 'bkmcp.py'}", str(folder)], env)
    try:
        assert proc.stdout is not None
        printed: list[str] = []
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
        while not printed or not printed[-1].startswith("  bkmcp demo --check"):  # then the servers serve on
            printed.append(lines.get(timeout=60).rstrip("\n"))  # bounded: a safety net if the line never comes
        pasted = [line[2:] for line in printed if line.startswith("  ")]
        assert pasted[-1] == "bkmcp demo --check" and pasted[-2].startswith("bkmcp() {"), printed
        run = subprocess.run(
            ["bash", "-c", "\n".join(pasted)], cwd=str(elsewhere), env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, (printed, run.stdout, run.stderr)
        assert '"ok":true' in run.stdout and '"server":"demo"' in run.stdout
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_with_bkmcp_on_path_no_function_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT))
    from mock_server import examples

    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "bkmcp").write_text("#!/bin/sh\n")
    (on_path / "bkmcp").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    lines = examples.render_next_steps(tmp_path / "a b", {"DEMO_TOKEN": "t"}, ["python3", "/x/bkmcp.pyz"])
    assert lines[1] == f"  cd '{tmp_path}/a b' && export DEMO_TOKEN=t" and lines[2] == "  bkmcp demo --check"
    monkeypatch.setenv("PATH", os.devnull)
    assert "make install" in examples.render_next_steps(tmp_path, {}, None)[2]


def test_ctrl_c_removes_the_temp_folder_it_made_and_keeps_a_given_one(tmp_path: Path) -> None:
    """Issue 40 item 7: `make examples` left its temp folder (mcp.json with the demo token, registries) behind after
    Ctrl-C. A folder it made itself goes with the servers; a folder the user named stays."""
    import signal

    temp, given = tmp_path / "tmp", tmp_path / "given"
    temp.mkdir()
    for folder_arg in ([], [str(given)]):
        env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": "", "TMPDIR": str(temp)}
        proc = start_examples(folder_arg, env)
        try:
            assert proc.stdout is not None
            line = ""
            while not line.startswith("(Ctrl-C here stops the servers)"):
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else ""
            made = [p for p in temp.iterdir() if p.name.startswith("bkmcp-examples-")]
            assert len(made) == (0 if folder_arg else 1) and (given.is_dir() if folder_arg else True)
            assert (made[0] if made else given).joinpath("mcp.json").is_file()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert not any(temp.iterdir()), list(temp.iterdir())
        assert given.joinpath("mcp.json").is_file() == bool(folder_arg)
