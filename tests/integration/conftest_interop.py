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
=========================  ===============================================================

Each yields an :class:`InteropServer` with ``.url`` (``http://127.0.0.1:N/mcp``), ``.port``,
``.proc`` (``subprocess.Popen``), ``.argv``, ``.stderr_path`` / ``.stdout_path`` and
``.read_stderr()`` / ``.read_stdout()`` / ``.log_tail()``.  The process group is terminated
(SIGTERM, then SIGKILL after 5 s) at session teardown.

stdio command lines (bkmcp's stdio transport): fixtures ``sdk_stdio_argv`` (a function
``variant -> argv``) and ``everything_stdio_argv`` (a list), or the plain functions
:func:`sdk_stdio_command` / :func:`everything_stdio_command` (raise :class:`InteropUnavailable`).
Run them with ``env=interop_env()`` (fixture ``interop_subprocess_env``).

Environment:

* ``BKMCP_SDK_PYTHON``      interpreter that has ``mcp==2.3.0`` (default: ``sys.executable`` if it can
  ``import mcp``).  Python >= 3.10.
* ``BKMCP_EVERYTHING_DIR``  directory where ``npm ci`` installed server-everything
  (default ``tests/interop_servers/node``).
* ``BKMCP_NODE``            node binary (default: ``node`` on PATH; Node >= 20).
* ``BKMCP_INTEROP_REQUIRED=1``  turn "not installed" skips into failures (set it in CI).

Everything here is Python 3.9 compatible and only ever binds/connects 127.0.0.1.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

HOST = "127.0.0.1"
SDK_VERSION = "2.3.0"
EVERYTHING_VERSION = "2026.8.31"
SDK_VARIANTS = ("stateful-sse", "stateless-json", "legacy-pinned")

READY_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 4
TERM_GRACE_S = 5.0
PROBE_TIMEOUT_S = 30.0

INTEROP_DIR = Path(__file__).resolve().parent.parent / "interop_servers"
SDK_SERVER_SCRIPT = INTEROP_DIR / "sdk_server.py"
FORCE_LOCALHOST = INTEROP_DIR / "force_localhost.cjs"
EVERYTHING_REL_ENTRY = Path("node_modules/@modelcontextprotocol/server-everything/dist/index.js")

INSTALL_HINT = "`.ci/install_interop.sh [VENV]` installs both (npm ci in tests/interop_servers/node, pip install 'mcp==2.3.0')"


class InteropUnavailable(Exception):
    """A third-party server cannot be started here (not installed / wrong version)."""


def _unavailable(reason: str) -> None:
    """Skip (or fail when BKMCP_INTEROP_REQUIRED=1) with a reason that says what to install."""
    if os.environ.get("BKMCP_INTEROP_REQUIRED", "") not in ("", "0"):
        pytest.fail("interop server required but unavailable: " + reason, pytrace=False)
    pytest.skip(reason)


# --------------------------------------------------------------------------- environment


def interop_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
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


_SDK_PYTHON_CACHE: Dict[str, object] = {}


def resolve_sdk_python() -> str:
    """Interpreter with the official SDK installed; raises InteropUnavailable with an install hint."""
    if "ok" in _SDK_PYTHON_CACHE:
        return str(_SDK_PYTHON_CACHE["ok"])
    if "err" in _SDK_PYTHON_CACHE:
        raise InteropUnavailable(str(_SDK_PYTHON_CACHE["err"]))
    explicit = os.environ.get("BKMCP_SDK_PYTHON", "").strip()
    python = explicit or sys.executable
    source = "BKMCP_SDK_PYTHON=" + explicit if explicit else "the test interpreter (" + sys.executable + ")"
    check = (
        "import sys, importlib.metadata as m; import mcp.server.mcpserver; "
        "print(m.version('mcp')); print('%d.%d' % sys.version_info[:2])"
    )
    try:
        out = subprocess.run(
            [python, "-c", check],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=PROBE_TIMEOUT_S,
            env=interop_env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        err = "Python MCP SDK unavailable: cannot run %s: %s. Set BKMCP_SDK_PYTHON to a Python >= 3.10 with 'mcp==%s'; %s" % (
            source,
            exc,
            SDK_VERSION,
            INSTALL_HINT,
        )
        _SDK_PYTHON_CACHE["err"] = err
        raise InteropUnavailable(err) from None
    lines = out.stdout.decode("utf-8", "replace").split()
    if out.returncode != 0 or len(lines) < 2:
        tail = out.stderr.decode("utf-8", "replace").strip().splitlines()
        err = (
            "Python MCP SDK unavailable: %s cannot `import mcp.server.mcpserver` (%s). "
            "Install 'mcp==%s' into a Python >= 3.10 venv and set BKMCP_SDK_PYTHON to its python; %s"
            % (source, tail[-1] if tail else "exit %d" % out.returncode, SDK_VERSION, INSTALL_HINT)
        )
        _SDK_PYTHON_CACHE["err"] = err
        raise InteropUnavailable(err)
    if lines[0] != SDK_VERSION:
        err = "Python MCP SDK version mismatch: %s has mcp==%s, interop tests pin mcp==%s (pip install 'mcp==%s')" % (
            source,
            lines[0],
            SDK_VERSION,
            SDK_VERSION,
        )
        _SDK_PYTHON_CACHE["err"] = err
        raise InteropUnavailable(err)
    _SDK_PYTHON_CACHE["ok"] = python
    return python


def resolve_everything() -> List[str]:
    """``[node, --require, force_localhost.cjs, entry]``; raises InteropUnavailable with an install hint."""
    node = os.environ.get("BKMCP_NODE", "").strip() or shutil.which("node")
    if not node:
        raise InteropUnavailable("node not found: install Node.js >= 20 (or set BKMCP_NODE), then npm ci; " + INSTALL_HINT)
    base = os.environ.get("BKMCP_EVERYTHING_DIR", "").strip()
    node_dir = Path(base).resolve() if base else INTEROP_DIR / "node"
    entry = node_dir / EVERYTHING_REL_ENTRY
    pkg = entry.parent.parent / "package.json"
    if not entry.is_file():
        raise InteropUnavailable(
            "server-everything not installed: %s is missing; run `npm ci` in %s; %s" % (entry, node_dir, INSTALL_HINT)
        )
    try:
        version = json.loads(pkg.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        version = None
    if version != EVERYTHING_VERSION:
        raise InteropUnavailable(
            "server-everything version mismatch in %s: found %s, need %s (run `npm ci` there)" % (node_dir, version, EVERYTHING_VERSION)
        )
    return [node, "--require", str(FORCE_LOCALHOST), str(entry)]


def sdk_stdio_command(variant: str = "stateful-sse") -> List[str]:
    """argv of the SDK test server on stdio (legacy-pinned = the SDK's handshake-only loop)."""
    if variant not in SDK_VARIANTS:
        raise ValueError("unknown variant %r (one of %s)" % (variant, ", ".join(SDK_VARIANTS)))
    return [resolve_sdk_python(), str(SDK_SERVER_SCRIPT), "--variant", variant, "--stdio"]


def everything_stdio_command() -> List[str]:
    """argv of server-everything on stdio (no port; the preload is harmless)."""
    return resolve_everything() + ["stdio"]


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


def terminate_tree(proc: "subprocess.Popen[bytes]", grace: float = TERM_GRACE_S) -> None:
    """SIGTERM the process group (the server was started in its own session), then SIGKILL."""
    if proc.poll() is not None:
        return
    use_group = hasattr(os, "killpg")
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
        argv: List[str],
        port: int,
        proc: "subprocess.Popen[bytes]",
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
        self.base_url = "http://%s:%d" % (HOST, port)
        self.url = self.base_url + path

    def read_stderr(self) -> str:
        return _read(self.stderr_path)

    def read_stdout(self) -> str:
        return _read(self.stdout_path)

    def log_tail(self, chars: int = 4000) -> str:
        """Last part of stderr+stdout, for assertion messages."""
        return ("--- stderr ---\n" + self.read_stderr()[-chars:] + "\n--- stdout ---\n" + self.read_stdout()[-chars:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        terminate_tree(self.proc)

    def __repr__(self) -> str:
        return "InteropServer(%s, %s, pid=%s)" % (self.name, self.url, self.proc.pid)


def start_http_server(
    name: str,
    make_argv: Callable[[int], List[str]],
    ready_marker: Callable[[int], str],
    log_dir: Path,
    env_extra: Optional[Callable[[int], Dict[str, str]]] = None,
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
        stdout_path = log_dir / ("%s-%d.stdout.log" % (name, port))
        stderr_path = log_dir / ("%s-%d.stderr.log" % (name, port))
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(INTEROP_DIR),
                env=interop_env(env_extra(port) if env_extra else None),
                start_new_session=True,
            )
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
        last_error = "%s (attempt %d, port %d): %s\n%s" % (
            name,
            attempt,
            port,
            ("exited with %s before ready" % early_exit) if early_exit is not None else "not ready in %.0f s" % timeout,
            server.log_tail(2000),
        )
        if time.monotonic() >= deadline_total:
            break
    raise RuntimeError("could not start interop server " + last_error)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def interop_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("interop-logs"))


def _sdk_fixture(variant: str, log_dir: Path) -> InteropServer:
    try:
        python = resolve_sdk_python()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
    return start_http_server(
        "sdk-" + variant,
        lambda port: [python, str(SDK_SERVER_SCRIPT), "--port", str(port), "--variant", variant],
        # uvicorn's own line, printed after the socket is bound
        lambda port: "Uvicorn running on http://%s:%d" % (HOST, port),
        log_dir,
    )


@pytest.fixture(scope="session")
def sdk_server_stateful(interop_log_dir: Path):
    """Python SDK 2.3.0, stateful + SSE (SDK defaults), dual-era."""
    server = _sdk_fixture("stateful-sse", interop_log_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sdk_server_stateless(interop_log_dir: Path):
    """Python SDK 2.3.0, stateless_http + json_response, dual-era."""
    server = _sdk_fixture("stateless-json", interop_log_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sdk_server_legacy(interop_log_dir: Path):
    """Python SDK 2.3.0 stateful SSE behind a 1.x-style version gate: legacy-only on the wire."""
    server = _sdk_fixture("legacy-pinned", interop_log_dir)
    try:
        yield server
    finally:
        server.stop()


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
        lambda port: "force_localhost: listening on %s:%d" % (HOST, port),
        interop_log_dir,
        env_extra=lambda port: {"PORT": str(port)},
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def interop_subprocess_env() -> Dict[str, str]:
    """The environment to run the stdio command lines with (see :func:`interop_env`)."""
    return interop_env()


@pytest.fixture(scope="session")
def sdk_stdio_argv() -> Callable[[str], List[str]]:
    """``sdk_stdio_argv(variant="stateful-sse") -> argv``; run it with ``env=interop_env()``."""
    try:
        resolve_sdk_python()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
    return sdk_stdio_command


@pytest.fixture(scope="session")
def everything_stdio_argv() -> List[str]:
    """argv of server-everything on stdio; run it with ``env=interop_env()``."""
    try:
        return everything_stdio_command()
    except InteropUnavailable as exc:
        _unavailable(str(exc))
        raise  # unreachable
