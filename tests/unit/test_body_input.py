"""--body sources (section 11, issue 11): each message names its source once, the size limit, and a FIFO or a
pipe that never delivers is bounded by --timeout."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import bkmcp
from tests.helpers import run_bkmcp

ROOT = Path(__file__).resolve().parents[2]
SAFETY = 60  # hard kill of a subprocess that would hang (a safety net, not a threshold)


@pytest.fixture
def config(write_config):
    return write_config({"mcpServers": {"srv": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}})


def dry(config, body, *extra, stdin=b"", cwd=None):
    return run_bkmcp("--config", str(config), "srv", "t", "--body", body, "--dry-run", *extra, stdin=stdin, cwd=cwd)


def _message(res) -> str:
    return res.json["error"]["message"]


@pytest.mark.parametrize(
    ("text", "ending"),
    [
        ("[1]", "must be a JSON object (the tool's arguments), got an array"),
        ("{bad", "is not valid JSON: expecting property name enclosed in double quotes at line 1 column 2"),
        (" ", "is empty"),
    ],
)
def test_messages_name_the_source_once(text, ending, config, tmp_path, no_network):
    """Issue 11 item 3: "--body from --body must be ..." named its source twice (and stdin as "stdin")."""
    (tmp_path / "args.json").write_text(text)
    for label, res in (
        ("--body", dry(config, text)),
        ("--body @args.json", dry(config, "@args.json", cwd=str(tmp_path))),
        ("--body -", dry(config, "-", stdin=text.encode())),
    ):
        assert res.exit_status == 1 and res.error_code == "invalid_mcp_arguments"
        assert _message(res) == f"{label} {ending}"


def test_unreadable_file_names_the_resolved_path_when_relative(config, tmp_path, no_network):
    res = dry(config, "@missing.json", cwd=str(tmp_path))
    assert _message(res) == f"cannot read --body @missing.json ({tmp_path / 'missing.json'}): No such file or directory"
    res = dry(config, f"@{tmp_path}")
    assert res.error_code == "usage_error" and _message(res) == f"cannot read --body @{tmp_path}: Is a directory"


def test_body_from_dev_zero_stops_at_the_limit(config, no_network):
    """Issue 11 item 7: `--body @/dev/zero` grew past 2 GB."""
    res = dry(config, "@/dev/zero")
    assert res.exit_status == 1 and res.error_code == "invalid_mcp_arguments"
    assert _message(res) == "--body @/dev/zero is larger than 64 MiB" and "64 MiB" in res.json["error"]["hint"]


def test_body_limit_is_exact(config, tmp_path, monkeypatch, no_network):
    monkeypatch.setattr(bkmcp, "BODY_LIMIT", 64)
    fits = '{"a": "' + "x" * (64 - 9) + '"}'
    assert len(fits) == 64
    (tmp_path / "fits.json").write_text(fits)
    (tmp_path / "over.json").write_text(fits + " ")
    assert dry(config, "@fits.json", cwd=str(tmp_path)).exit_status == 0
    assert dry(config, "-", stdin=fits.encode()).exit_status == 0
    assert dry(config, fits).exit_status == 0
    for res in (
        dry(config, "@over.json", cwd=str(tmp_path)),
        dry(config, "-", stdin=(fits + " ").encode()),
        dry(config, fits + " "),
    ):
        assert res.error_code == "invalid_mcp_arguments" and "larger than" in _message(res)


def _run(config: Path, *args: str, stdin=subprocess.DEVNULL, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The real entry point in a fresh interpreter (real stdin descriptor)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), "srv", "t", *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=SAFETY,
        env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]},
    )


def test_stdin_from_dev_zero_stops_at_the_limit(config, tmp_path):
    with open("/dev/zero", "rb") as zero:
        proc = _run(config, "--body", "-", "--dry-run", stdin=zero, tmp_path=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    error = json.loads(proc.stderr.splitlines()[-1])["error"]
    assert (error["code"], error["message"]) == ("invalid_mcp_arguments", "--body - is larger than 64 MiB")


def test_fifo_without_a_writer_is_bounded_by_the_timeout(config, tmp_path):
    """Issue 11 item 7: `--body @FIFO` with no writer waited forever."""
    fifo = tmp_path / "args.fifo"
    os.mkfifo(fifo)
    proc = _run(config, "--body", f"@{fifo}", "--dry-run", "--timeout", "300ms", tmp_path=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    error = json.loads(proc.stderr.splitlines()[-1])["error"]
    assert error["code"] == "usage_error"
    assert error["message"] == f"--body @{fifo} delivered no end of input within --timeout 300ms"
    assert "waits for a writer" in error["hint"]


def test_pipe_that_never_closes_is_bounded_by_the_timeout(config, tmp_path):
    read_end, write_end = os.pipe()
    try:
        proc = _run(config, "--body", "-", "--dry-run", "--timeout", "300ms", stdin=read_end, tmp_path=tmp_path)
    finally:
        os.close(read_end)
        os.close(write_end)
    error = json.loads(proc.stderr.splitlines()[-1])["error"]
    assert proc.returncode == 1 and error["message"] == "--body - delivered no end of input within --timeout 300ms"


def test_fifo_with_a_writer_is_read(config, tmp_path, no_network):
    fifo = tmp_path / "args.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as handle:  # blocks until bkmcp opens the FIFO
            handle.write('{"from": ')
            handle.flush()
            handle.write('"fifo"}')

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    res = dry(config, f"@{fifo}", "--timeout", "30s")
    writer.join(SAFETY)
    assert res.exit_status == 0 and res.json["data"]["arguments"] == {"from": "fifo"}


def test_read_body_without_a_deadline_reads_a_pipe_to_its_end(tmp_path):
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"a": 1}')
    os.close(write_end)
    with os.fdopen(read_end) as stdin:
        assert bkmcp.read_body("-", stdin, str(tmp_path)) == {"a": 1}


def test_read_body_from_a_fifo_stops_at_the_deadline_in_process(tmp_path):
    fifo = tmp_path / "args.fifo"
    os.mkfifo(fifo)
    with pytest.raises(bkmcp.UsageError, match="delivered no end of input within --timeout 200ms"):
        bkmcp.read_body(f"@{fifo}", io.StringIO(), str(tmp_path), bkmcp.Deadline(0.2))
    stdin_read, stdin_write = os.pipe()
    try:
        with os.fdopen(stdin_read) as stdin, pytest.raises(bkmcp.UsageError, match="--body - delivered no end"):
            bkmcp.read_body("-", stdin, str(tmp_path), bkmcp.Deadline(0.2))
    finally:
        os.close(stdin_write)


def test_injected_text_stdin_without_buffer_is_read_up_to_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(bkmcp, "BODY_LIMIT", 16)
    assert bkmcp.read_body("-", io.StringIO('{"a": "é"}'), str(tmp_path)) == {"a": "é"}
    with pytest.raises(bkmcp.InvalidArgumentsError, match="larger than"):
        bkmcp.read_body("-", io.StringIO('{"a": "' + "x" * 20 + '"}'), str(tmp_path))
