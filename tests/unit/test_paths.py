"""One rule for every path a user gives (docs/contract.md §2): ``~`` is the injected HOME, a relative path starts at
the injected working directory — for --config, --body @FILE, --registry, --import, --events and a stdio entry's
``command`` and ``cwd``. Every case runs with an injected HOME and cwd that differ from the process's own."""

from __future__ import annotations

import os

import pytest

import bkmcp
from tests.helpers import run_bkmcp, write_mcp_json


@pytest.fixture
def places(tmp_path, monkeypatch):
    """(home, work): the injected HOME and cwd; the process's own cwd and HOME are elsewhere."""
    home, work, elsewhere = tmp_path / "home", tmp_path / "work", tmp_path / "elsewhere"
    for folder in (home, work, elsewhere):
        folder.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HOME", str(elsewhere))
    return home, work


def _config(folder, name="mcp.json", **servers):
    return write_mcp_json(folder, servers, name=name)


def test_expand_user_path_unit():
    env = {"HOME": "/h"}
    assert bkmcp.expand_user_path("~", env, "/w") == "/h"
    assert bkmcp.expand_user_path("~/a/../b", env, "/w") == "/h/b"
    assert bkmcp.expand_user_path("rel/x", env, "/w") == "/w/rel/x"
    assert bkmcp.expand_user_path("/abs", env, "/w") == "/abs"
    assert bkmcp.expand_user_path("~/x", {}, "/w") is None
    assert bkmcp.expand_user_path("~/x", {"HOME": ""}, "/w") is None
    assert bkmcp.expand_user_path("~root/x", {}, "/w") == os.path.expanduser("~root/x")
    with pytest.raises(bkmcp.UsageError, match="--events: HOME is not set"):
        bkmcp.resolve_user_path("~/e.log", {}, "/w", option="--events")


def test_body_file_follows_the_rule(places):
    home, work = places
    config = _config(work, a={"type": "http", "url": "https://example.invalid/mcp"})
    (home / "args.json").write_text('{"from": "home"}', encoding="utf-8")
    (work / "args.json").write_text('{"from": "work"}', encoding="utf-8")
    env = {"HOME": str(home)}
    for source, expected in (("@~/args.json", "home"), ("@args.json", "work")):
        res = run_bkmcp("--config", str(config), "a", "t", "--body", source, "--dry-run", env=env, cwd=str(work))
        assert res.exit_status == 0, res.stdout + res.stderr
        assert res.json["data"]["arguments"] == {"from": expected}


def test_registry_and_import_follow_the_rule(places):
    """``--registry ~/r.db`` is the injected HOME's file (it used to be the process's HOME for --import)."""
    home, work = places
    _config(home, a={"type": "http", "url": "https://example.invalid/mcp"})
    env = {"HOME": str(home)}
    res = run_bkmcp("--registry", "~/r.db", "--import", "~/mcp.json", env=env, cwd=str(work))
    assert res.exit_status == 0, res.stdout + res.stderr
    assert (home / "r.db").exists()
    assert res.json["data"]["registry"] == str(home / "r.db")
    listed = run_bkmcp("--registry", "~/r.db", "--list", env=env, cwd=str(work))
    assert listed.exit_status == 0 and "a" in listed.stdout
    _config(work, name="other.json", b={"type": "http", "url": "https://example.invalid/mcp"})
    rel = run_bkmcp("--registry", "rel.db", "--import", "other.json", env=env, cwd=str(work))
    assert rel.exit_status == 0, rel.stdout + rel.stderr
    assert (work / "rel.db").exists()
    missing = run_bkmcp("--registry", "~/r.db", "--list", env={"HOME": ""}, cwd=str(work))
    assert missing.exit_status == 1 and missing.error_code == "usage_error"
    assert "HOME is not set" in missing.json["error"]["message"]


def test_resident_registry_and_events_follow_the_rule(places):
    home, work = places
    env = {"HOME": str(home)}
    res = run_bkmcp(
        "--resident",
        "--registry",
        "~/r.db",
        "--events",
        "ev.log",
        stdin=b'{"action": "shutdown"}\n',
        env=env,
        cwd=str(work),
    )
    assert res.exit_status == 0, res.stdout + res.stderr
    assert (home / "r.db").exists() and (work / "ev.log").exists()


def test_stdio_command_and_cwd_follow_the_rule(places):
    home, work = places
    (work / "sub").mkdir()
    server = bkmcp.ServerConfig(
        name="s", type="stdio", config_file=str(work / "mcp.json"), command="./bin/srv", cwd="sub"
    )
    resolved = bkmcp.resolve_server(server, {"HOME": str(home)}, cwd=str(work))
    assert resolved.cwd == str(work / "sub")
    assert resolved.command == str(work / "sub" / "bin" / "srv")
    at_home = bkmcp.ServerConfig(name="s", type="stdio", config_file="x", command="~/bin/srv")
    assert bkmcp.resolve_server(at_home, {"HOME": str(home)}, cwd=str(work)).command == str(home / "bin" / "srv")
    on_path = bkmcp.ServerConfig(name="s", type="stdio", config_file="x", command="python3")
    assert bkmcp.resolve_server(on_path, {"HOME": str(home)}, cwd=str(work)).command == "python3"
    with pytest.raises(bkmcp.InvalidConfigError, match='field "command": HOME is not set'):
        bkmcp.resolve_server(at_home, {}, cwd=str(work))
