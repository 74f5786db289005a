"""The two real servers issue 36's sweep found stranded, though other clients use them (docs/interop.md, "Real
servers"; docs/contract.md §5).

* ``n8n-mcp`` 2.87.0 over HTTP: legacy and session-based; without a session it answers ``server/discover`` with
  HTTP 404 + ``-32601`` and every other request but ``initialize`` with 400 "No valid session ID provided and not an
  initialize request". Unpinned, bkmcp used to take the 404 for a modern server and never initialized.
* ``chroma-mcp`` 0.2.6 over stdio (its newest release; mcp 1.6.0): answers ``initialize`` with ``2024-11-05``, which
  bkmcp used to refuse, with a hint to pin a ``protocolVersion`` the config check then rejected.

Both run pinned (``.ci/install_interop.sh``); the fixtures skip, or fail under ``BKMCP_INTEROP_REQUIRED=1``.

Seed rows: R01 (era), I01.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_bkmcp, write_mcp_json
from tests.integration.conftest_interop import CHROMA_ENV, INTEROP_DIR

pytestmark = [pytest.mark.integration, pytest.mark.interop]

PYTHON_TAP = INTEROP_DIR / "stdin_tap.py"  # logs what the server read on its stdin


def _n8n(tmp_path, server, **entry):
    return write_mcp_json(
        tmp_path, {"n8n": {"type": "http", "url": server.url, "headers": dict(server.headers), **entry}}
    )


def test_n8n_mcp_http_unpinned_is_legacy_after_its_404_to_the_probe_R01_I01(n8n_server, tmp_path):
    """--check, --tools and a call succeed unpinned: the probe's 404 -32601 leads to initialize, not to a modern
    era the server cannot serve."""
    config = _n8n(tmp_path, n8n_server)
    check = run_bkmcp("--config", str(config), "n8n", "--check", "-v")
    assert check.exit_status == 0, check.stdout + check.stderr + n8n_server.log_tail()
    data = check.json["data"]
    assert data["era"] == "legacy" and data["checks"]["tools"] == "passed" and data["tool_count"] > 0
    assert data["server_info"]["name"] == "n8n-documentation-mcp"
    assert "era probe verdict: legacy" in check.stderr
    sent = [line for line in check.stderr.splitlines() if line.startswith("bkmcp: -> POST")]
    assert ["[server/discover" in sent[0], "[initialize" in sent[1]] == [True, True]
    assert len([line for line in sent if "[server/discover" in line]) == 1

    tools = run_bkmcp("--config", str(config), "n8n", "--tools")
    assert tools.exit_status == 0, tools.stdout
    assert "tools_documentation" in [t["name"] for t in tools.json["data"]["tools"]]

    call = run_bkmcp("--config", str(config), "n8n", "tools_documentation", "--topic", "search_nodes", "-v")
    assert call.exit_status == 0, call.stdout + call.stderr
    text = call.json["data"]["result"]["content"][0]["text"]
    assert "search_nodes" in text
    assert len([line for line in call.stderr.splitlines() if "[tools/call" in line]) == 1


def test_chroma_mcp_2024_11_05_unpinned_and_pinned_R01_I01(chroma_stdio_argv, tmp_path):
    """chroma-mcp 0.2.6 chooses 2024-11-05: bkmcp speaks it unpinned (the probe, then initialize) and pinned (no
    probe, initialize offering 2024-11-05, as the server read it on its stdin); a tool call answers."""
    python, *rest = chroma_stdio_argv
    tap = tmp_path / "stdin.log"
    base = {
        "type": "stdio",
        "command": python,
        "args": [str(PYTHON_TAP), *rest],
        "env": {"BKMCP_STDIN_TAP": str(tap), **CHROMA_ENV},
    }
    config = write_mcp_json(tmp_path, {"chroma": base, "pinned": {**base, "protocolVersion": "2024-11-05"}})
    env = {"HOME": str(tmp_path)}

    check = run_bkmcp("--config", str(config), "chroma", "--check", "--timeout", "120s", env=env)
    assert check.exit_status == 0, check.stdout + check.stderr
    data = check.json["data"]
    assert (data["protocol_version"], data["era"]) == ("2024-11-05", "legacy")
    assert data["server_info"]["name"] == "chroma" and data["tool_count"] > 0
    # mcp 1.6.0 may exit on the probe: then bkmcp's initialize goes to a fresh child (contract §5)
    read = [json.loads(line) for line in tap.read_text().splitlines()]
    assert read[0]["method"] == "server/discover" and read[-2]["method"] == "notifications/initialized"
    offers = [m["params"]["protocolVersion"] for m in read if m.get("method") == "initialize"]
    assert offers and set(offers) == {"2025-11-25"}  # offered; the server chose 2024-11-05

    tap.unlink()
    pinned = run_bkmcp("--config", str(config), "pinned", "chroma_list_collections", "--timeout", "120s", env=env)
    assert pinned.exit_status == 0, pinned.stdout + pinned.stderr
    assert pinned.json["data"]["result"].get("isError") is not True
    read = [json.loads(line) for line in tap.read_text().splitlines()]
    methods = [m.get("method") for m in read]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    assert read[0]["params"]["protocolVersion"] == "2024-11-05"
