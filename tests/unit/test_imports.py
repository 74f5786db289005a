"""contract.md §1/§13: `bkmcp --help` and `bkmcp <server> --help` import none of httpx, jsonschema, jq, asyncio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_bkmcp_modules, write_mcp_json

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("httpx", "httpcore", "jsonschema", "jq", "asyncio", "anyio")


def _modules(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    code, modules, proc = run_bkmcp_modules(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    return code, modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_mcp_json(
        tmp_path,
        {
            "report": {
                "type": "http",
                "url": "https://mcp.example.com/mcp/",
                "headers": {"Authorization": "Bearer ${T}"},
            },
            "fs": {"type": "stdio", "command": "npx", "args": ["x"]},
            "q": {"type": "http", "url": "https://mcp.example.com/mcp?token=QSECRET&page=1"},
        },
    )


@pytest.mark.parametrize("args", [("--help",), ("-h",), (), ("--version",)])
def test_d01_root_help_imports_nothing_heavy(args, tmp_path):
    code, modules = _modules(tmp_path, *args)
    assert code == 0
    assert _heavy(modules) == []


@pytest.mark.parametrize("args", [("report", "--help"), ("report",), ("fs", "-h"), ("report", "--jq", ".")])
def test_d01_server_help_imports_nothing_heavy(args, tmp_path, config):
    code, modules = _modules(tmp_path, "--config", str(config), *args)
    assert code == 0
    assert _heavy(modules) == []


def test_importtime_of_plain_help(tmp_path):
    """The same fact seen by the interpreter itself: `python -X importtime bkmcp.py --help`."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(ROOT / "bkmcp.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.startswith("bkmcp")
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert imported, "no -X importtime output"
    assert _heavy(imported) == []


def test_import_has_no_side_effects(tmp_path):
    """Nothing connects or prints at import time."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import socket\n"
            "socket.socket.connect = lambda *a: (_ for _ in ()).throw(SystemExit('connect at import'))\n"
            "import bkmcp",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
        stdin=subprocess.DEVNULL,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("--version",),
        ("--config", "{config}", "report", "--help"),
        ("--config", "{config}", "fs"),
        ("--config", "{config}", "q", "--help"),
        ("--config", "{config}", "--help"),  # lists the configured servers (issue 17 item 7)
        ("--config", "{config}", "--completion", "servers"),
        ("--completion", "bash"),
        ("--resident", "--registry", "{config}.db", "--help"),
    ],
)
def test_d01_help_paths_defer_even_stdlib_modules(args, tmp_path, config):
    """docs/contract.md §13 start-up: root help, --version and server help also skip json, re, decimal, urllib.parse,
    typing, dataclasses and inspect (each costs milliseconds; together they were most of the start-up).
    ``-S`` keeps site's .pth files out of it."""
    argv = [a.replace("{config}", str(config)) for a in args]
    proc = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", str(ROOT / "bkmcp.py"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    deferred = {"json", "re", "decimal", "urllib.parse", "typing", "dataclasses", "inspect"}
    assert imported & deferred == set()
