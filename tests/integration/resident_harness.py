"""Drive ``bkmcp --resident`` as a real subprocess: JSON lines in, answers collected by task_id.

``Resident(registry, *options)`` starts ``python bkmcp.py --resident …`` (source tree) or
``python <pyz> --resident …`` (``pyz=`` a built artifact) with stdin/stdout pipes; a reader thread collects
answers. ``ask(action, user, **params)`` sends one command and waits (bounded) for its answer. ``close()``
always ends the process and reports the children it started (from the events file) that are still running.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MOCK = ROOT / "mock_server" / "mcp_mock.py"
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import sqlite3  # noqa: E402

import bkmcp  # noqa: E402
from mock_server.mcp_mock import MockServer  # noqa: E402


def write_registry(
    path: str,
    servers: list[dict[str, Any]],
    system: dict[str, dict] | None = None,
    users: dict[tuple[str, str], dict] | None = None,
) -> None:
    """Write a registry file with raw sqlite3 (rows as dicts of the schema's columns; JSON columns as values)."""
    db = sqlite3.connect(path)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'mcp_servers'").fetchone() is None:
            db.executescript(bkmcp.REGISTRY_SCHEMA)  # the schema bkmcp itself creates (docs/contract.md §11.3)
        for row in servers:
            values = dict(row)
            for column in ("args", "env_template", "headers"):
                if column in values and not isinstance(values[column], (str, type(None))):
                    values[column] = json.dumps(values[column])
            columns = ", ".join(values)
            db.execute(
                f"INSERT OR REPLACE INTO mcp_servers ({columns}) VALUES ({', '.join('?' * len(values))})",
                list(values.values()),
            )
        for server, creds in (system or {}).items():
            db.execute("INSERT OR REPLACE INTO mcp_credentials VALUES (?, ?)", (server, json.dumps(creds)))
        for (user, server), creds in (users or {}).items():
            db.execute(
                "INSERT OR REPLACE INTO mcp_user_credentials VALUES (?, ?, ?)", (user, server, json.dumps(creds))
            )
        db.commit()
    finally:
        db.close()


def edit_registry(path: Path | str, sql: str, *args: Any) -> None:
    """Run one statement on a registry file and commit (an administrator editing it while bkmcp runs)."""
    db = sqlite3.connect(str(path))
    try:
        db.execute(sql, args)
        db.commit()
    finally:
        db.close()


WAIT = 60.0  # a hard safety net, never a performance threshold


def mock_stdio(scenario: dict | None = None, log: Path | None = None) -> list[str]:
    """``command`` + ``args`` of a stdio mock server."""
    argv = [sys.executable, str(MOCK), "--stdio", "--quiet"]
    if scenario is not None:
        argv += ["--scenario-json", json.dumps(scenario)]
    if log is not None:
        argv += ["--log", str(log)]
    return argv


def stdio_row(name: str, argv: list[str], *, isolation: str = "user", env: dict | None = None, **extra: Any) -> dict:
    return {
        "name": name,
        "transport_type": "stdio",
        "command": argv[0],
        "args": argv[1:],
        "env_template": env or {},
        "isolation": isolation,
        **extra,
    }


def http_row(name: str, url: str, *, isolation: str = "public", headers: dict | None = None, **extra: Any) -> dict:
    return {
        "name": name,
        "transport_type": "http",
        "url": url,
        "headers": headers or {},
        "isolation": isolation,
        **extra,
    }


def group_alive(pgid: int) -> bool:
    """A process of group ``pgid`` still runs (zombies do not count)."""
    return bkmcp.ChildProcess.group_running(pgid)


class Resident:
    _ids = itertools.count(1)

    def __init__(
        self,
        registry: Path,
        *options: str,
        pyz: Path | None = None,
        events: Path | None = None,
        env: dict[str, str] | None = None,
        python: str | None = None,
    ) -> None:
        self.events_path = events if events is not None else registry.with_suffix(".events.jsonl")
        argv = [python or sys.executable, str(pyz if pyz is not None else ROOT / "bkmcp.py")]
        argv += ["--resident", "--registry", str(registry), "--events", str(self.events_path), *options]
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
        from tests.helpers import sigint_as_in_a_terminal

        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**base, **(env or {})},
            preexec_fn=sigint_as_in_a_terminal,
        )
        self.answers: list[dict[str, Any]] = []
        self.raw_stdout: list[bytes] = []
        self.stderr_lines: list[str] = []
        self._cond = threading.Condition()
        self._taken: set[int] = set()
        self._readers = [
            threading.Thread(target=self._read_out, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for thread in self._readers:
            thread.start()

    def _read_out(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.raw_stdout.append(line)
            answer = json.loads(line)
            with self._cond:
                self.answers.append(answer)
                self._cond.notify_all()

    def _read_err(self) -> None:
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    # -- sending -------------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def command(
        self,
        action: str,
        user: str | None = None,
        *,
        task_id: str | None = None,
        token: str | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "command": "invoke",
            "task_id": task_id or f"t{next(self._ids)}",
            "params": {"action": action, **params},
        }
        if user is not None:
            body["user"] = {"userId": user, **({"accessToken": token} if token else {})}
        return body

    def send(self, action: str, user: str | None = None, **params: Any) -> str:
        body = self.command(action, user, **params)
        self.send_raw((json.dumps(body) + "\n").encode())
        return body["task_id"]

    def wait(self, task_id: Any, timeout: float = WAIT) -> dict[str, Any]:
        """The next not yet taken answer carrying ``task_id``."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for index, answer in enumerate(self.answers):
                    if index not in self._taken and answer.get("task_id") == task_id:
                        self._taken.add(index)
                        return answer
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._readers[0].is_alive()):
                    raise AssertionError(f"no answer for {task_id!r}; stderr: {''.join(self.stderr_lines)[-2000:]}")
                self._cond.wait(min(left, 0.5))

    def ask(self, action: str, user: str | None = None, **params: Any) -> dict[str, Any]:
        return self.wait(self.send(action, user, **params))

    def ok(self, action: str, user: str | None = None, **params: Any) -> dict[str, Any]:
        answer = self.ask(action, user, **params)
        assert answer["success"] is True, answer
        return answer["result"]

    # -- events and children -------------------------------------------------------------------------

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        if not self.events_path.is_file():  # /dev/full: reading it never ends
            return []
        try:
            lines = self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        found = [json.loads(line) for line in lines if line.strip()]
        return [e for e in found if name is None or e["event"] == name]

    def wait_event(self, name: str, count: int = 1, timeout: float = WAIT, **match: Any) -> list[dict[str, Any]]:
        end = time.monotonic() + timeout
        while True:
            found = [e for e in self.events(name) if all(e.get(k) == v for k, v in match.items())]
            if len(found) >= count:
                return found
            if time.monotonic() > end:
                raise AssertionError(f"event {name} {match} seen {len(found)} of {count} times: {self.events()}")
            time.sleep(0.05)

    def child_pids(self) -> list[int]:
        return [e["pid"] for e in self.events("process.started")]

    def live_children(self) -> list[int]:
        return [pid for pid in self.child_pids() if group_alive(pid)]

    def exit_status(self, timeout: float = WAIT) -> int:
        status = self.proc.wait(timeout=timeout)
        for thread in self._readers:
            thread.join(timeout)
        return status

    def close(self) -> list[int]:
        """End the process (shutdown if it still runs, then kill as a safety net); the children left alive
        (each is then killed so no test leaves a process behind)."""
        if self.proc.poll() is None:
            try:
                self.send("shutdown")
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=WAIT)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
                self.proc.wait(timeout=WAIT)
        left = self.live_children()
        for pid in left:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        return left


def resident_serving(registry: Path, server: Any, *options: str) -> Any:
    """For a module fixture (``yield from``): a ``bkmcp --resident`` on ``registry`` with ``options``, yielded with
    the started mock ``server`` it talks to; at teardown both stop, and no child may be left nor a traceback said."""
    res = Resident(registry, *options)
    yield res, server
    left = res.close()
    server.stop()
    assert left == []
    assert "Traceback" not in "".join(res.stderr_lines)


class ResidentWorld:
    """One mock server ``m`` (public HTTP in-process, or a per-user stdio child with a JSON-lines log) behind a
    ``bkmcp --resident``, and what the server received. ``pin``: the registry row pins ``version``
    (``protocol_version``), so the era probe is skipped."""

    def __init__(
        self, tmp: Path, resident: Any, transport: str, version: str, *options: str, pin: bool = False, **scenario: Any
    ):
        tmp.mkdir()
        self.http: MockServer | None = None
        self.log_path = tmp / "stdio.jsonl"
        scenario = {"versions": [version], **scenario}
        pinned = {"protocol_version": version} if pin else {}
        if transport == "http":
            self.http = MockServer(scenario)
            self.http.start()
            row = http_row("m", self.http.url, **pinned)
        else:
            row = stdio_row("m", mock_stdio(scenario, log=self.log_path), **pinned)
        reg = tmp / "registry.db"
        write_registry(str(reg), [row], {"m": {}})
        self.res: Resident = resident(reg, *options)

    def _log(self) -> list[dict[str, Any]]:
        if self.http is not None:
            return list(self.http.log)
        text = self.log_path.read_text() if self.log_path.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def received(self, method: str | None = None) -> list[dict[str, Any]]:
        """The log entry of every JSON-RPC request the server received (``method``'s only), in order."""
        return [
            e
            for e in self._log()
            if e.get("rpc_method") and isinstance(e.get("json"), dict) and "id" in e["json"]
            if method is None or e["rpc_method"] == method
        ]

    def requests(self) -> list[dict[str, Any]]:
        """Every JSON-RPC request the server received, in order (its JSON)."""
        return [e["json"] for e in self.received()]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The params of every ``method`` notification received."""
        return [
            e["json"].get("params") or {}
            for e in self._log()
            if e.get("rpc_method") == method and isinstance(e.get("json"), dict) and "id" not in e["json"]
        ]

    def params(self, method: str) -> list[dict[str, Any]]:
        """The params of every ``method`` request received, without the 2026-07-28 era's ``_meta``."""
        return [{k: v for k, v in e["json"]["params"].items() if k != "_meta"} for e in self.received(method)]

    def stop(self) -> None:
        if self.http is not None:
            self.http.stop()


MODERN, LEGACY = "2026-07-28", "2025-11-25"
KINDS = [("http", LEGACY), ("http", MODERN), ("stdio", LEGACY), ("stdio", MODERN)]  # (transport, era) of a world


def world_fixtures(cls: type[ResidentWorld] = ResidentWorld, **defaults: Any) -> tuple[Any, Any]:
    """A test module's two fixtures, bound as ``make_world, world = world_fixtures(World, …)``: ``make_world``
    builds ``cls(…, transport, version, *options, **{**defaults, **scenario})`` on each call and stops them all at
    teardown; ``world`` is one per (transport, era) of ``KINDS``."""
    import pytest

    @pytest.fixture
    def make_world(tmp_path: Path, resident: Any) -> Any:
        made: list[ResidentWorld] = []

        def make(transport: str, version: str, *options: str, **scenario: Any) -> Any:
            made.append(
                cls(tmp_path / f"w{len(made)}", resident, transport, version, *options, **{**defaults, **scenario})
            )
            return made[-1]

        yield make
        for world in made:
            world.stop()

    @pytest.fixture(params=KINDS, ids="-".join)
    def world(request: Any, make_world: Any) -> Any:
        return make_world(*request.param)

    return make_world, world
