"""The minimal config (one stdio and one HTTP server) where a newcomer or an agent looks first (issue 28 item 4):
the root help, the config-not-found hint and skills/bkmcp/SKILL.md show the same entries, and they load."""

from __future__ import annotations

import json
from pathlib import Path

import bkmcp
from tests.helpers import ROOT, run_bkmcp

EXAMPLE = "\n".join(bkmcp.CONFIG_EXAMPLE_LINES)


def test_the_example_is_a_config_bkmcp_loads(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(EXAMPLE, encoding="utf-8")
    config = bkmcp.load_config(str(path))
    assert {name: server.type for name, server in config.servers.items()} == {"fs": "stdio", "api": "http"}
    result = run_bkmcp("--config", str(path), "--help")
    assert "Configured servers (2): api, fs" in result.stdout


def test_the_root_help_shows_it(tmp_path: Path) -> None:
    result = run_bkmcp("--help", env={"HOME": str(tmp_path)})
    assert result.exit_status == 0
    assert "\n".join("  " + line for line in bkmcp.CONFIG_EXAMPLE_LINES) in result.stdout


def test_the_config_not_found_hint_shows_it(tmp_path: Path) -> None:
    result = run_bkmcp("srv", "--tools", env={"HOME": str(tmp_path)})
    assert result.exit_status == 1 and result.error_code == "mcp_config_not_found"
    hint = result.json["error"]["hint"]
    shown = hint[hint.index("{") :]
    assert json.loads(shown) == json.loads(EXAMPLE)


def test_skill_md_shows_it_in_both_halves() -> None:
    skill = (ROOT / "skills" / "bkmcp" / "SKILL.md").read_text(encoding="utf-8")
    zh, en = skill.split("\n# English\n")
    for half in (zh, en):
        assert f"```json\n{EXAMPLE}\n```" in half
    assert "`bkmcp` is\n`python3 bkmcp.pyz`" in en or "`bkmcp` is `python3 bkmcp.pyz`" in en
