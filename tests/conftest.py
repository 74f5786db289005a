"""Fixtures shared by every test folder: a temp mcp.json writer and a network guard. The helpers (``run_bkmcp``,
``write_mcp_json``, ``VERSIONS``, …) are in ``tests/helpers.py``; this file puts the repository root on
``sys.path`` so that ``tests.helpers``, ``bkmcp`` and ``mock_server`` import from every folder."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers import write_mcp_json  # noqa: E402

pytest_plugins = ["tests.integration.conftest_interop"]


@pytest.fixture
def write_config(tmp_path: Path):
    """Write an mcp.json (a whole document as a dict, or raw text) into tmp_path and return its path."""

    def write(content: Any, name: str = "mcp.json", mode: int = 0o600) -> Path:
        text = content if isinstance(content, str) else json.dumps(content)
        return write_mcp_json(tmp_path, text, name=name, mode=mode)

    return write


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch):
    """Fail the test if anything opens a network connection (zero-network guarantees: O02, D01, C02, A03)."""
    attempts: list[Any] = []

    def guard(self: socket.socket, address: Any, *a: Any, **k: Any) -> Any:
        attempts.append(address)
        raise AssertionError(f"unexpected network connection to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket.socket, "connect_ex", guard)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: guard(None, a[0] if a else None))  # type: ignore[arg-type]
    yield attempts
    assert not attempts, f"network connections attempted: {attempts}"
