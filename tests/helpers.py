"""Shared test helpers (import them as ``from tests.helpers import …``; ``tests/conftest.py`` puts the
repository root on ``sys.path``): run bkmcp in-process (httpie style) or in a fresh interpreter, write an
mcp.json, the protocol versions, the fuzz budget, the docs' paths; build a tool definition (``object_tool``) or the
stdio mock's mcp.json entry; run a child on a pseudo-terminal; find and kill processes at teardown. Fixtures live
in the conftest.py files."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bkmcp

ROOT = Path(__file__).resolve().parent.parent
MOCK_SCRIPT = ROOT / "mock_server" / "mcp_mock.py"
DOCS = ROOT / "docs"
README_EN, README_ZH = ROOT / "README.md", ROOT / "README_zh.md"
USER_GUIDE, RESIDENT, RESIDENT_REGISTRY = DOCS / "user-guide.md", DOCS / "resident.md", DOCS / "resident-registry.md"

VERSIONS = bkmcp.SUPPORTED_VERSIONS  # ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
LEGACY = bkmcp.LEGACY_VERSIONS
# JSON texts with a syntax error (and a position to report), shared by the JSON parser's tests
JSON_SYNTAX_TYPOS = ["{bad", '{"a": 1,}', '{"a": "unterminated', '{"a": 1e}', "[1, 2,]", '{"a" 1}']
# stdlib modules the HTTP stack imports at the top but uses only in functions, which bkmcp.py's ``import_httpx``
# stands in for (``_HTTPX_DEFERRED``; OpenSSL's ``_hashlib`` with hashlib): a remote command loads none of them
STOOD_IN_STDLIB = frozenset(
    ("shutil", "traceback", "linecache", "tokenize", "selectors", "locale", "hashlib", "_hashlib")
)
# Hypothesis examples per property test: CI sets BKMCP_FUZZ_EXAMPLES=2000, the default keeps `make unit` quick.
FUZZ_EXAMPLES = int(os.environ.get("BKMCP_FUZZ_EXAMPLES", "300"))

# The mock's hostile skills (mock_server/mcp_mock.py DEFAULT_SKILLS), each with the ``skill_unverified`` reason bkmcp
# gives and how many of its files are read before it stops: one list for --skill and the resident's read_skill.
UNVERIFIED_SKILLS = [
    ("tampered", "digest", 1),
    ("wrong-size", "size", 1),
    ("disguised", "frontmatter", 1),
    ("escaping", "path", 0),
    ("dynamic", "no_digests", 0),
]


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


def proc_stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of ``/proc/PID/stat`` after the command name: state, ppid, pgrp, …) of every process of this
    machine; one gone meanwhile is left out."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                yield int(entry), Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue


def process_running(pid: int) -> bool:
    """Process ``pid`` exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def sigkill_each(ids: Iterable[int], kill: Any = os.kill) -> None:
    """Test teardown: SIGKILL each process (``kill=os.killpg``: each process group); one already gone is fine."""
    for target in ids:
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass


def kill_groups(*procs: subprocess.Popen) -> None:
    """Test teardown: SIGKILL the process group of each child started with ``start_new_session=True``, and reap it."""
    sigkill_each([proc.pid for proc in procs], os.killpg)
    for proc in procs:
        proc.wait(30)


@contextmanager
def child_on_a_pty(
    argv: list[str], terminal: str, *, columns: int | None = None, **popen: Any
) -> Iterator[tuple[subprocess.Popen, int]]:
    """``argv`` started in a session of its own with its ``terminal`` ("stdout" or "stderr") on a new
    pseudo-terminal (``columns`` wide when given) and the other on a pipe, stdin empty; yields (the process, the
    terminal's parent end). On exit the parent end and the pipe are closed and a child still running is killed with
    its group."""
    master, slave = pty.openpty()
    if columns:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, terminal: slave}
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, **streams, **popen)
    finally:
        os.close(slave)
    try:
        yield proc, master
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def read_terminal(master: int, proc: subprocess.Popen, deadline: float) -> bytes:
    """What the children write to a pseudo-terminal (``master`` its parent end), until every writer is gone (EIO or
    EOF), ``proc`` ended with nothing left to read, or ``time.monotonic()`` passes ``deadline`` (a safety net)."""
    terminal = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            terminal += chunk
        elif proc.poll() is not None:
            break
    return terminal


def until(predicate: Any, what: str, timeout: float = 60.0, interval: float = 0.02) -> None:
    """Poll ``predicate`` until it holds (bounded: a safety net, never a performance threshold)."""
    import time

    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(interval)


def before_the_answer_was_due(received_at: float, delay: float) -> bool:
    """Whether now (just after bkmcp returned) precedes the answer a mock server scheduled ``delay`` seconds after
    it received the request (its log's ``time``, ``time.time()``): "bkmcp did not wait for the result" as an
    order of events against the server's own schedule, not a speed threshold."""
    return time.time() < received_at + delay


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


def routed_options() -> set[str]:
    """Every option name of section 11's argv routing tables (the one-shot CLI's, the registry's, the resident's)."""
    tables = (
        bkmcp._VALUE_OPTIONS,
        bkmcp._FLAG_OPTIONS,
        bkmcp._REGISTRY_VALUE_OPTIONS,
        bkmcp._REGISTRY_FLAG_OPTIONS,
        bkmcp._RESIDENT_OPTIONS,
        bkmcp._RESIDENT_FLAG_OPTIONS,
    )
    return {name for table in tables for name in table}


def resident_options(registry: str, *options: str) -> bkmcp.ResidentOptions:
    """The options of ``bkmcp --resident --registry REGISTRY OPTIONS…``, made as ``main`` makes them: parsed,
    checked (``check_invocation``), then built (the defaults are the CLI's)."""
    inv = bkmcp.parse_argv(["--resident", "--registry", registry, *options])
    bkmcp.check_invocation(inv)
    return bkmcp.build_resident_options(inv)


def fake_engine(client_class: Any) -> dict[str, Any]:
    """Stand-ins for the section-7 building blocks ``run_call`` uses (``SessionSource``, ``discover_tools``,
    ``call_tool``, ``plan_task``: never a task) backed by an object with ``connect/list_tools/call_tool/close``:
    for unit tests of the CLI's routing that must not touch the network. Apply with
    ``monkeypatch.setattr(bkmcp, name, value)`` or ``mock.patch.multiple(bkmcp, **fake_engine(cls))``."""

    class Sessions:
        def start(self, server: Any, ctx: Any, *, insecure: bool) -> Any:
            client = client_class(server, deadline=ctx.deadline, insecure=insecure, log=ctx.log)
            if not hasattr(client, "server"):  # call_chosen names the session's server in its data, as a session does
                client.server = server
            return client

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
        "call_tool": lambda session, ctx, name, arguments, tool=None, pending=None, as_task=False: session.call_tool(
            name, arguments
        ),
        "plan_task": lambda session, ctx, tool, choice: False,
    }


def sigint_as_in_a_terminal() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: the disposition a terminal gives (a test run
    started in the background of a non-interactive shell inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted_run(
    argv: list[str], env: Mapping[str, str], ready: Any, timeout: float = 30.0
) -> tuple[int, bytes, bytes]:
    """Run ``argv``, send it SIGINT (as a terminal's Ctrl-C) once ``ready()`` is true, and return its exit status,
    stdout and stderr; the process is gone when this returns, whatever happened."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env), preexec_fn=sigint_as_in_a_terminal
    )
    try:
        assert ready(), "the process never got ready to be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


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
    for pid, stat in proc_stats():
        if int(stat[1]) == parent and stat[0] not in (b"Z", b"X"):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[1:4] == [b"-I", b"-S", b"-c"]:
                found.append(pid)
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


def body_example(text: str) -> Any:
    """The JSON of tool help's ``--body`` example, read back the way a shell would."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("--body example"))
    block = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.strip().startswith("("):
            break
        block.append(line)
    words = shlex.split("\n".join(block))
    return bkmcp.parse_json(words[words.index("--body") + 1])


def object_tool(
    name: str,
    properties: dict[str, Any],
    required: list[str] | None = None,
    *,
    defs: Any = None,
    schema_title: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A tool definition: ``{"name", **fields, "inputSchema": {"type": "object", "title", "properties", "required",
    "$defs"}}`` (``title``, ``required`` and ``$defs`` when given; a field whose key is no Python name goes in as
    ``**{"x-mock": …}``)."""
    schema: dict[str, Any] = {"type": "object"}
    if schema_title is not None:
        schema["title"] = schema_title
    schema["properties"] = properties
    if required is not None:
        schema["required"] = required
    if defs is not None:
        schema["$defs"] = defs
    return {"name": name, **fields, "inputSchema": schema}


def stdio_mock_entry(folder: Path, scenario: Any, version: str | None = None) -> tuple[dict[str, Any], Path]:
    """An mcp.json ``type: stdio`` entry that runs mock_server/mcp_mock.py on ``scenario`` (written to
    ``folder/scenario.json``), and the path of the JSON-lines request log it writes (``folder/log.jsonl``)."""
    spec, log = folder / "scenario.json", folder / "log.jsonl"
    spec.write_text(json.dumps(scenario), encoding="utf-8")
    entry: dict[str, Any] = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(MOCK_SCRIPT), "--stdio", "--scenario", str(spec), "--log", str(log)],
    }
    if version:
        entry["protocolVersion"] = version
    return entry, log


def stdio_mock_log(path: Path) -> list[dict[str, Any]]:
    """The entries of a stdio mock's JSON-lines request log (none before it wrote one)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


_MOCK_TARGETS = iter(range(1 << 30))


class MockTarget:
    """The mock server (``mock_server/mcp_mock.py``) over one transport and era — HTTP in-process, or a stdio child
    that logs JSON lines — as the server ``m`` of its own mcp.json (``pin``: with ``protocolVersion``); ``run`` runs
    bkmcp in-process in ``cwd`` (``tmp/work``); ``received`` is the server's log of every request with an id."""

    def __init__(
        self, tmp: Path, transport: str, version: str, scenario: dict[str, Any] | None = None, *, pin: bool = False
    ) -> None:
        from mock_server.mcp_mock import MockServer

        self.http: Any = None
        self.log_path = tmp / f"stdio-{version}-{next(_MOCK_TARGETS)}.jsonl"  # one log per target
        scenario = {"versions": [version], **(scenario or {})}
        if transport == "http":
            self.http = MockServer(scenario)
            self.http.start()
            entry: dict[str, Any] = {"type": "http", "url": self.http.url}
        else:
            argv = [str(ROOT / "mock_server" / "mcp_mock.py"), "--stdio", "--quiet", "--scenario-json"]
            entry = {
                "type": "stdio",
                "command": sys.executable,
                "args": [*argv, json.dumps(scenario), "--log", str(self.log_path)],
            }
        if pin:
            entry["protocolVersion"] = version
        self.config = write_mcp_json(tmp / f"mcp-{transport}-{version}.json", {"m": entry})
        self.cwd = tmp / "work"
        self.cwd.mkdir(exist_ok=True)

    def run(self, *args: str) -> Any:
        return run_bkmcp("--config", str(self.config), "m", *args, cwd=str(self.cwd))

    def received(self) -> list[dict[str, Any]]:
        """The log entry of every JSON-RPC request the server received, in order (notifications and responses left
        out): ``rpc_method``, ``json`` and, over HTTP, ``headers``."""
        if self.http is not None:
            entries = self.http.log
        else:
            lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
            entries = [json.loads(line) for line in lines]
        return [e for e in entries if e.get("rpc_method") and isinstance(e.get("json"), dict) and "id" in e["json"]]

    def requests(self) -> list[dict[str, Any]]:
        """The JSON-RPC requests themselves, in order."""
        return [e["json"] for e in self.received()]

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()


class KeepAliveCommands:
    """``bkmcp.py --config CONFIG …`` run the way a user runs it (a fresh interpreter, cwd ``home``), with a runtime
    folder of its own (``home/run``, 0700) for the background process ``--keep-alive`` starts; ``stop`` ends that
    process and waits until it is gone. ``marker`` is on its command line (``pids_running``)."""

    def __init__(self, home: Path, config: Path) -> None:
        runtime = home / "run"
        runtime.mkdir(mode=0o700)
        self.home, self.config = home, config
        self.marker = f"--keep-alive-daemon {runtime / 'bkmcp'}"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_RUNTIME_DIR": str(runtime),
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def run(self, *args: str, **options: Any) -> subprocess.CompletedProcess:
        """One command; ``options`` go to ``subprocess.run`` (e.g. ``stdin``)."""
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(self.config), *args]
        return subprocess.run(argv, capture_output=True, env=self.env, cwd=self.home, timeout=120, **options)

    def stop(self) -> None:
        self.run("--sessions", "--stop")
        until(lambda: not pids_running(self.marker), "the background process ended", 20)
