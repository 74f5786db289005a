"""Pytest plugin: third-party MCP servers for bkmcp interop tests.

Load it from the top-level conftest (``pytest_plugins`` is only honoured there)::

    pytest_plugins = ["tests.integration.conftest_interop"]

(the repository root must be importable: ``python -m pytest``, a root ``conftest.py``,
or ``pythonpath = ["."]`` in ``[tool.pytest.ini_options]``).

Session-scoped fixtures, each a running server on ``127.0.0.1:<free port>``:

=========================  ===============================================================
``sdk_server_stateful``    official Python SDK ``mcp==2.3.0``, variant ``stateful-sse``
``sdk_server_stateless``   same, variant ``stateless-json``
``sdk_server_legacy``      same, variant ``legacy-pinned`` (legacy-only behaviour)
``everything_server``      ``@modelcontextprotocol/server-everything@2026.8.31`` streamableHttp
``n8n_server``             ``n8n-mcp@2.87.0`` (``MCP_MODE=http``; ``.headers`` has its bearer token)
=========================  ===============================================================

Issue 36's stranded servers: ``n8n_server`` above (legacy, session-based; 404 -32601 to ``server/discover``) and
``chroma_stdio_argv`` (``chroma-mcp==0.2.6`` on stdio, ``--client-type ephemeral``: mcp 1.6.0, 2024-11-05; run it
with :data:`CHROMA_ENV` in its env, which turns chromadb's telemetry off).

Real stdio servers of issue 27 (``test_interop_real_servers.py``): fixture ``real_stdio_argv`` (a function
``name -> argv``) or :func:`real_stdio_command`, for the names of :data:`REAL_SERVERS`.

Each yields an :class:`InteropServer` with ``.url`` (``http://127.0.0.1:N/mcp``), ``.port``,
``.proc`` (``subprocess.Popen``), ``.argv``, ``.stderr_path`` / ``.stdout_path`` and
``.read_stderr()`` / ``.read_stdout()`` / ``.log_tail()``.  The process group is terminated
(SIGTERM, then SIGKILL after 5 s) at session teardown.

stdio command lines (bkmcp's stdio transport): fixtures ``sdk_stdio_argv`` (a function
``variant -> argv``) and ``everything_stdio_argv`` (a list), or the plain functions
:func:`sdk_stdio_command` / :func:`everything_stdio_command` (raise :class:`InteropUnavailable`).
Run them with ``env=interop_env()`` (fixture ``interop_subprocess_env``).

Environment:

* ``BKMCP_SDK_PYTHON``      interpreter that has ``mcp==2.3.0`` (default: ``sys.executable`` if it has it,
  else ``<repo>/.venv-sdk/bin/python`` if that exists; else skip).  Python >= 3.10.
* ``BKMCP_EVERYTHING_DIR``  directory where ``npm ci`` installed server-everything
  (default ``tests/interop_servers/node``).
* ``BKMCP_NODE``            node binary (default: ``node`` on PATH; Node >= 20).
* ``BKMCP_MCP1_PYTHON``     interpreter that has ``mcp==1.30.0`` (default ``<repo>/.venv-mcp1/bin/python``).
* ``BKMCP_CHROMA_VENV``     venv that has ``chroma-mcp==0.2.6`` (default ``<repo>/.venv-chroma``).
* ``BKMCP_PEERS_DIR``       where ``bench/install_peers.sh`` (``make peers``) put the peer clients (default
  ``<repo>/.peers``); fixture ``inspector_cli`` is the MCP Inspector CLI's argv there.
* ``BKMCP_INTEROP_REQUIRED=1``  turn "not installed" skips into failures (set it in CI).

Everything here is Python 3.9 compatible and only ever binds/connects 127.0.0.1.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

HOST = "127.0.0.1"
SDK_VERSION = "2.3.0"
EVERYTHING_VERSION = "2026.8.31"
SDK_VARIANTS = ("stateful-sse", "stateless-json", "legacy-pinned")

READY_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 4
TERM_GRACE_S = 5.0
PROBE_TIMEOUT_S = 30.0

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
INTEROP_DIR = REPO_ROOT / "tests" / "interop_servers"
SDK_VENV = REPO_ROOT / ".venv-sdk"  # where `.ci/install_interop.sh .venv-sdk` puts the SDK
SDK_SERVER_SCRIPT = INTEROP_DIR / "sdk_server.py"
FORCE_LOCALHOST = INTEROP_DIR / "force_localhost.cjs"
EVERYTHING_REL_ENTRY = Path("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
MCP1_VERSION = "1.30.0"
MCP1_VENV = REPO_ROOT / ".venv-mcp1"  # made by .ci/install_interop.sh
FASTMCP1_SERVER_SCRIPT = INTEROP_DIR / "fastmcp1_server.py"
TS2_SERVER_SCRIPT = INTEROP_DIR / "node" / "ts2_server.mjs"
N8N_VERSION = "2.87.0"  # pinned in tests/interop_servers/node/package.json
CHROMA_VERSION = "0.2.6"
CHROMA_VENV = REPO_ROOT / ".venv-chroma"  # made by .ci/install_interop.sh
INSPECTOR_VERSION = "2.12.0"  # pinned in bench/peers_node/package.json
CHROMA_ENV = {"ANONYMIZED_TELEMETRY": "False"}  # chromadb's posthog telemetry: tests reach only 127.0.0.1
# npm package, version (pinned in tests/interop_servers/node/package.json) and bin entry of each npm stdio server
NODE_SERVERS = {
    "time-mcp": ("time-mcp", "1.0.6", "dist/index.js"),
    "code-runner": ("mcp-server-code-runner", "0.1.8", "dist/cli.js"),
    "hello-world": ("mcp-hello-world", "1.1.2", "build/stdio.js"),
    "sequential-thinking": ("@modelcontextprotocol/server-sequential-thinking", "2026.8.31", "dist/index.js"),
    "ts2": ("@modelcontextprotocol/server", "2.4.0", ""),  # the SDK our ts2_server.mjs runs on
    "n8n": ("n8n-mcp", N8N_VERSION, "dist/mcp/index.js"),  # HTTP only here: the ``n8n_server`` fixture
}
# Every name real_stdio_command knows: the npm servers above, FastMCP 1.x, the Python SDK 2.x, server-everything.
REAL_SERVERS = (*NODE_SERVERS, "fastmcp1", "sdk2", "everything")

INSTALL_HINT = (
    "`.ci/install_interop.sh .venv-sdk` installs them all (npm ci in tests/interop_servers/node, "
    "pip install 'mcp==2.3.0' into .venv-sdk, 'mcp==1.30.0' into .venv-mcp1 and 'chroma-mcp==0.2.6' into .venv-chroma)"
)


class InteropUnavailable(Exception):
    """A third-party server cannot be started here (not installed / wrong version)."""


def _unavailable(reason: str) -> None:
    """Skip (or fail when BKMCP_INTEROP_REQUIRED=1) with a reason that says what to install."""
    if os.environ.get("BKMCP_INTEROP_REQUIRED", "") not in ("", "0"):
        pytest.fail("interop server required but unavailable: " + reason, pytrace=False)
    pytest.skip(reason)


# --------------------------------------------------------------------------- environment


def interop_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A small, secret-free environment for server subprocesses.

    server-everything's ``get-env`` tool returns its whole environment, so nothing from the
    developer's/CI's environment beyond the basics is passed on.
    """
    env = {}
    for key in ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT", "TZ"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.setdefault("PATH", os.defpath)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["NO_COLOR"] = "1"
    if extra:
        env.update(extra)
    return env


def _http_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = interop_env(extra)
    # sdk_server.py and force_localhost.cjs exit within ~1 s once their parent (this pytest process) is gone,
    # so a SIGKILLed test run leaves no listener behind. Not set for stdio argv: there the parent is bkmcp.
    env["BKMCP_INTEROP_PARENT_PID"] = str(os.getpid())
    return env


_SDK_PYTHON_CACHE: dict[str, object] = {}


def _check_sdk_python(python: str, source: str) -> str | None:
    """None if ``python`` has ``mcp==SDK_VERSION``, else a reason string."""
    check = "import importlib.metadata as m; import mcp.server.mcpserver; print(m.version('mcp'))"
    try:
        out = subprocess.run(
            [python, "-c", check],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            env=interop_env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {source}: {exc}"
    lines = out.stdout.decode("utf-8", "replace").split()
    if out.returncode != 0 or not lines:
        tail = out.stderr.decode("utf-8", "replace").strip().splitlines()
        return "{} cannot `import mcp.server.mcpserver` ({})".format(
            source, tail[-1] if tail else f"exit {out.returncode}"
        )
    if lines[0] != SDK_VERSION:
        return f"{source} has mcp=={lines[0]}, the interop tests pin mcp=={SDK_VERSION}"
    return None


def resolve_sdk_python() -> str:
    """Interpreter with the official SDK installed; raises InteropUnavailable with an install hint.

    Order: ``$BKMCP_SDK_PYTHON`` (only that one, if set); else the test interpreter; else
    ``<repo>/.venv-sdk/bin/python`` (the SDK venv made by ``.ci/install_interop.sh .venv-sdk``).
    """
    if "ok" in _SDK_PYTHON_CACHE:
        return str(_SDK_PYTHON_CACHE["ok"])
    if "err" in _SDK_PYTHON_CACHE:
        raise InteropUnavailable(str(_SDK_PYTHON_CACHE["err"]))
    explicit = os.environ.get("BKMCP_SDK_PYTHON", "").strip()
    if explicit:
        candidates = [(explicit, "BKMCP_SDK_PYTHON=" + explicit)]
    else:
        candidates = [(sys.executable, "the test interpreter " + sys.executable)]
        fallback = SDK_VENV / "bin" / "python"
        if fallback.exists():
            candidates.append((str(fallback), str(fallback)))
        else:
            candidates_note = f"{fallback} does not exist"
            candidates.append(("", candidates_note))
    reasons = []
    for python, source in candidates:
        if not python:
            reasons.append(source)
            continue
        reason = _check_sdk_python(python, source)
        if reason is None:
            _SDK_PYTHON_CACHE["ok"] = python
            return python
        reasons.append(reason)
    err = (
        f"Python MCP SDK unavailable: {'; '.join(reasons)}. Install 'mcp=={SDK_VERSION}' into a Python >= 3.10 "
        f"venv and set BKMCP_SDK_PYTHON to its python; {INSTALL_HINT}"
    )
    _SDK_PYTHON_CACHE["err"] = err
    raise InteropUnavailable(err)


def resolve_everything() -> list[str]:
    """``[node, --require, force_localhost.cjs, entry]``; raises InteropUnavailable with an install hint."""
    node = _node_binary()
    base = os.environ.get("BKMCP_EVERYTHING_DIR", "").strip()
    node_dir = Path(base).resolve() if base else INTEROP_DIR / "node"
    entry = node_dir / EVERYTHING_REL_ENTRY
    pkg = entry.parent.parent / "package.json"
    if not entry.is_file():
        raise InteropUnavailable(
            f"server-everything not installed: {entry} is missing; run `npm ci` in {node_dir}; {INSTALL_HINT}"
        )
    version = _installed_version(pkg)
    if version != EVERYTHING_VERSION:
        raise InteropUnavailable(
            f"server-everything version mismatch in {node_dir}: found {version}, "
            f"need {EVERYTHING_VERSION} (run `npm ci` there)"
        )
    return [node, "--require", str(FORCE_LOCALHOST), str(entry)]


def _node_binary() -> str:
    node = os.environ.get("BKMCP_NODE", "").strip() or shutil.which("node")
    if not node:
        raise InteropUnavailable(
            "node not found: install Node.js >= 20 (or set BKMCP_NODE), then npm ci; " + INSTALL_HINT
        )
    return node


def _installed_version(package_json: Path) -> str | None:
    """The ``version`` of an installed npm package's package.json (None when it is missing or unreadable)."""
    try:
        return json.loads(package_json.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None


def resolve_node_server(name: str) -> list[str]:
    """``[node, entry]`` of one of :data:`NODE_SERVERS`, its installed version checked; raises InteropUnavailable."""
    package, version, entry = NODE_SERVERS[name]
    base = os.environ.get("BKMCP_EVERYTHING_DIR", "").strip()
    node_dir = Path(base).resolve() if base else INTEROP_DIR / "node"
    pkg = node_dir / "node_modules" / package / "package.json"
    found = _installed_version(pkg)
    if found != version:
        raise InteropUnavailable(
            f"npm {package}@{version} not installed in {node_dir} (found {found}); run `npm ci` there; {INSTALL_HINT}"
        )
    if not entry:  # our own server on that SDK; it resolves the SDK from its own folder
        if base:
            raise InteropUnavailable(f"{TS2_SERVER_SCRIPT.name} runs only from tests/interop_servers/node")
        return [_node_binary(), str(TS2_SERVER_SCRIPT)]
    return [_node_binary(), str(pkg.parent / entry)]


def resolve_inspector() -> list[str]:
    """``[node, cli]`` of the MCP Inspector CLI that ``bench/install_peers.sh`` installed (its own Node 24);
    raises InteropUnavailable."""
    base = os.environ.get("BKMCP_PEERS_DIR", "").strip()
    modules = (Path(base).resolve() if base else REPO_ROOT / ".peers") / "node" / "node_modules"
    package = modules / "@modelcontextprotocol" / "inspector"
    found = _installed_version(package / "package.json")
    node, cli = modules / ".bin" / "node", modules / ".bin" / "inspector"
    if found != INSPECTOR_VERSION or not node.exists() or not cli.exists():
        raise InteropUnavailable(
            f"MCP Inspector {INSPECTOR_VERSION} not installed in {modules} (found {found}); run `make peers` "
            "(bench/install_peers.sh .peers)"
        )
    return [str(node.resolve()), str(cli.resolve())]


def resolve_mcp1_python() -> str:
    """Interpreter with ``mcp==MCP1_VERSION`` (FastMCP 1.x): ``$BKMCP_MCP1_PYTHON`` or ``<repo>/.venv-mcp1``."""
    python = os.environ.get("BKMCP_MCP1_PYTHON", "").strip() or str(MCP1_VENV / "bin" / "python")
    check = "import importlib.metadata as m; import mcp.server.fastmcp; print(m.version('mcp'))"
    try:
        out = subprocess.run(
            [python, "-c", check], stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InteropUnavailable(f"mcp {MCP1_VERSION} unavailable: cannot run {python}: {exc}; {INSTALL_HINT}") from exc
    if out.returncode != 0 or out.stdout.decode().strip() != MCP1_VERSION:
        raise InteropUnavailable(
            f"{python} has no mcp=={MCP1_VERSION} (`.ci/install_interop.sh` makes .venv-mcp1; or set BKMCP_MCP1_PYTHON)"
        )
    return python


def resolve_chroma() -> list[str]:
    """argv of ``chroma-mcp==CHROMA_VERSION`` on stdio with an in-memory database; raises InteropUnavailable."""
    venv = Path(os.environ.get("BKMCP_CHROMA_VENV", "").strip() or CHROMA_VENV)
    python = venv / "bin" / "python"
    check = "import importlib.metadata as m; import chroma_mcp; print(m.version('chroma-mcp'))"
    try:
        out = subprocess.run(
            [str(python), "-c", check],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InteropUnavailable(
            f"chroma-mcp {CHROMA_VERSION} unavailable: cannot run {python}: {exc}; {INSTALL_HINT}"
        ) from exc
    if out.returncode != 0 or out.stdout.decode().strip() != CHROMA_VERSION:
        raise InteropUnavailable(f"{python} has no chroma-mcp=={CHROMA_VERSION}; {INSTALL_HINT}")
    return [str(python), str(venv / "bin" / "chroma-mcp"), "--client-type", "ephemeral"]


def real_stdio_command(name: str) -> list[str]:
    """argv of one of :data:`REAL_SERVERS` on stdio; raises InteropUnavailable."""
    if name in NODE_SERVERS:
        return resolve_node_server(name)
    if name == "fastmcp1":
        return [resolve_mcp1_python(), str(FASTMCP1_SERVER_SCRIPT)]
    if name == "sdk2":
        return sdk_stdio_command("stateful-sse")
    if name == "everything":
        return everything_stdio_command()
    raise ValueError("unknown real server {!r} (one of {})".format(name, ", ".join(REAL_SERVERS)))


def sdk_stdio_command(variant: str = "stateful-sse") -> list[str]:
    """argv of the SDK test server on stdio (legacy-pinned = the SDK's handshake-only loop)."""
    if variant not in SDK_VARIANTS:
        raise ValueError("unknown variant {!r} (one of {})".format(variant, ", ".join(SDK_VARIANTS)))
    return [resolve_sdk_python(), str(SDK_SERVER_SCRIPT), "--variant", variant, "--stdio"]


def everything_stdio_command() -> list[str]:
    """argv of server-everything on stdio (no port; the preload is harmless)."""
    return resolve_everything() + ["stdio"]


# The tools server-everything (the pinned version) lists.
EVERYTHING_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
    "simulate-research-query",
}

# The tools every variant of the SDK interop server lists.
SDK_TOOLS = {
    "add",
    "echo",
    "greet",
    "choose",
    "summarize",
    "echo_float",
    "echo_json",
    "fail",
    "fail_tool_error",
    "weather",
    "no_args",
    "ns.tool-name_v2",
    "slow",
}


# --------------------------------------------------------------------------- process management


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (bind :0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _port_accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    """Last resort if pytest dies before session teardown (e.g. a second Ctrl-C)."""
    for proc in list(_LIVE):
        terminate_tree(proc, grace=2.0)


def terminate_tree(proc: subprocess.Popen[bytes], grace: float = TERM_GRACE_S) -> None:
    """SIGTERM the process group (the server was started in its own session), then SIGKILL."""
    _LIVE.discard(proc)
    use_group = hasattr(os, "killpg")
    if proc.poll() is None:
        try:
            if use_group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:  # pragma: no cover - non-POSIX
                proc.terminate()
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # Kill stragglers in the group even if the leader already exited.
    try:
        if use_group:
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:  # pragma: no cover
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


class InteropServer:
    """A running third-party MCP server (HTTP) started by a fixture."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        proc: subprocess.Popen[bytes],
        stdout_path: Path,
        stderr_path: Path,
        path: str = "/mcp",
    ) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.proc = proc
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.host = HOST
        self.base_url = f"http://{HOST}:{port}"
        self.url = self.base_url + path
        self.headers: dict[str, str] = {}  # what a client must send (a bearer token the fixture chose)

    def read_stderr(self) -> str:
        return _read(self.stderr_path)

    def read_stdout(self) -> str:
        return _read(self.stdout_path)

    def log_tail(self, chars: int = 4000) -> str:
        """Last part of stderr+stdout, for assertion messages."""
        return "--- stderr ---\n" + self.read_stderr()[-chars:] + "\n--- stdout ---\n" + self.read_stdout()[-chars:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        terminate_tree(self.proc)

    def __repr__(self) -> str:
        return f"InteropServer({self.name}, {self.url}, pid={self.proc.pid})"


def start_http_server(
    name: str,
    make_argv: Callable[[int], list[str]],
    ready_marker: Callable[[int], str],
    log_dir: Path,
    env_extra: Callable[[int], dict[str, str]] | None = None,
    timeout: float = READY_TIMEOUT_S,
) -> InteropServer:
    """Start a server on a free loopback port; ready = TCP port accepts AND its own marker line is in the log.

    The marker check proves the listening socket is ours (not a process that grabbed the port in the
    bind-close-reuse window).  Retries on a port collision (process exits before ready).
    """
    last_error = ""
    deadline_total = time.monotonic() + timeout * PORT_ATTEMPTS
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        argv = make_argv(port)
        stdout_path = log_dir / f"{name}-{port}.stdout.log"
        stderr_path = log_dir / f"{name}-{port}.stderr.log"
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(INTEROP_DIR),
                env=_http_env(env_extra(port) if env_extra else None),
                start_new_session=True,
            )
        _LIVE.add(proc)
        server = InteropServer(name, argv, port, proc, stdout_path, stderr_path)
        marker = ready_marker(port)
        deadline = min(time.monotonic() + timeout, deadline_total)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if _port_accepts(port) and marker in server.read_stderr() + server.read_stdout():
                return server
            time.sleep(0.05)
        early_exit = proc.poll()
        terminate_tree(proc)
        why = f"exited with {early_exit} before ready" if early_exit is not None else f"not ready in {timeout:.0f} s"
        last_error = f"{name} (attempt {attempt}, port {port}): {why}\n{server.log_tail(2000)}"
        if time.monotonic() >= deadline_total:
            break
    raise RuntimeError("could not start interop server " + last_error)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def interop_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("interop-logs"))


def _sdk_fixture(variant: str, log_dir: Path, extra: tuple[str, ...] = ()) -> InteropServer:
    try:
        python = resolve_sdk_python()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
    return start_http_server(
        "sdk-" + variant + "".join(extra),
        lambda port: [python, str(SDK_SERVER_SCRIPT), "--port", str(port), "--variant", variant, *extra],
        # uvicorn's own line, printed after the socket is bound
        lambda port: f"Uvicorn running on http://{HOST}:{port}",
        log_dir,
    )


def _serving(server):
    """Yield a started server for a session fixture and stop it (process group) at teardown."""
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sdk_server_stateful(interop_log_dir: Path):
    """Python SDK 2.3.0, stateful + SSE (SDK defaults), dual-era."""
    yield from _serving(_sdk_fixture("stateful-sse", interop_log_dir))


@pytest.fixture(scope="session")
def sdk_server_stateless(interop_log_dir: Path):
    """Python SDK 2.3.0, stateless_http + json_response, dual-era."""
    yield from _serving(_sdk_fixture("stateless-json", interop_log_dir))


@pytest.fixture(scope="session")
def sdk_server_legacy(interop_log_dir: Path):
    """Python SDK 2.3.0 stateful SSE behind a 1.x-style version gate: legacy-only on the wire."""
    yield from _serving(_sdk_fixture("legacy-pinned", interop_log_dir))


@pytest.fixture(scope="session")
def sdk_everything_stateful(interop_log_dir: Path):
    """Python SDK 2.3.0, stateful + SSE, with the SDK everything-server's resources and prompts."""
    yield from _serving(_sdk_fixture("stateful-sse", interop_log_dir, ("--everything-fixtures",)))


@pytest.fixture(scope="session")
def sdk_everything_stateless(interop_log_dir: Path):
    """Python SDK 2.3.0, stateless_http + json_response, with the SDK everything-server's resources and prompts."""
    yield from _serving(_sdk_fixture("stateless-json", interop_log_dir, ("--everything-fixtures",)))


@pytest.fixture(scope="session")
def everything_server(interop_log_dir: Path):
    """@modelcontextprotocol/server-everything 2026.8.31, streamableHttp, forced onto 127.0.0.1."""
    try:
        base = resolve_everything()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
    server = start_http_server(
        "everything",
        lambda port: base + ["streamableHttp"],
        # printed by force_localhost.cjs once the socket is bound to 127.0.0.1
        lambda port: f"force_localhost: listening on {HOST}:{port}",
        interop_log_dir,
        env_extra=lambda port: {"PORT": str(port)},
    )
    yield from _serving(server)


@pytest.fixture(scope="session")
def n8n_server(interop_log_dir: Path):
    """n8n-mcp 2.87.0 in HTTP mode on 127.0.0.1: a legacy, session-based server that answers ``server/discover``
    with HTTP 404 + -32601 (issue 36). Its telemetry is off and its auth rate limit (20 requests per 15 minutes)
    out of the way; the token is a fresh random one."""
    import secrets

    try:
        entry = resolve_node_server("n8n")
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
    token = secrets.token_hex(24)
    server = start_http_server(
        "n8n-mcp",
        lambda port: entry,
        lambda port: f"n8n MCP Single-Session HTTP Server running on {HOST}:{port}",
        interop_log_dir,
        env_extra=lambda port: {
            "MCP_MODE": "http",
            "PORT": str(port),
            "HOST": HOST,
            "AUTH_TOKEN": token,
            "N8N_MCP_TELEMETRY_DISABLED": "true",
            "AUTH_RATE_LIMIT_MAX": "1000000",
        },
    )
    server.headers = {"Authorization": f"Bearer {token}"}
    yield from _serving(server)


@pytest.fixture(scope="session")
def chroma_stdio_argv() -> list[str]:
    """argv of chroma-mcp 0.2.6 on stdio (ephemeral client): mcp 1.6.0, answers initialize with 2024-11-05."""
    try:
        return resolve_chroma()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable


@pytest.fixture(scope="session")
def interop_subprocess_env() -> dict[str, str]:
    """The environment to run the stdio command lines with (see :func:`interop_env`)."""
    return interop_env()


@pytest.fixture(scope="session")
def sdk_stdio_argv() -> Callable[[str], list[str]]:
    """``sdk_stdio_argv(variant="stateful-sse") -> argv``; run it with ``env=interop_env()``."""
    try:
        resolve_sdk_python()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
    return sdk_stdio_command


@pytest.fixture(scope="session")
def real_stdio_argv() -> Callable[[str], list[str]]:
    """``real_stdio_argv(name) -> argv`` for a name of :data:`REAL_SERVERS` (skips, or fails when required)."""

    def argv(name: str) -> list[str]:
        try:
            return real_stdio_command(name)
        except InteropUnavailable as exc:
            _unavailable(str(exc))
            raise  # unreachable

    return argv


@pytest.fixture(scope="session")
def inspector_cli() -> list[str]:
    """argv of the MCP Inspector CLI 2.12.0 (``+ ["--cli", URL, "--transport", "http", "--method", M]``)."""
    try:
        return resolve_inspector()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable


@pytest.fixture(scope="session")
def everything_stdio_argv() -> list[str]:
    """argv of server-everything on stdio; run it with ``env=interop_env()``."""
    try:
        return everything_stdio_command()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
