"""Integration fixtures: the in-process MCP mock with a temp config pointing at it, and (when available) the
interop servers of ``conftest_interop.py`` (official Python SDK server, server-everything), which the top-level
``tests/conftest.py`` loads as a plugin."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
for entry in (str(ROOT), str(ROOT / "tests" / "integration")):
    if entry not in sys.path:
        sys.path.insert(0, entry)

from mock_server.mcp_mock import MockServer  # noqa: E402
from tests.helpers import Result, run_bkmcp, write_mcp_json  # noqa: E402


@dataclass
class MockTarget:
    """A running mock plus a config file whose server ``name`` points at it."""

    srv: MockServer
    config: Path
    name: str

    def run(self, *args: str, env: dict[str, str] | None = None, stdin: bytes | str = b"") -> Result:
        return run_bkmcp("--config", str(self.config), *args, env=env, stdin=stdin)

    def methods(self) -> list[tuple[str, Any]]:
        """(HTTP verb, JSON-RPC method) of every request the server received, in order."""
        return [(e["http_method"], e["rpc_method"]) for e in self.srv.log]

    def count(self, rpc_method: str) -> int:
        return len(self.srv.requests(rpc_method))


@pytest.fixture
def mock(tmp_path: Path):
    """``mock(scenario, protocol_version=None, headers=None, url=None)`` -> MockTarget; stopped at teardown."""
    started: list[MockServer] = []

    def make(
        scenario: dict | None = None,
        *,
        protocol_version: str | None = None,
        headers: dict[str, str] | None = None,
        url: str | None = None,
        name: str = "m",
    ) -> MockTarget:
        srv = MockServer(scenario or {})
        srv.start()
        started.append(srv)
        entry: dict[str, Any] = {"type": "http", "url": url or srv.url}
        if headers is not None:
            entry["headers"] = headers
        if protocol_version is not None:
            entry["protocolVersion"] = protocol_version
        config = write_mcp_json(tmp_path / f"mcp-{len(started)}.json", {name: entry})
        return MockTarget(srv, config, name)

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def resident():
    """``resident(registry, *options, **kwargs)`` -> a running ``bkmcp --resident`` (resident_harness.Resident);
    closed at teardown, which fails the test if a child is left running."""
    from resident_harness import Resident

    started: list[Resident] = []

    def start(registry: Path, *options: str, **kwargs: Any) -> Resident:
        proc = Resident(registry, *options, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        left = proc.close()
        assert left == [], f"children left running: {left}"


@pytest.fixture
def http_mock():
    """``http_mock(scenario=None)`` -> a started in-process MockServer; stopped at teardown."""
    servers: list[MockServer] = []

    def start(scenario: dict | None = None) -> MockServer:
        srv = MockServer(scenario)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``make scenario S=MCP-001`` runs ``pytest -m scenario -k MCP-001``: give each scenario module's tests the
    keyword ``MCP-00N`` (test names can only spell it ``MCP_00N``)."""
    import re

    for item in items:
        match = re.match(r"test_mcp_(\d{3})_", Path(str(item.fspath)).name)
        if match:
            item.extra_keyword_matches.add(f"MCP-{match.group(1)}")
