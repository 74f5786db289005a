"""Shared test helpers (import them as ``from tests.helpers import …``; ``tests/conftest.py`` puts the
repository root on ``sys.path``): run bkmcp in-process (httpie style) or in a fresh interpreter, write an
mcp.json, the protocol versions, the fuzz budget. Fixtures live in the conftest.py files."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bkmcp

ROOT = Path(__file__).resolve().parent.parent

VERSIONS = bkmcp.SUPPORTED_VERSIONS  # ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
LEGACY = bkmcp.LEGACY_VERSIONS
# Hypothesis examples per property test: CI sets BKMCP_FUZZ_EXAMPLES=2000, the default keeps `make unit` quick.
FUZZ_EXAMPLES = int(os.environ.get("BKMCP_FUZZ_EXAMPLES", "300"))


@dataclass
class Result:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        """The envelope: stdout for success/remote failure, the last stderr line for local failure."""
        text = self.stdout.strip() or self.stderr.strip().splitlines()[-1]
        return bkmcp.parse_json(text, strict_keys=False)

    @property
    def error_code(self) -> str | None:
        env = self.json
        return env.get("error", {}).get("code") if isinstance(env, dict) else None


_MODULES_WRAPPER = """
import json, runpy, sys
out, script, *args = sys.argv[1:]
sys.argv = [script, *args]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def run_bkmcp_modules(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, set[str], subprocess.CompletedProcess[str]]:
    """Run ``bkmcp.py`` in a fresh interpreter; (exit status, every module it had loaded at exit, the process)."""
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _MODULES_WRAPPER, str(out), str(ROOT / "bkmcp.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **(env or {})},
    )
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    return report["code"], set(report["modules"]), proc


def run_bkmcp(
    *args: str, env: dict[str, str] | None = None, stdin: bytes | str = b"", cwd: str | None = None
) -> Result:
    """Run ``bkmcp.main`` in-process and capture exit status, stdout and stderr."""
    raw = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = io.StringIO(), io.StringIO()
    base_env = {"HOME": os.environ.get("HOME", "/nonexistent"), "PATH": os.environ.get("PATH", "")}
    if env:
        base_env.update(env)
    status = bkmcp.main(
        list(args),
        stdin=io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"),
        stdout=out,
        stderr=err,
        env=base_env,
        cwd=cwd or os.getcwd(),
    )
    return Result(status, out.getvalue(), err.getvalue())


def process_running(pid: int) -> bool:
    """Process ``pid`` exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def until(predicate: Any, what: str, timeout: float = 60.0, interval: float = 0.02) -> None:
    """Poll ``predicate`` until it holds (bounded: a safety net, never a performance threshold)."""
    import time

    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(interval)


def write_mcp_json(
    where: Path | str, servers: Mapping[str, Any] | str, *, name: str = "mcp.json", mode: int | None = 0o600
) -> Path:
    """Write an mcp.json and return its path: ``servers`` is the ``mcpServers`` mapping (written as
    ``{"mcpServers": servers}``) or the file's raw text. ``where`` is a folder (the file is ``where/name``) or the
    file itself. ``mode`` 0o600 keeps bkmcp's readable-by-others warning out; ``None`` leaves the umask's."""
    path = Path(where)
    if path.is_dir():
        path = path / name
    text = servers if isinstance(servers, str) else json.dumps({"mcpServers": dict(servers)})
    path.write_text(text, encoding="utf-8")
    if mode is not None:
        path.chmod(mode)
    return path


def resident_options(registry: str, *options: str) -> bkmcp.ResidentOptions:
    """The options of ``bkmcp --resident --registry REGISTRY OPTIONS…``, made as ``main`` makes them: parsed,
    checked (``check_invocation``), then built (the defaults are the CLI's)."""
    inv = bkmcp.parse_argv(["--resident", "--registry", registry, *options])
    bkmcp.check_invocation(inv)
    return bkmcp.build_resident_options(inv)


def fake_engine(client_class: Any) -> dict[str, Any]:
    """Stand-ins for the section-7 building blocks ``run_call`` uses (``SessionSource``, ``discover_tools``,
    ``call_tool``) backed by an object with ``connect/list_tools/call_tool/close``: for unit tests of the CLI's
    routing that must not touch the network. Apply with ``monkeypatch.setattr(bkmcp, name, value)`` or
    ``mock.patch.multiple(bkmcp, **fake_engine(cls))``."""

    class Sessions:
        def start(self, server: Any, ctx: Any, *, insecure: bool) -> Any:
            return client_class(server, deadline=ctx.deadline, insecure=insecure, log=ctx.log)

        def ready(self, session: Any, ctx: Any) -> None:
            session.connect()

        def discover(self, session: Any, ctx: Any) -> Any:
            return bkmcp.discover_tools(session, ctx)

        def done(self, session: Any, ctx: Any) -> None:
            session.close(ctx.deadline)

    return {
        "SessionSource": Sessions,
        "discover_tools": lambda session, ctx: (session.list_tools(), 1),
        "usable_tools": lambda session, ctx, tools: (tools, list(getattr(session, "excluded", []))),
        "call_tool": lambda session, ctx, name, arguments, tool=None: session.call_tool(name, arguments),
    }


def sigint_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: the disposition a terminal gives (a test run
    started in the background of a non-interactive shell inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def http_server(
    url: str,
    *,
    name: str = "s",
    headers: dict[str, str] | None = None,
    protocol_version: str | None = None,
    config_file: str = "/c",
) -> bkmcp.ResolvedServer:
    """A resolved ``type: http`` server entry, as section 3 hands it to the session engine."""
    return bkmcp.ResolvedServer(
        name=name,
        type="http",
        config_file=config_file,
        url=url,
        headers=dict(headers or {}),
        command=None,
        args=[],
        env={},
        cwd=None,
        protocol_version=protocol_version,
        auth_source="none",
    )


class FlowClient:
    """One operation on the section-7 seam: a session, one ``OpContext``, and the flows (negotiate, discover,
    call), the way the CLI strings them together. ``options`` go to the transport (e.g. ``client=`` an injected
    ``httpx.Client``)."""

    def __init__(self, server: bkmcp.ResolvedServer, *, timeout: float, log: bkmcp.Log, **options: Any) -> None:
        self.log = log
        self.ctx = bkmcp.OpContext(bkmcp.Deadline(timeout), log)
        self.session = bkmcp.McpSession(server, insecure=False, log=log, **options)
        self.tools: list[dict] = []

    def __enter__(self) -> FlowClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.session.close(self.ctx.deadline)

    @property
    def era(self) -> str | None:
        return self.session.era

    @property
    def protocol_version(self) -> str | None:
        return self.session.protocol_version

    def connect(self, server_info: bool = False) -> None:
        bkmcp.negotiate(self.session, self.ctx, server_info=server_info)

    def list_tools(self) -> list[dict]:
        self.tools, _pages = bkmcp.discover_tools(self.session, self.ctx)
        return self.tools

    def call_tool(self, name: str, arguments: dict) -> dict:
        tool = next((t for t in self.tools if t.get("name") == name), None)
        return bkmcp.call_tool(self.session, self.ctx, name, arguments, tool)


def attached(transport: Any) -> tuple[bkmcp.ClientSession, list]:
    """The transport attached to a bare session core; returns (core, delivered messages). A message answers its
    stream's request when it is a response with that id."""
    core = bkmcp.ClientSession()
    seen: list = []

    def deliver(message: Any, related: Any) -> bool:
        seen.append(message)
        return message.kind in ("result", "error") and message.id == related

    transport.attach(deliver, lambda: None, core.session_issued)
    return core, seen


def group_watchdogs_of(parent: int) -> list[int]:
    """The group watchdogs ``parent`` started (its children running ``python -I -S -c``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError):
                continue
            if int(stat[1]) == parent and argv[1:4] == [b"-I", b"-S", b"-c"] and stat[0] not in (b"Z", b"X"):
                found.append(int(entry))
    return found


def pids_running(marker: str) -> list[int]:
    """The processes of this machine with ``marker`` in their command line (compared as bytes: another process's
    argv need not be UTF-8)."""
    needle, found = marker.encode(), []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and needle in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" "):
                found.append(int(entry))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found
