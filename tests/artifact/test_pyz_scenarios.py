"""I01: the built bkmcp.pyz, on every available CPython 3.9-3.14, runs the integration scenarios end to end
against the mock MCP server (real HTTP on 127.0.0.1 and real stdio pipes), asserting what the server received.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from artifact_helpers import run_pyz

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import MockServer  # noqa: E402
from tests.helpers import write_mcp_json  # noqa: E402

pytestmark = pytest.mark.artifact

TOKEN = "pyz-secret-token-4711"


def _config(tmp_path: Path, servers: dict) -> Path:
    return write_mcp_json(tmp_path, servers)


def _envelope(stdout: str) -> dict:
    return json.loads(stdout)


@pytest.fixture
def mock_http():
    server = MockServer(
        {"response_mode": "sse", "page_size": 2, "require_headers": {"Authorization": f"Bearer {TOKEN}"}}
    )
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("pin", [None, "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
def test_I01_pyz_check_tools_help_call_over_http(
    pin: str | None, python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path, mock_http: MockServer
) -> None:
    """I01 R01 A01 D02 D03: check, tools, tool help and a typed call through the .pyz, each era, SSE, two pages."""
    entry: dict = {"type": "http", "url": mock_http.url, "headers": {"Authorization": "Bearer ${PYZ_TOKEN}"}}
    if pin:
        entry["protocolVersion"] = pin
    config = _config(tmp_path, {"mock": entry})
    env = dict(pyz_env, PYZ_TOKEN=TOKEN)
    base = ("--config", str(config), "mock")

    check = run_pyz(python, pyz_path, *base, "--check", env=env)
    assert check.returncode == 0, check.stderr
    data = _envelope(check.stdout)["data"]
    assert data["checks"] == {"config": "passed", "connection": "passed", "protocol": "passed", "tools": "passed"}
    assert data["protocol_version"] == (pin or "2026-07-28")
    assert data["complete"] is True and data["tool_count"] == 5  # the mock's default catalogue, over 3 pages

    tools = run_pyz(python, pyz_path, *base, "--tools", "--jq", ".data.tools[].name", env=env)
    assert tools.returncode == 0, tools.stderr
    names = [json.loads(line) for line in tools.stdout.splitlines()]
    assert "echo" in names and len(names) == len(set(names))

    mock_http.reset_log()
    helped = run_pyz(python, pyz_path, *base, "echo", "--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert "--text STRING" in helped.stdout
    assert mock_http.requests("tools/call") == []  # help never calls

    mock_http.reset_log()
    called = run_pyz(
        python, pyz_path, *base, "echo", "--text", "héllo", "--ratio", "12345678901234567890.5", "--count=0", env=env
    )
    assert called.returncode == 0, called.stderr
    calls = mock_http.requests("tools/call")
    assert len(calls) == 1
    assert '"ratio":12345678901234567890.5' in calls[0]["body"].replace(" ", "")
    assert calls[0]["json"]["params"]["arguments"]["count"] == 0
    assert all(entry["headers"].get("authorization") == f"Bearer {TOKEN}" for entry in mock_http.log)
    assert TOKEN not in called.stdout + called.stderr


def test_I01_pyz_remote_and_local_errors(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path, mock_http: MockServer
) -> None:
    """I01 A02 R02 P03: 401 is exit 2 on stdout; a tool error keeps its result; bad arguments never call."""
    config = _config(
        tmp_path,
        {
            "anon": {"type": "http", "url": mock_http.url},
            "auth": {"type": "http", "url": mock_http.url, "headers": {"Authorization": f"Bearer {TOKEN}"}},
        },
    )
    unauthorised = run_pyz(python, pyz_path, "--config", str(config), "anon", "--tools", env=pyz_env)
    assert unauthorised.returncode == 2 and _envelope(unauthorised.stdout)["error"]["code"] == "mcp_auth_required"

    failed = run_pyz(python, pyz_path, "--config", str(config), "auth", "fail", "--reason", "boom", env=pyz_env)
    assert failed.returncode == 2
    envelope = _envelope(failed.stdout)
    assert envelope["error"]["code"] == "mcp_tool_error" and envelope["data"]["result"]["isError"] is True

    mock_http.reset_log()
    bad = run_pyz(python, pyz_path, "--config", str(config), "auth", "pick", "--color", "purple", env=pyz_env)
    assert bad.returncode == 1 and bad.stdout == ""
    assert json.loads(bad.stderr.strip().splitlines()[-1])["error"]["code"] == "invalid_mcp_arguments"
    assert mock_http.requests("tools/call") == []
    assert TOKEN not in failed.stdout + failed.stderr + bad.stderr


def test_I01_pyz_stdio_server(python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path) -> None:
    """I01: a stdio server (the mock with --stdio) through the .pyz: check and one call over real pipes."""
    log = tmp_path / "stdio-log.jsonl"
    config = _config(
        tmp_path,
        {
            "local": {
                "type": "stdio",
                "command": sys.executable,
                "args": [str(ROOT / "mock_server" / "mcp_mock.py"), "--stdio", "--quiet", "--log", str(log)],
            }
        },
    )
    check = run_pyz(python, pyz_path, "--config", str(config), "local", "--check", env=pyz_env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _envelope(check.stdout)["data"]["transport"] == "stdio"
    called = run_pyz(
        python, pyz_path, "--config", str(config), "local", "echo", "--body", '{"text": "via pipes"}', env=pyz_env
    )
    assert called.returncode == 0, called.stdout + called.stderr
    assert _envelope(called.stdout)["data"]["result"]["structuredContent"]["arguments"] == {"text": "via pipes"}
    received = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [r["rpc_method"] for r in received].count("tools/call") == 1


def test_vendor_zip_copied_once_by_the_first_run_that_needs_it(
    pyz_path: Path, pyz_env: dict, tmp_path: Path, mock_http: MockServer, build_info: dict
) -> None:
    """The build Python imports httpx & co from the pyz's nested vendor zip, which the first run that needs one of
    them copies into the cache (verified, atomically: four concurrent first runs leave one copy). Runs that need
    none (help, server help, --dry-run) read only the small outer directory and copy nothing."""
    if build_info["bytecode"]["cache_tag"] != sys.implementation.cache_tag:
        pytest.skip("a prebuilt artifact for another Python: other Pythons use the compiled cache instead")
    config = _config(
        tmp_path, {"mock": {"type": "http", "url": mock_http.url, "headers": {"Authorization": "Bearer ${PYZ_TOKEN}"}}}
    )
    env = dict(pyz_env, PYZ_TOKEN=TOKEN)
    build_dir = Path(env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"]
    copy = build_dir / build_info["vendor_zip"]["member"]
    base = ("--config", str(config), "mock")
    for args in (("--help",), (*base, "--help"), (*base, "echo", "--body", '{"text": "x"}', "--dry-run")):
        assert run_pyz(sys.executable, pyz_path, *args, env=env).returncode == 0
    assert not copy.exists() and mock_http.log == []

    with ThreadPoolExecutor(4) as pool:
        procs = list(pool.map(lambda _: run_pyz(sys.executable, pyz_path, *base, "--check", env=env), range(4)))
    assert [p.returncode for p in procs] == [0] * 4, [p.stderr for p in procs]
    assert len(mock_http.requests("tools/list")) >= 4  # each run discovered the catalogue
    assert sorted(os.listdir(build_dir)) == [copy.name]  # no temp files left beside it
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == build_info["vendor_zip"]["sha256"]

    verbose = subprocess.run(
        [sys.executable, "-v", str(pyz_path), *base, "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert verbose.returncode == 0, verbose.stderr[-2000:]
    assert f"import 'httpx' # <zipimporter object \"{copy}/\">" in verbose.stderr
    assert "import 'anyio'" not in verbose.stderr and "import 'trio'" not in verbose.stderr  # import_httpx


def test_damaged_vendor_zip_fails_cleanly_and_never_falls_back_to_host_packages(
    pyz_path: Path, pyz_env: dict, tmp_path: Path, mock_http: MockServer, build_info: dict
) -> None:
    """A pyz whose nested vendor zip is damaged: --tools fails locally (exit 1, internal_error saying so, nothing
    sent), even though this interpreter's own site-packages have an httpx it could have used instead, and every
    further vendored import fails the same way."""
    if build_info["bytecode"]["cache_tag"] != sys.implementation.cache_tag:
        pytest.skip("a prebuilt artifact for another Python: other Pythons use the compiled cache instead")
    import importlib.util
    import struct
    import zipfile

    assert importlib.util.find_spec("httpx") is not None  # the fallback this test proves is never taken
    data = bytearray(pyz_path.read_bytes())
    info = zipfile.ZipFile(pyz_path).getinfo(build_info["vendor_zip"]["member"])
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    damaged = tmp_path / "damaged.pyz"
    damaged.write_bytes(bytes(data))
    config = _config(
        tmp_path, {"mock": {"type": "http", "url": mock_http.url, "headers": {"Authorization": "Bearer ${PYZ_TOKEN}"}}}
    )
    env = dict(pyz_env, PYZ_TOKEN=TOKEN)
    proc = run_pyz(sys.executable, damaged, "--config", str(config), "mock", "--tools", env=env)
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    error = json.loads(proc.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "internal_error" and "is damaged" in error["message"], error
    assert "Traceback" not in proc.stderr and mock_http.log == []
    build_dir = Path(env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"]
    assert not (build_dir / build_info["vendor_zip"]["member"]).exists()

    # the pyz's own __main__ (minus running bkmcp), then two attempts to import a vendored package
    main = zipfile.ZipFile(damaged).read("__main__.py").decode()
    tail = "import bkmcp\ngc.enable()\nsys.exit(bkmcp.main())\n"
    assert main.endswith(tail)
    probe = (
        f"import sys; sys.path.insert(0, {str(damaged)!r}); __file__ = {str(damaged / '__main__.py')!r}\n"
        + main[: -len(tail)]
        + "for _ in range(2):\n"
        "    try:\n"
        "        import httpx\n"
        "    except ImportError as exc:\n"
        "        print('refused' if 'is damaged' in str(exc) else exc)\n"
        "print('httpx' in sys.modules)\n"
    )
    again = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert again.stdout.split() == ["refused", "refused", "False"], again.stdout + again.stderr


def test_pyz_validates_a_passing_call_without_jsonschema(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path
) -> None:
    """P03 (issue 17 item 6): from the pyz on every Python, arguments that pass are validated against the full
    inputSchema without loading jsonschema (``-X importtime`` lists none of it) and reach the server; a problem
    loads jsonschema, which reports it as before, and nothing is sent."""
    server = MockServer({"versions": ["2025-11-25"]})
    config = _config(tmp_path, {"mock": {"type": "http", "url": server.start()}})
    try:
        base = [python, "-X", "importtime", str(pyz_path), "--config", str(config), "mock", "add", "-v"]
        for _ in range(2):  # a non-build Python: the first run fills the compiled cache, the second uses it
            good = subprocess.run([*base, "--a", "1", "--b", "2.5"], capture_output=True, text=True, env=pyz_env)
            assert good.returncode == 0, good.stderr
            assert "arguments validated locally against the full inputSchema" in good.stderr
            assert "jsonschema" not in good.stderr and "| httpx" in good.stderr
        assert [c["json"]["params"]["arguments"] for c in server.requests("tools/call")] == [{"a": 1, "b": 2.5}] * 2
        bad = subprocess.run([*base, "--body", '{"a": 1}'], capture_output=True, text=True, env=pyz_env)
        assert bad.returncode == 1 and "| jsonschema" in bad.stderr
        error = json.loads(bad.stderr.strip().splitlines()[-1])["error"]
        assert error["code"] == "invalid_mcp_arguments" and error["validation"] == "full"
        assert error["problems"] == [{"path": "$.b", "message": "required property is missing"}]
        assert len(server.requests("tools/call")) == 2
    finally:
        server.stop()


def test_pyz_validates_arguments_as_deep_as_it_parses(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path
) -> None:
    """P03 (issue 36 item 7): from the pyz on every Python (3.12 and 3.13 bound C recursion apart), a wrong type at
    depth 2 beside a value 900 levels deep — near what bkmcp parses — is refused by the full schema and nothing is
    sent; the valid call is validated in full and sent once."""
    tool = {
        "name": "deep",
        "x-mock": "echo",
        "inputSchema": {
            "type": "object",
            "properties": {"b": {"type": "integer"}, "tree": {"$ref": "#/$defs/node"}},
            "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        },
    }
    server = MockServer({"versions": ["2025-11-25"], "tools": [tool]})
    config = _config(tmp_path, {"mock": {"type": "http", "url": server.start()}})
    tree = "[" * 900 + "]" * 900
    try:
        base = ("--config", str(config), "mock", "deep", "-v", "--body")
        bad = run_pyz(python, pyz_path, *base, f'{{"b": "2", "tree": {tree}}}', env=pyz_env)
        assert bad.returncode == 1, bad.stderr
        error = json.loads(bad.stderr.strip().splitlines()[-1])["error"]
        assert error["code"] == "invalid_mcp_arguments" and error["validation"] == "full", error
        assert error["problems"] == [{"path": "$.b", "message": "expected integer, got string"}]
        assert server.requests("tools/call") == []
        good = run_pyz(python, pyz_path, *base, f'{{"b": 2, "tree": {tree}}}', env=pyz_env)
        assert good.returncode == 0, good.stderr
        assert "arguments validated locally against the full inputSchema" in good.stderr
        assert len(server.requests("tools/call")) == 1
    finally:
        server.stop()
