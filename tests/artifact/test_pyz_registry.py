"""The registry tools (contract.md §11.3) through the built bkmcp.pyz on every available CPython 3.9-3.14: the stdlib
sqlite3 of each interpreter creates the registry, `--import` fills it from mcp.json, `--list` prints it without
credentials."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from artifact_helpers import run_pyz

from tests.helpers import write_mcp_json

pytestmark = pytest.mark.artifact

SECRET = "pyz-registry-secret-0815"


def test_I01_pyz_registry_import_and_list(python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path) -> None:
    config = write_mcp_json(
        tmp_path,
        {
            "docs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-API-Key": SECRET}},
            "fs": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "fs"],
                "env": {"API_KEY": "${user.API_KEY}"},
                "cwd": "/srv",
            },
        },
    )
    registry = tmp_path / "registry.db"
    imported = run_pyz(python, pyz_path, "--registry", str(registry), "--import", str(config), env=pyz_env)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert json.loads(imported.stdout)["data"] == {"imported": ["docs", "fs"], "registry": str(registry)}
    assert "cwd" in imported.stderr
    with sqlite3.connect(registry) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")] == [
            "mcp_credentials",
            "mcp_servers",
            "mcp_tools_cache",
            "mcp_user_credentials",
        ]
    listed = run_pyz(python, pyz_path, "--registry", str(registry), "--list", env=pyz_env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    servers = {s["name"]: s for s in json.loads(listed.stdout)["data"]["servers"]}
    assert servers["docs"]["headers"] == {"X-API-Key": "***"}
    assert servers["fs"]["env_template"] == {"API_KEY": "${user.API_KEY}"}
    assert SECRET not in listed.stdout + listed.stderr + imported.stdout + imported.stderr
