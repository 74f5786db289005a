"""Section 3: config file selection (C01), strict parsing and validation (C02), --context (C03), ${VAR} (C04)."""

from __future__ import annotations

import io
import json
import os

import pytest

import bkmcp
from bkmcp import InvalidConfigError
from tests.helpers import run_bkmcp, write_mcp_json


def parse_config(raw, path):
    """``bkmcp.parse_config``, raising the first unusable entry's error as selecting that entry does (an entry's
    problem is an error for that entry only: ``ConfigFile.refusal``)."""
    conf = bkmcp.parse_config(raw, path)
    for name, _message, _hint in conf.unusable:
        raise conf.refusal(name)
    return conf


URL = "https://mcp.example.com/report/mcp/"


def cfg(**servers):
    return {"mcpServers": servers}


def http(url=URL, **extra):
    return {"type": "http", "url": url, **extra}


def dry(*args, **kw):
    """A dry-run of tool t with an empty body: the cheapest path that validates config + auth, zero network."""
    return run_bkmcp(*args, "t", "--body", "{}", "--dry-run", **kw)


# -- C01: which file -------------------------------------------------------------------------------------


def _home_with_config(tmp_path, name="home", server="from-home"):
    home = tmp_path / name
    (home / ".bk-cli").mkdir(parents=True)
    write_mcp_json(home / ".bk-cli" / "mcp.json", {server: http()}, mode=None)
    return home


def test_c01_default_is_home_bk_cli_mcp_json(tmp_path, no_network):
    home = _home_with_config(tmp_path)
    res = dry("from-home", env={"HOME": str(home)})
    assert res.exit_status == 0, res.stderr
    assert res.json["data"]["server"] == "from-home"


def test_c01_config_dir_env_overrides_home(tmp_path, no_network):
    home = _home_with_config(tmp_path)
    cdir = tmp_path / "cdir"
    cdir.mkdir()
    write_mcp_json(cdir / "mcp.json", {"from-dir": http()}, mode=None)
    env = {"HOME": str(home), "BK_CLI_CONFIG_DIR": str(cdir)}
    assert dry("from-dir", env=env).exit_status == 0
    res = dry("from-home", env=env)  # no merge with the home file
    assert res.error_code == "mcp_server_not_found"
    assert res.json["error"]["configured"] == ["from-dir"]


def test_c01_explicit_config_wins_over_everything(tmp_path, no_network):
    home = _home_with_config(tmp_path)
    cdir = tmp_path / "cdir"
    cdir.mkdir()
    write_mcp_json(cdir / "mcp.json", {"from-dir": http()}, mode=None)
    write_mcp_json(tmp_path / "explicit.json", {"explicit": http()}, mode=None)
    env = {"HOME": str(home), "BK_CLI_CONFIG_DIR": str(cdir)}
    assert dry("--config", str(tmp_path / "explicit.json"), "explicit", env=env).exit_status == 0
    for other in ("from-dir", "from-home"):
        assert dry("--config", str(tmp_path / "explicit.json"), other, env=env).error_code == "mcp_server_not_found"


def test_c01_relative_paths_resolve_against_cwd_and_diagnostics_are_absolute(tmp_path, no_network):
    (tmp_path / "proj").mkdir()
    write_mcp_json(tmp_path / "proj" / ".mcp.json", {"a": http()}, mode=None)
    assert dry("--config", "./.mcp.json", "a", cwd=str(tmp_path / "proj")).exit_status == 0
    assert dry("--config=proj/.mcp.json", "a", cwd=str(tmp_path)).exit_status == 0
    res = dry("--config", "missing.json", "a", cwd=str(tmp_path / "proj"))
    assert res.error_code == "mcp_config_not_found" and res.exit_status == 1
    assert str(tmp_path / "proj" / "missing.json") in res.json["error"]["message"]
    rel = run_bkmcp("a", env={"BK_CLI_CONFIG_DIR": "rel"}, cwd=str(tmp_path))
    assert str(tmp_path / "rel" / "mcp.json") in rel.json["error"]["message"]


def test_c01_resolve_config_path_unit(tmp_path):
    env = {"HOME": "/h"}
    assert bkmcp.resolve_config_path(None, env, "/w") == "/h/.bk-cli/mcp.json"
    assert bkmcp.resolve_config_path(None, {**env, "BK_CLI_CONFIG_DIR": "/d"}, "/w") == "/d/mcp.json"
    assert bkmcp.resolve_config_path(None, {**env, "BK_CLI_CONFIG_DIR": "d"}, "/w") == "/w/d/mcp.json"
    assert bkmcp.resolve_config_path("x/../c.json", env, "/w") == "/w/c.json"
    assert bkmcp.resolve_config_path("/abs.json", {**env, "BK_CLI_CONFIG_DIR": "/d"}, "/w") == "/abs.json"
    assert bkmcp.resolve_config_path("~/c.json", env, "/w") == "/h/c.json"
    with pytest.raises(bkmcp.UsageError):
        bkmcp.resolve_config_path("", env, "/w")


def test_c01_c02_missing_file_never_falls_back(tmp_path, no_network):
    """C02: a missing selected file is an error even when another candidate exists."""
    home = _home_with_config(tmp_path, server="s")
    res = dry("--config", str(tmp_path / "nope.json"), "s", env={"HOME": str(home)})
    assert res.error_code == "mcp_config_not_found" and res.stdout == ""
    res = dry("s", env={"HOME": str(home), "BK_CLI_CONFIG_DIR": str(tmp_path / "empty")})
    assert res.error_code == "mcp_config_not_found"
    assert "never falls back" in res.json["error"]["hint"]


def test_c02_directory_as_config(tmp_path, no_network):
    res = dry("--config", str(tmp_path), "s")
    assert res.error_code == "invalid_mcp_config" and str(tmp_path) in res.json["error"]["message"]


# -- C02: strict JSON and structure ----------------------------------------------------------------------

BAD_DOCUMENTS = {
    "comment": '{"mcpServers": {}} // c',
    "block-comment": '{/* c */ "mcpServers": {}}',
    "trailing-comma": '{"mcpServers": {"a": {"type": "http", "url": "https://x/",}}}',
    "nan": '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "protocolVersion": NaN}}}',
    "dup-top": '{"mcpServers": {}, "mcpServers": {}}',
    "dup-server": '{"mcpServers": {"a": {"type": "http", "url": "https://x/"}, "a": {"type": "http", "url": "https://y/"}}}',
    "dup-field": '{"mcpServers": {"a": {"type": "http", "type": "http", "url": "https://x/"}}}',
    "dup-header": '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "headers": {"X-A": "1", "X-A": "2"}}}}',
    "dup-env": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "env": {"A": "1", "A": "1"}}}}',
    "not-object": "[]",
    "empty": "",
    "no-top": "{}",
    "extra-top": '{"mcpServers": {}, "settings": []}',
    "type-missing": '{"mcpServers": {"a": {"args": ["x"]}}}',
    "unknown-field": '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "timout": 5}}}',
    "mcpServers-array": '{"mcpServers": []}',
    "entry-not-object": '{"mcpServers": {"a": "https://x/"}}',
    "type-unknown": '{"mcpServers": {"a": {"type": "sse", "url": "https://x/"}}}',
    "type-case": '{"mcpServers": {"a": {"type": "HTTP", "url": "https://x/"}}}',
    "type-not-string": '{"mcpServers": {"a": {"type": 1, "url": "https://x/"}}}',
    "stdio-field-on-http": '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "command": "x"}}}',
    "http-field-on-stdio": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "url": "https://x/"}}}',
    "bad-version": '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "protocolVersion": "2024-10-07"}}}',
    "stdio-no-command": '{"mcpServers": {"a": {"type": "stdio"}}}',
    "stdio-blank-command": '{"mcpServers": {"a": {"type": "stdio", "command": " "}}}',
    "stdio-args-not-strings": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "args": [1]}}}',
    "stdio-env-not-strings": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "env": {"A": 1}}}}',
    "stdio-env-bad-name": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "env": {"1A": "x"}}}}',
    "stdio-cwd-empty": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "cwd": ""}}}',
    "stdio-nul-command": '{"mcpServers": {"a": {"type": "stdio", "command": "x\\u0000y"}}}',
    "stdio-nul-arg": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "args": ["\\u0000"]}}}',
    "stdio-nul-env": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "env": {"A": "\\u0000"}}}}',
    "stdio-nul-cwd": '{"mcpServers": {"a": {"type": "stdio", "command": "x", "cwd": "/\\u0000"}}}',
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_c02_invalid_documents(name, write_config, no_network):
    """C02: every structural problem is invalid_mcp_config, exit 1, stderr only, naming the absolute file."""
    path = write_config(BAD_DOCUMENTS[name])
    with pytest.raises(InvalidConfigError) as info:
        refusal = bkmcp.load_config(str(path)).refusal("a")  # an entry's problem is an error when it is selected
        if refusal is not None:
            raise refusal
    assert str(path) in info.value.message
    res = dry("--config", str(path), "a")
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "invalid_mcp_config"


BAD_SERVER_NAMES = {
    "space": ("a b", "whitespace"),
    "dash": ("-a", "start with '-'"),
    "option": ("--check", "start with '-'"),
    "empty": ("", "must not be empty"),
    "ctrl": ("a\u0001", "control characters"),
}


@pytest.mark.parametrize("kind", sorted(BAD_SERVER_NAMES))
def test_c02_an_invalid_server_name_is_reported_for_that_server_only(kind, write_config, no_network):
    """Issue 11 item 7: one server named "--check" made every server of the file fail. No command line can select
    such a name, so the entry is left out with a warning naming it; the other servers work."""
    name, why = BAD_SERVER_NAMES[kind]
    path = write_config({"mcpServers": {name: {"type": "nonsense"}, "good": http()}})
    conf = bkmcp.load_config(str(path))
    assert list(conf.servers) == ["good"] and conf.invalid_names[0][0] == name and why in conf.invalid_names[0][1]
    res = dry("--config", str(path), "good")
    assert res.exit_status == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if "is ignored" in line]
    assert len(warning) == 1 and warning[0].startswith(f"bkmcp: warning: {path}: server ") and why in warning[0]
    res = dry("--config", str(path), "a")
    assert res.error_code == "mcp_server_not_found" and res.json["error"]["configured"] == ["good"]


# -- the file people already have (issue 28 item 5): Claude Desktop, Cursor, Cline, Claude Code's .mcp.json ----


def test_c02_an_entry_with_command_and_no_type_is_stdio():
    """The entry every editor writes for a stdio server has no "type": it is a stdio server. What editors add
    per entry and bkmcp does not act on (approval lists, "disabled": false) is accepted; the rest stays refused."""
    conf = parse_config(
        json.dumps(
            cfg(
                desktop={"command": "npx", "args": ["-y", "pkg"], "env": {"K": "v"}},
                code={"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]},
                cline={"command": "node", "autoApprove": ["read"], "alwaysAllow": [], "disabled": False},
            )
        ),
        "/f.json",
    )
    assert {name: s.type for name, s in conf.servers.items()} == {"desktop": "stdio", "code": "stdio", "cline": "stdio"}
    assert conf.servers["desktop"].args == ("-y", "pkg") and conf.servers["desktop"].env == (("K", "v"),)
    assert not any(s.disabled for s in conf.servers.values())


EDITOR_REFUSALS = {
    "sse": ({"type": "sse", "url": "https://x/"}, "unsupported type 'sse'", "Streamable HTTP"),
    "neither": ({"args": ["x"]}, 'field "type" is required', None),
    "type-a-list": ({"type": ["http"], "url": "https://x/"}, '"type" must be a string', '"http"'),
    "type-an-object": ({"type": {"http": 1}, "command": "x"}, '"type" must be a string', '"stdio"'),
    "typo": ({"command": "x", "arg": ["y"]}, "unknown field(s) 'arg'", "known fields"),
    "timeout-typo": ({"command": "x", "timout": 60}, "unknown field(s) 'timout'", "known fields"),
    "windsurf-serverUrl": ({"serverUrl": "https://x/"}, 'field "type" is required', None),
    "disabled-not-bool": ({"command": "x", "disabled": "yes"}, '"disabled" must be true or false', None),
    "approve-not-list": ({"command": "x", "autoApprove": "all"}, '"autoApprove" must be an array', None),
    "allow-not-strings": ({"command": "x", "alwaysAllow": [1]}, '"alwaysAllow" must be an array', None),
}


@pytest.mark.parametrize("case", sorted(EDITOR_REFUSALS))
def test_c02_what_an_editor_file_may_hold_that_bkmcp_refuses(case):
    entry, message, hint = EDITOR_REFUSALS[case]
    with pytest.raises(InvalidConfigError) as info:
        parse_config(json.dumps(cfg(a=entry)), "/f.json")
    assert message in info.value.message
    if hint is not None:
        assert hint in (info.value.hint or "")


def test_c02_a_disabled_entry_is_refused_when_selected_only(write_config, no_network):
    """ "disabled": true (Cline, Roo) is honoured: that server is refused by name, the file's others work."""
    path = write_config(cfg(off={"command": "x", "disabled": True}, on=http()))
    res = dry("--config", str(path), "off")
    assert res.exit_status == 1 and res.error_code == "invalid_mcp_config"
    assert "'off' is disabled in this file" in res.json["error"]["message"]
    assert dry("--config", str(path), "on").exit_status == 0


# Issue 40 item 1: editor files as they are. Each document is the shape that editor's docs show (Claude Desktop's
# claude_desktop_config.json, Cursor's ~/.cursor/mcp.json, Cline's cline_mcp_settings.json, VS Code's
# .vscode/mcp.json), with "time" the stdio server the command selects.
TIME = {"command": "uvx", "args": ["mcp-server-time"]}
EDITOR_FILES = {
    "claude-desktop": (
        {"mcpServers": {"time": TIME, "fs": {"command": "npx", "args": ["-y", "pkg", "/data"]}}, "globalShortcut": ""},
        {"time": "stdio", "fs": "stdio"},
        [],
    ),
    "cursor": (
        {
            "mcpServers": {
                "time": {**TIME, "env": {"TZ": "UTC"}},
                "linear": {"url": "https://mcp.linear.app/mcp"},
                "context7": {"url": "https://mcp.context7.com/mcp", "headers": {"CONTEXT7_API_KEY": "${C7_KEY}"}},
                "legacy": {"type": "sse", "url": "https://mcp.example.com/sse"},
            }
        },
        {"time": "stdio", "linear": "http", "context7": "http"},
        ["legacy"],
    ),
    "cline": (
        {
            "mcpServers": {
                "time": {**TIME, "disabled": False, "autoApprove": ["get_current_time"], "timeout": 60},
                "remote": {"type": "streamableHttp", "url": "https://x/mcp", "disabled": True, "timeout": 30},
                "roo": {"type": "streamable-http", "url": "https://y/mcp", "alwaysAllow": [], "watchPaths": ["a"]},
            }
        },
        {"time": "stdio", "remote": "http", "roo": "http"},
        [],
    ),
    "vscode": (
        {
            "inputs": [{"type": "promptString", "id": "gh-token", "description": "GitHub token", "password": True}],
            "servers": {
                "time": {"type": "stdio", **TIME, "envFile": "${workspaceFolder}/.env", "dev": {"watch": "src/**"}},
                "github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/"},
            },
        },
        {"time": "stdio", "github": "http"},
        [],
    ),
}


@pytest.mark.parametrize("editor", sorted(EDITOR_FILES))
def test_c02_an_editor_file_works_as_it_is(editor, write_config, no_network):
    """Issue 40 item 1: a url entry without "type" is Streamable HTTP (as a command entry is stdio); an entry bkmcp
    cannot take is left out with one warning line and never blocks another server; an editor's own field on the
    selected entry is ignored with a warning naming the field and its editor."""
    document, types, left_out = EDITOR_FILES[editor]
    path = write_config(document)
    conf = bkmcp.load_config(str(path))
    assert {name: s.type for name, s in conf.servers.items()} == types
    assert [name for name, _m, _h in conf.unusable] == left_out
    res = dry("--config", str(path), "time")
    assert res.exit_status == 0 and res.json["data"]["transport"] == "stdio", res.stdout + res.stderr
    warnings = res.stderr.splitlines()
    expected = [f"bkmcp: warning: {path}: server 'legacy': unsupported type 'sse'; this server is left out"]
    expected = expected if left_out else []
    for field in conf.servers["time"].ignored:
        note = bkmcp.EDITOR_IGNORED_FIELDS[field]
        expected.append(f"bkmcp: warning: {path}: server 'time': field \"{field}\" is ignored ({note})")
    assert warnings == expected
    ignored = {"cline": ("autoApprove", "timeout"), "vscode": ("dev", "envFile")}.get(editor, ())
    assert ignored == conf.servers["time"].ignored


def test_c02_an_entry_bkmcp_cannot_take_is_the_error_only_when_selected(write_config, no_network):
    """Issue 40 item 1: selecting the entry is invalid_mcp_config with the entry's own message and hint; an unknown
    field of the selected entry (a typo) still fails."""
    listy = {"type": ["http"], "url": URL}
    path = write_config(
        cfg(good=http(), legacy={"type": "sse", "url": URL}, typo={"command": "x", "arg": ["y"]}, l=listy)
    )
    res = dry("--config", str(path), "legacy")
    assert res.exit_status == 1 and res.error_code == "invalid_mcp_config"
    assert res.json["error"]["message"] == f"{path}: server 'legacy': unsupported type 'sse'"
    assert "Streamable HTTP" in res.json["error"]["hint"]
    assert "server 'typo': unknown field(s) 'arg'" in res.stderr  # the other one: a warning line
    assert "server 'l': \"type\" must be a string; this server is left out" in res.stderr
    res = dry("--config", str(path), "typo")
    assert res.error_code == "invalid_mcp_config" and "unknown field(s) 'arg'" in res.json["error"]["message"]
    assert "known fields" in res.json["error"]["hint"]


def test_c02_duplicate_server_names_are_named():
    with pytest.raises(InvalidConfigError, match='duplicate key "a" at line [0-9]+ column [0-9]+'):
        parse_config(BAD_DOCUMENTS["dup-server"], "/f.json")


def test_c02_whole_file_is_validated_not_only_the_selected_server(write_config, no_network):
    """Every entry is checked; one the command does not select is left out with one warning line (issue 40)."""
    path = write_config(cfg(good=http(), bad={"type": "http", "url": "ftp://x/"}))
    res = dry("--config", str(path), "good")
    assert res.exit_status == 0 and res.stderr.splitlines() == [
        f"bkmcp: warning: {path}: server 'bad': field \"url\" must be an absolute http:// or https:// URL; "
        "this server is left out"
    ]
    assert dry("--config", str(path), "bad").error_code == "invalid_mcp_config"


def test_c02_valid_documents_parse():
    conf = parse_config(
        json.dumps(
            cfg(
                a=http(headers={}, protocolVersion="2025-06-18"),
                b={"type": "stdio", "command": "npx", "args": ["-y", "pkg"], "env": {"K": "${V}"}, "cwd": "/srv"},
                c=http(),
            )
        ),
        "/f.json",
    )
    assert conf.servers["a"].protocol_version == "2025-06-18" and conf.servers["a"].headers == ()
    assert conf.servers["b"].args == ("-y", "pkg") and conf.servers["b"].env == (("K", "${V}"),)
    assert conf.servers["b"].cwd == "/srv" and conf.servers["c"].config_file == "/f.json"
    assert parse_config('{"mcpServers": {}}', "/f").servers == {}
    for version in bkmcp.SUPPORTED_VERSIONS:
        parse_config(json.dumps(cfg(a=http(protocolVersion=version))), "/f")
    # issue 36: the version chroma-mcp 0.2.6 answers with is a valid pin
    pinned = parse_config(json.dumps(cfg(a=http(protocolVersion="2024-11-05"))), "/f")
    assert pinned.servers["a"].protocol_version == "2024-11-05"


def test_c02_messages_never_echo_values():
    """A05: parse and validation errors name fields, never header or config values."""
    secret = "s3cr3t-abcdef"
    docs = [
        '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "headers": {"Authorization": "' + secret + '",}}}}',
        json.dumps(cfg(a=http(headers={"X-Token": secret, "Host": "h"}))),
        json.dumps(cfg(a=http(headers={"X-Token": secret, "Bad Name": "v"}))),
        json.dumps(cfg(a=http(headers={f"Authorization: Bearer {secret}": ""}))),
        json.dumps(cfg(a=http(headers={f"X-Api-Key={secret}": "x"}))),
        json.dumps(cfg(a=http(**{f"Authorization: Bearer {secret}": "x"}))),
        json.dumps({"mcpServers": {}, f"token {secret}": 1}),
        json.dumps(cfg(a={"type": "stdio", "command": "x", "env": {f"API_KEY={secret}": "v"}})),
        json.dumps(cfg(a=http(headers={"X-Token": secret + "\n"}))),
        json.dumps(cfg(a=http(url=f"https://user:{secret}@x/"))),
        json.dumps(cfg(a=http(url=f"https://x/#{secret}"))),
        json.dumps(cfg(a=http(extra=secret))),
    ]
    for doc in docs:
        with pytest.raises(InvalidConfigError) as info:
            parse_config(doc, "/f.json")
        assert secret not in info.value.message + (info.value.hint or "")


# -- C02: url ---------------------------------------------------------------------------------------------

BAD_URLS = [
    "/relative/mcp",
    "mcp.example.com/mcp",
    "ftp://x/mcp",
    "file:///etc/passwd",
    "https://user@x/",
    "https://user:pw@x/",
    "https://x/mcp#frag",
    "https://x/#",
    "https:///path",
    "",
    "https://x:99999/",
    "https://x:0/",
    "https://x/ mcp",
    "https://x/\nmcp",
    "ws://x/",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_c02_bad_urls(url):
    with pytest.raises(InvalidConfigError, match='"url"'):
        parse_config(json.dumps(cfg(a=http(url=url))), "/f")


def test_c02_url_missing_or_not_string():
    for entry in ({"type": "http"}, {"type": "http", "url": 5}):
        with pytest.raises(InvalidConfigError, match='"url"'):
            parse_config(json.dumps(cfg(a=entry)), "/f")


KEPT_URLS = [
    "https://mcp.example.com/report/mcp/",
    "https://mcp.example.com/report/mcp",
    "http://127.0.0.1:8080/mcp?stage=prod&x=%2F&empty=",
    "https://mcp.example.com/a//b/?q=1&q=2",
    "https://mcp.example.com",
    "http://[::1]:9000/m",
    "HTTPS://Mcp.Example.COM/Path/",
]


@pytest.mark.parametrize("url", KEPT_URLS)
def test_c02_url_kept_byte_for_byte_in_dry_run(url, write_config, no_network):
    """docs/contract.md §3: path, trailing slash and query are kept; nothing appended."""
    path = write_config(cfg(a=http(url=url)))
    res = dry("--config", str(path), "a")
    assert res.exit_status == 0, res.stderr
    assert res.json["data"]["url"] == url
    assert json.dumps(url)[1:-1] in res.stdout


# -- C02: headers -----------------------------------------------------------------------------------------

FORBIDDEN = [
    "Host",
    "Content-Length",
    "Content-Type",
    "Accept",
    "Connection",
    "Keep-Alive",
    "Transfer-Encoding",
    "Upgrade",
    "TE",
    "Trailer",
    "Proxy-Connection",
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Mcp-Method",
    "Mcp-Name",
    "Mcp-Param-Foo",
    "mcp-param-x",
    "MCP-PARAM-Region",
    "host",
    "CONTENT-TYPE",
    "mcp-session-id",
]


@pytest.mark.parametrize("name", FORBIDDEN)
def test_c02_forbidden_headers(name, write_config, no_network):
    with pytest.raises(InvalidConfigError, match="managed by bkmcp"):
        parse_config(json.dumps(cfg(a=http(headers={name: "v"}))), "/f")
    path = write_config(cfg(a=http(headers={name: "v"})))
    assert dry("--config", str(path), "a").error_code == "invalid_mcp_config"


@pytest.mark.parametrize(
    "headers",
    [
        '{"X-A": "1", "x-a": "2"}',
        '{"Authorization": "Bearer a", "AUTHORIZATION": "Bearer b"}',
        '{"X-Api-Key": "1", "x-api-KEY": "2"}',
    ],
)
def test_c02_a03_case_insensitive_duplicate_headers(headers):
    doc = '{"mcpServers": {"a": {"type": "http", "url": "https://x/", "headers": ' + headers + "}}}"
    with pytest.raises(InvalidConfigError, match="same header"):
        parse_config(doc, "/f")


@pytest.mark.parametrize(
    "headers",
    [
        [],
        "x",
        {"X-A": 1},
        {"X-A": None},
        {"X-A": ["v"]},
        {"X-A": {"v": 1}},
        {"": "v"},
        {"X A": "v"},
        {"X:A": "v"},
        {"X-A": "a\r\nInjected: 1"},
        {"X-A": "a\u0000"},
    ],
)
def test_c02_bad_headers(headers):
    with pytest.raises(InvalidConfigError):
        parse_config(json.dumps(cfg(a=http(headers=headers))), "/f")


def test_c02_headers_may_be_empty_or_absent_and_custom_ones_pass(write_config, no_network):
    for headers in ({}, None):
        entry = http() if headers is None else http(headers=headers)
        path = write_config(cfg(a=entry))
        res = dry("--config", str(path), "a")
        assert res.json["data"]["headers"] == {}
    path = write_config(cfg(a=http(headers={"X-Tenant": "t1", "User-Agent": "me/1"})))
    assert dry("--config", str(path), "a").json["data"]["headers"] == {"X-Tenant": "t1", "User-Agent": "me/1"}


# -- C03: --context ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--context", "prod", "a", "--check"),
        ("a", "--check", "--context", "prod"),
        ("--context=prod", "a", "--tools"),
        ("a", "t", "--body", "{}", "--dry-run", "--context", "x"),
        ("--context", "x"),
        ("a", "--context", "x"),
        ("a", "--help", "--context", "x"),
    ],
)
def test_c03_context_is_unsupported_even_without_a_config_file(args, tmp_path, no_network, monkeypatch):
    """C03: explicit --context → unsupported_option, exit 1, before any config or credential is loaded."""
    calls = []
    monkeypatch.setattr(bkmcp, "load_config", lambda *a: calls.append(a))
    monkeypatch.setattr(bkmcp, "resolve_server", lambda *a: calls.append(a))
    res = run_bkmcp(*args, env={"HOME": str(tmp_path), "BK_CLI_CONFIG_DIR": str(tmp_path / "none")})
    assert res.exit_status == 1 and res.error_code == "unsupported_option" and res.stdout == ""
    assert calls == []


def test_c03_broken_or_switched_bk_cli_contexts_do_not_matter(tmp_path, no_network):
    """C03: bk-cli's own context files (missing, switched, corrupt) never affect MCP config or identity."""
    home = _home_with_config(tmp_path, server="s")
    bk = home / ".bk-cli"
    results = [dry("s", env={"HOME": str(home)}).stdout]
    (bk / "config.json").write_text('{"current_context": "prod", "broken": ')
    (bk / "contexts" / "prod").mkdir(parents=True)
    write_mcp_json(bk / "contexts" / "prod", {"s": {"type": "http", "url": "https://evil/"}}, mode=None)
    (bk / "contexts" / "prod" / "credentials").write_text("Bearer ctx-token-123")
    results.append(dry("s", env={"HOME": str(home), "BK_CLI_CONTEXT": "prod"}).stdout)
    assert results[0] == results[1] and results[0]
    assert "ctx-token" not in results[1] and "evil" not in results[1]


def test_c03_bk_cli_variables_are_never_read(write_config, no_network):
    """C03/§4: BK_CLI_* identity variables are ignored unless the config references them."""
    path = write_config(cfg(a=http()))
    res = dry("--config", str(path), "a", env={"BK_CLI_PERSONAL_TOKEN": "tok-xyz-123", "BK_CLI_CONTEXT": "prod"})
    assert res.json["data"]["headers"] == {}
    assert "tok-xyz-123" not in res.stdout + res.stderr


# -- C04: environment references ---------------------------------------------------------------------------


def test_c04_expand_env_unit():
    env = {"A": "1", "B": "two", "REF": "${B}", "E": ""}
    assert bkmcp.expand_env("x${A}y${B}z${A}", env, where="w") == ("x1ytwoz1", ["1", "two", "1"])
    assert bkmcp.expand_env("$${A}", env, where="w") == ("${A}", [])
    assert bkmcp.expand_env("$${A}${A}", env, where="w") == ("${A}1", ["1"])
    assert bkmcp.expand_env("${REF}", env, where="w") == ("${B}", ["${B}"])  # single pass, no recursion
    assert bkmcp.expand_env("$A $ {A} $", env, where="w") == ("$A $ {A} $", [])
    assert bkmcp.expand_env("${E}", env, where="w") == ("", [""])
    assert bkmcp.expand_env("$(echo hi) `id`", env, where="w") == ("$(echo hi) `id`", [])


@pytest.mark.parametrize("template", ["${env:X}", "${input:X}", "${}", "${1A}", "${X:-d}", "${X", "${A B}", "${-}"])
def test_c04_invalid_reference_syntax(template):
    with pytest.raises(InvalidConfigError, match="unsupported reference syntax"):
        bkmcp.expand_env(template, {"X": "1", "1A": "1"}, where="w")


def test_c04_multiple_references_and_literal_dollar_brace_in_dry_run(write_config, no_network):
    path = write_config(cfg(a=http(headers={"X-Route": "${REGION}-${ZONE}/$${literal}", "X-Token": "${TOK}"})))
    res = dry("--config", str(path), "a", env={"REGION": "cn", "ZONE": "z1", "TOK": "tok-abcdef"})
    assert res.exit_status == 0, res.stderr
    assert res.json["data"]["headers"] == {"X-Route": "cn-z1/${literal}", "X-Token": "***"}
    assert "tok-abcdef" not in res.stdout + res.stderr


def test_c04_value_containing_a_reference_stays_literal(write_config, no_network):
    path = write_config(cfg(a=http(headers={"X-Route": "${OUTER}"})))
    res = dry("--config", str(path), "a", env={"OUTER": "${INNER}", "INNER": "boom"})
    assert res.json["data"]["headers"] == {"X-Route": "${INNER}"}


def test_c04_missing_variable_names_variable_server_and_header_never_a_value(write_config, no_network):
    path = write_config(cfg(a=http(headers={"Authorization": "Bearer ${PRESENT}-${ABSENT_TOKEN}"})))
    res = dry("--config", str(path), "a", env={"PRESENT": "present-secret-value"})
    assert res.exit_status == 1 and res.error_code == "missing_environment_variable" and res.stdout == ""
    err = res.json["error"]
    assert err["variable"] == "ABSENT_TOKEN"
    assert "ABSENT_TOKEN" in err["message"] and "'a'" in err["message"] and "'Authorization'" in err["message"]
    assert str(path) in err["message"]
    assert "present-secret-value" not in res.stderr


def test_c04_unrelated_servers_missing_variable_does_not_block(write_config, no_network):
    path = write_config(
        cfg(
            target=http(headers={"X-Token": "${TARGET_TOKEN}"}),
            other=http(headers={"Authorization": "Bearer ${NEVER_SET}", "X-Bad": "${env:NOPE}"}),
            third={"type": "stdio", "command": "x", "args": ["${NOT_SET_EITHER}"]},
        )
    )
    res = dry("--config", str(path), "target", env={"TARGET_TOKEN": "t-123456"})
    assert res.exit_status == 0, res.stderr
    assert dry("--config", str(path), "other").error_code == "missing_environment_variable"


def test_c04_empty_credential_after_expansion_is_not_anonymous(write_config, no_network):
    for headers in (
        {"Authorization": "${EMPTY}"},
        {"X-Bkapi-Authorization": "${EMPTY}"},
        {"X-Api-Key": "${EMPTY}"},
        {"Authorization": "Bearer ${EMPTY}"},
        {"Authorization": "  "},
    ):
        path = write_config(cfg(a=http(headers=headers)))
        res = dry("--config", str(path), "a", env={"EMPTY": ""})
        assert res.error_code == "invalid_mcp_config", headers
        assert res.stdout == ""


def test_c04_config_file_is_never_modified(write_config, no_network):
    path = write_config(cfg(a=http(headers={"X-Token": "${TOK}"})), mode=0o640)
    before = (path.read_bytes(), os.stat(path).st_mode, os.stat(path).st_mtime_ns)
    dry("--config", str(path), "a", env={"TOK": "abc-123456"})
    dry("--config", str(path), "a")
    run_bkmcp("--config", str(path), "a")
    assert (path.read_bytes(), os.stat(path).st_mode, os.stat(path).st_mtime_ns) == before


def test_c04_stdio_args_and_env_are_expanded_for_the_selected_server(write_config, no_network):
    path = write_config(
        cfg(
            fs={
                "type": "stdio",
                "command": "npx",
                "args": ["--root", "${ROOT}", "$${HOME}"],
                "env": {"API_KEY": "${FS_KEY}", "MODE": "m"},
                "cwd": "/srv",
            }
        )
    )
    res = dry("--config", str(path), "fs", env={"ROOT": "/data", "FS_KEY": "fs-key-123456"})
    assert res.exit_status == 0, res.stderr
    data = res.json["data"]
    assert data["transport"] == "stdio" and data["command"] == "npx"
    assert data["args"] == ["--root", "/data", "${HOME}"]
    assert data["env"] == {"API_KEY": "***", "MODE": "***"}
    assert "url" not in data and "headers" not in data
    assert "fs-key-123456" not in res.stdout + res.stderr
    assert dry("--config", str(path), "fs", env={"ROOT": "/data"}).error_code == "missing_environment_variable"


# -- permission warning ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_literal_credentials_in_a_readable_file_warn_once(mode, write_config, no_network):
    path = write_config(
        cfg(
            a=http(headers={"Authorization": "Bearer literal-tok-123"}),
            b=http(headers={"X-Api-Key": "literal-key-456"}),
        ),
        mode=mode,
    )
    res = dry("--config", str(path), "a")
    assert res.exit_status == 0
    warnings = [line for line in res.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "chmod 600" in warnings[0] and str(path) in warnings[0]
    assert "literal-tok-123" not in res.stderr and "literal-key-456" not in res.stderr


@pytest.mark.parametrize(
    ("mode", "headers"),
    [
        (0o600, {"Authorization": "Bearer literal-tok"}),
        (0o644, {"Authorization": "Bearer ${TOK}"}),
        (0o644, {"X-Trace": "not-a-secret"}),
        (0o644, {}),
    ],
)
def test_no_warning_for_private_files_or_references(mode, headers, write_config, no_network):
    path = write_config(cfg(a=http(headers=headers)), mode=mode)
    res = dry("--config", str(path), "a", env={"TOK": "t-123456"})
    assert res.exit_status == 0 and res.stderr == ""


def test_c02_config_encoding_and_positions(write_config, no_network):
    assert parse_config(b'\xef\xbb\xbf{"mcpServers": {}}', "/f").servers == {}
    with pytest.raises(InvalidConfigError, match="UTF-8"):
        parse_config(b'{"mcpServers": {"a\xff": {}}}', "/f")
    with pytest.raises(InvalidConfigError, match="line 3 column"):
        parse_config('{\n "mcpServers": {\n  "a": 1,}}', "/f")
    assert run_bkmcp("--config=", "a").error_code == "usage_error"


@pytest.mark.parametrize("template", ["${ÄÖ}", "${é}", "${A-B}", "${1A}"])
def test_c04_invalid_reference_says_what_a_name_may_contain(template):
    """Issue 11 item 7: `${ÄÖ}` was refused with a message that said letters are allowed."""
    with pytest.raises(InvalidConfigError) as info:
        bkmcp.expand_env(template, {}, where="w")
    assert "[A-Za-z_][A-Za-z0-9_]*" in info.value.message and "ASCII" in info.value.message


@pytest.mark.parametrize("home", [None, ""])
def test_c01_no_home_is_config_not_found_not_a_guess(home, tmp_path, no_network):
    """Issue 11 item 7: `HOME=` made the default config `/.bk-cli/mcp.json`. With HOME unset or empty the default
    path has no location: mcp_config_not_found saying what to set; BK_CLI_CONFIG_DIR and --config still work."""
    (tmp_path / ".bk-cli").mkdir()
    write_mcp_json(tmp_path / ".bk-cli" / "mcp.json", {"a": http()}, mode=None)  # must not be found via the cwd
    env = {"PATH": "/usr/bin:/bin"} if home is None else {"HOME": home}
    assert bkmcp.resolve_config_path(None, env, str(tmp_path)) == "~/.bk-cli/mcp.json"
    assert bkmcp.resolve_config_path("~/c.json", env, str(tmp_path)) == "~/c.json"
    out, err = io.StringIO(), io.StringIO()
    status = bkmcp.main(
        ["a", "t", "--body", "{}", "--dry-run"], stdin=io.StringIO(), stdout=out, stderr=err, env=env, cwd=str(tmp_path)
    )
    error = json.loads(err.getvalue().splitlines()[-1])["error"]
    assert status == 1 and out.getvalue() == "" and error["code"] == "mcp_config_not_found"
    assert "HOME is not set" in error["message"] and "~/.bk-cli/mcp.json" in error["message"]
    assert all(word in error["hint"] for word in ("HOME", "BK_CLI_CONFIG_DIR", "--config"))
    ok = bkmcp.main(
        ["a", "t", "--body", "{}", "--dry-run"],
        stdin=io.StringIO(),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
        env={**env, "BK_CLI_CONFIG_DIR": str(tmp_path / ".bk-cli")},
        cwd="/",
    )
    assert ok == 0
    helped = io.StringIO()
    assert bkmcp.main(["--help"], stdin=io.StringIO(), stdout=helped, stderr=io.StringIO(), env=env, cwd="/") == 0
