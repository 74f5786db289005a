"""Section 11: routing (contract §2, seed §3), help paths (D01), --body (P04, P06), dry-run (O02), the exit ladder."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import bkmcp
from tests.helpers import ROOT, Result, routed_options, run_bkmcp, write_mcp_json

URL = "https://mcp.example.com/report/mcp/?stage=prod"


@pytest.fixture
def config(write_config):
    return write_config(
        {
            "mcpServers": {
                "report-prod": {
                    "type": "http",
                    "url": URL,
                    "headers": {"X-Bkapi-Authorization": "${REPORT_BK_AUTH}", "X-Tenant": "t1"},
                },
                "public-docs": {"type": "http", "url": "https://mcp.example.com/public/mcp/"},
                "local-fs": {
                    "type": "stdio",
                    "command": "npx",
                    "args": ["-y", "server-fs", "${DATA_DIR}"],
                    "env": {"API_KEY": "${FS_KEY}"},
                    "cwd": "/srv",
                },
                # a closed loopback port: tool help must try discovery there, never read stdin or body files
                "closed": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
            }
        }
    )


AUTH = json.dumps({"access_token": "acc-tok-123456"})
ENV = {"REPORT_BK_AUTH": AUTH, "DATA_DIR": "/data", "FS_KEY": "fs-key-123456"}


class TrapStdin(io.TextIOWrapper):
    """A stdin that records every read (D01/P04: help never reads it; --body - reads it exactly once)."""

    def __init__(self, data: bytes = b'{"from": "stdin"}') -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.reads: list[str] = []
        self._buffer_proxy = _CountingBuffer(self.buffer, self.reads)

    def read(self, *args):  # type: ignore[override]
        self.reads.append("text")
        return super().read(*args)

    def readline(self, *args):  # type: ignore[override]
        self.reads.append("line")
        return super().readline(*args)

    @property
    def buffer(self):  # type: ignore[override]
        proxy = self.__dict__.get("_buffer_proxy")
        return proxy if proxy is not None else super().buffer


class _CountingBuffer:
    def __init__(self, raw, reads):
        self._raw, self._reads = raw, reads

    def read(self, *args):
        self._reads.append("bytes")
        return self._raw.read(*args)


def run_with(stdin, *args, env=None, cwd=None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    base = {"HOME": "/nonexistent", "PATH": os.environ.get("PATH", "")}
    base.update(env or {})
    status = bkmcp.main(list(args), stdin=stdin, stdout=out, stderr=err, env=base, cwd=cwd or os.getcwd())
    return Result(status, out.getvalue(), err.getvalue())


def c(config, *args, **kw):
    kw.setdefault("env", ENV)
    return run_bkmcp("--config", str(config), *args, **kw)


# -- parse_argv / check_invocation units -----------------------------------------------------------------


def test_parse_argv_global_options_anywhere():
    for argv in (
        ["--config", "c.json", "--timeout", "5s", "-v", "--insecure", "--jq", ".", "srv", "--check"],
        ["srv", "--check", "--config", "c.json", "--timeout=5s", "--verbose", "--insecure", "--jq=."],
        ["srv", "--config=c.json", "--check", "-v", "--jq", ".", "--insecure", "--timeout", "5s"],
    ):
        inv = bkmcp.parse_argv(argv)
        assert (inv.server, inv.config, inv.timeout, inv.verbose, inv.insecure, inv.jq, inv.check) == (
            "srv",
            "c.json",
            "5s",
            True,
            True,
            ".",
            True,
        )


def test_parse_argv_tool_tokens_and_globals_after_the_tool():
    inv = bkmcp.parse_argv(
        [
            "srv",
            "Tool.Name_x-y",
            "--limit",
            "20",
            "--q=a b",
            "--flag",
            "--config",
            "c",
            "--neg",
            "-5",
            "--body",
            "{}",
            "-v",
        ]
    )
    assert inv.tool == "Tool.Name_x-y" and inv.config == "c" and inv.body == "{}" and inv.verbose
    assert [(t.name, t.value, t.has_equals) for t in inv.tool_tokens] == [
        ("limit", "20", False),
        ("q", "a b", True),
        ("flag", None, False),
        ("neg", "-5", False),
    ]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--bogus"], "usage_error"),
        (["-x"], "usage_error"),
        (["srv", "--bogus"], "usage_error"),
        (["srv", "--check", "--bogus", "1"], "usage_error"),
        (["srv", "tool", "-x"], "usage_error"),
        (["srv", "tool", "--"], "usage_error"),
        (["srv", "tool", "extra", "--help"], "usage_error"),  # a plain call hears of it after discovery
        (["srv", "tool", "--body", "{}", "extra"], "usage_error"),
        (["--config", "a", "--config", "b", "srv"], "usage_error"),
        (["--config=a", "srv", "--config=b"], "usage_error"),
        (["srv", "--timeout", "1s", "--timeout", "2s"], "usage_error"),
        (["srv", "--jq", ".", "--jq", "."], "usage_error"),
        (["srv", "t", "--body", "{}", "--body", "{}"], "usage_error"),
        (["srv", "--check", "--check"], "usage_error"),
        (["srv", "t", "--dry-run", "--dry-run"], "usage_error"),
        (["srv", "--config"], "usage_error"),
        (["srv", "t", "--body"], "usage_error"),
        (["srv", "t", "--body", "--dry-run"], "usage_error"),
        (["--config", "--check", "srv"], "usage_error"),
        (["srv", "--check=yes"], "usage_error"),
        (["srv", "--help=1"], "usage_error"),
        (["-", "--check"], "usage_error"),
        (["--format", "json", "srv"], "unsupported_option"),
        (["srv", "t", "--format=json"], "unsupported_option"),
    ],
)
def test_parse_argv_rejections(argv, code):
    with pytest.raises(bkmcp.BkmcpError) as info:
        bkmcp.check_invocation(bkmcp.parse_argv(argv))
    assert info.value.code == code


def test_repeatable_flags():
    inv = bkmcp.parse_argv(["-v", "srv", "--verbose", "-h", "--help"])
    assert inv.verbose and inv.help


@pytest.mark.parametrize(
    "argv",
    [
        ["srv", "--check", "--tools"],
        ["srv", "--check", "tool"],
        ["srv", "tool", "--check"],
        ["srv", "--tools", "t"],
        ["srv", "--check", "--tools", "--help"],
        ["srv", "--check", "--body", "{}"],
        ["srv", "--tools", "--body", "-"],
        ["srv", "--check", "--dry-run"],
        ["srv", "--tools", "--dry-run"],
        ["srv", "--dry-run"],
        ["--dry-run"],
        ["srv", "t", "--dry-run"],
        ["srv", "t", "--body", "{}", "--dry-run", "--limit", "5"],
        ["srv", "t", "--limit=5", "--body", "{}", "--dry-run"],
        ["srv", "t", "--body", "{}", "--dry-run", "--help"],
        ["--check"],
        ["--tools"],
        ["--registry", "x"],
        ["--resident", "srv"],
        ["--resident", "--check"],
        ["srv", "--body", "{}"],
        ["--body", "{}"],
        ["srv", "--timeout", "0"],
        ["srv", "--timeout", "-1"],
        ["srv", "--timeout", "1d"],
        ["srv", "--timeout", "abc"],
    ],
)
def test_mode_exclusivity_and_combinations(argv):
    """docs/contract.md §2/seed §3/§8: modes exclude each other; dry-run needs tool + --body and no named flags."""
    with pytest.raises(bkmcp.UsageError):
        bkmcp.check_invocation(bkmcp.parse_argv(argv))


@pytest.mark.parametrize("name", ["a b", "a\tb", "a\x01", ""])
def test_invalid_server_names_on_the_command_line(name):
    with pytest.raises(bkmcp.UsageError):
        bkmcp.parse_argv([name, "--check"])
    with pytest.raises(bkmcp.UsageError):
        bkmcp.parse_argv(["srv", ""])  # empty tool name


# -- the same through main: streams and exit status ------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("srv", "--check", "--tools"),
        ("srv", "tool", "extra", "--dry-run", "--body", "{}"),
        ("--bogus",),
        ("srv", "--timeout", "1d", "--check"),
        ("srv", "t", "--body", "{}", "--dry-run", "--q", "1"),
    ],
)
def test_usage_errors_are_local_envelopes_on_stderr(args, tmp_path, no_network):
    res = run_bkmcp(*args, env={"HOME": str(tmp_path)})
    assert res.exit_status == 1 and res.stdout == ""
    assert res.error_code == "usage_error"
    assert len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr


def test_usage_errors_come_before_config_errors(tmp_path, no_network):
    res = run_bkmcp("--config", str(tmp_path / "missing.json"), "srv", "--check", "--tools")
    assert res.error_code == "usage_error"


def test_global_options_before_or_after_the_server(config, no_network):
    a = run_bkmcp(
        "--config", str(config), "--timeout", "5s", "-v", "report-prod", "t", "--body", "{}", "--dry-run", env=ENV
    )
    b = run_bkmcp(
        "report-prod", "t", "--body", "{}", "--dry-run", "--timeout=5s", "--config", str(config), "--verbose", env=ENV
    )
    assert a.exit_status == b.exit_status == 0
    assert a.stdout == b.stdout


def test_names_match_exactly(config, no_network):
    res = c(config, "Report-Prod", "t", "--body", "{}", "--dry-run")
    assert res.error_code == "mcp_server_not_found" and "report-prod" in res.json["error"]["hint"]
    assert res.json["error"]["configured"] == ["closed", "local-fs", "public-docs", "report-prod"]
    res = c(config, "report-prod", "Tool.Name_x-y", "--body", "{}", "--dry-run")
    assert res.json["data"]["tool"] == "Tool.Name_x-y"


def test_version(no_network):
    res = run_bkmcp("--version")
    assert res.exit_status == 0 and res.stdout == f"bkmcp {bkmcp.__version__}\n"


@pytest.mark.parametrize("args", [("--resident", "srv"), ("--resident", "--check"), ("--registry", "r.db")])
def test_resident_option_combinations(args, tmp_path, no_network):
    res = run_bkmcp(*args, env={"HOME": str(tmp_path)})
    assert res.exit_status == 1 and res.error_code == "usage_error" and res.stdout == ""


# -- D01: help ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(), ("--help",), ("-h",), ("-v",), ("--help", "--jq", ".["), ("--timeout", "5s")])
def test_d01_root_help_without_any_config_file(args, tmp_path, no_network):
    stdin = TrapStdin()
    res = run_with(stdin, *args, env={"HOME": str(tmp_path / "nohome")})
    assert res.exit_status == 0 and res.stderr == ""
    assert res.stdout.startswith(f"bkmcp {bkmcp.__version__}")
    assert "Examples:" in res.stdout and "--dry-run" in res.stdout
    assert str(tmp_path / "nohome" / ".bk-cli" / "mcp.json") in res.stdout
    assert stdin.reads == []


def test_d01_root_help_names_every_mode(tmp_path, no_network):
    """Issue 17 item 3 (contract §2): the root help names the resident mode, the registry tools and completion,
    one line each, pointing at docs/resident.md."""
    out = run_bkmcp("--help", env={"HOME": str(tmp_path)}).stdout
    for text in (
        "bkmcp --resident --registry SOURCE",
        "bkmcp --registry FILE --import mcp.json",
        "bkmcp --registry FILE --list",
        "bkmcp --completion bash|zsh|fish",
        "docs/resident.md",
    ):
        assert text in out, text
    lines = [line for line in out.splitlines() if line.startswith(("  bkmcp --resident", "  bkmcp --registry FILE"))]
    assert len(lines) == 3 and all(len(line) <= 120 for line in lines)


def test_d01_root_help_says_whether_the_config_exists_and_lists_its_servers(tmp_path, write_config, no_network):
    """Issue 17 item 7: a missing file is called missing (never "in use"), with where bkmcp looks; an existing
    file's server names are listed offline (without reading variables or connecting)."""
    missing = run_bkmcp("--help", env={"HOME": str(tmp_path)}).stdout
    path = tmp_path / ".bk-cli" / "mcp.json"
    assert f"Config file: {path} (not found" in missing and "in use" not in missing
    assert "$BK_CLI_CONFIG_DIR/mcp.json" in missing
    config = write_config(
        {
            "mcpServers": {
                "zeta": {"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer ${UNSET}"}},
                "alpha": {"type": "stdio", "command": "srv"},
            }
        }
    )
    res = run_bkmcp("--config", str(config), "--help")
    assert res.exit_status == 0 and res.stderr == ""
    assert f"Config file: {config}\n" in res.stdout
    assert "Configured servers (2): alpha, zeta" in res.stdout
    broken = write_config("{not json", name="broken.json")
    res = run_bkmcp("--config", str(broken))
    assert res.exit_status == 0 and f"Config file: {broken} (invalid:" in res.stdout
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # no writer: reading it would block the help forever
    res = run_bkmcp("--config", str(fifo), "--help")
    assert res.exit_status == 0 and f"Config file: {fifo} (invalid: not a regular file)" in res.stdout
    assert run_bkmcp("--config", str(fifo), "--completion", "servers").stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        ("--resident", "--registry", "x.db", "--help"),
        ("--resident", "-h"),
        ("--help", "--resident", "--registry", "x.db", "--events", "-"),
        ("--registry", "x.db", "--list", "--help"),
        ("--registry", "x.db", "--import", "mcp.json", "-h"),
    ],
)
def test_d01_help_with_a_mode_prints_that_modes_help_only(args, tmp_path, no_network):
    """Issue 17 item 7 (contract §2): --help with --resident or a registry tool prints that mode's help and nothing
    else: no registry is created, stdin is not served, nothing is imported."""
    stdin = TrapStdin()
    res = run_with(stdin, *args, cwd=str(tmp_path))
    assert res.exit_status == 0 and res.stderr == "", res.stderr
    assert res.stdout.startswith("bkmcp --resident") and "docs/resident.md" in res.stdout
    assert "--max-processes" in res.stdout and "--registry FILE --import" in res.stdout
    assert stdin.reads == [] and list(tmp_path.iterdir()) == []


def test_d01_root_help_shows_the_selected_file(tmp_path, no_network):
    res = run_bkmcp("--help", env={"BK_CLI_CONFIG_DIR": str(tmp_path)})
    assert str(tmp_path / "mcp.json") in res.stdout
    assert str(tmp_path / "x.json") in run_bkmcp("--config", "x.json", "-h", cwd=str(tmp_path)).stdout


@pytest.mark.parametrize(
    "args",
    [
        ("report-prod",),
        ("report-prod", "--help"),
        ("report-prod", "-h"),
        ("-h", "report-prod"),
        ("report-prod", "--help", "--body", "-"),
        ("local-fs",),
        ("local-fs", "--help"),
        ("public-docs", "--help"),
        ("report-prod", "--check", "--help"),
        ("report-prod", "--tools", "-h"),
    ],
)
def test_d01_server_help_needs_no_variables_no_network_no_stdin(args, config, no_network):
    stdin = TrapStdin()
    res = run_with(stdin, "--config", str(config), *args, env={})  # none of the referenced variables is set
    assert res.exit_status == 0, res.stderr
    assert res.stderr == "" and stdin.reads == []
    server = next(a for a in args if not a.startswith("-"))
    assert f"bkmcp server '{server}'" in res.stdout and "Examples:" in res.stdout
    assert str(config) in res.stdout


def test_d01_server_help_content(config, no_network):
    out = c(config, "report-prod", env={}).stdout
    assert URL in out and "X-Bkapi-Authorization  ***" in out and "X-Tenant" in out and "t1" in out
    assert "acc-tok" not in out
    out = c(config, "local-fs", env={}).stdout
    assert "npx" in out and "-y server-fs ${DATA_DIR}" in out and "API_KEY=***" in out and "/srv" in out
    assert "anonymous" in c(config, "public-docs").stdout


def test_d01_server_help_still_validates_the_file(write_config, no_network):
    path = write_config('{"mcpServers": {"a": {"type": "http", "url": "https://x/"},}}')
    assert run_bkmcp("--config", str(path), "a", "--help").error_code == "invalid_mcp_config"
    assert run_bkmcp("--config", str(path) + ".missing", "a").error_code == "mcp_config_not_found"


@pytest.mark.parametrize("body", ["-", "@/nonexistent/args.json", "@-"])
def test_d01_p04_tool_help_never_reads_stdin_or_body_files(body, config):
    """Tool help discovers (here: a closed local port), but never reads --body input."""
    stdin = TrapStdin()
    res = run_with(stdin, "--config", str(config), "closed", "tool", "--help", "--body", body, env={})
    assert stdin.reads == []
    assert res.exit_status == 2 and res.stderr.count("Traceback") == 0
    assert "nonexistent" not in res.stdout + res.stderr


def test_d01_help_never_calls(config, monkeypatch, no_network):
    for name in ("run_check", "run_tools", "run_call", "resolve_server", "read_body"):
        monkeypatch.setattr(bkmcp, name, lambda *a, _n=name, **k: pytest.fail("help must not reach " + _n))
    for args in (("report-prod",), ("report-prod", "--help"), ("--help",), ("report-prod", "--check", "-h")):
        assert c(config, *args).exit_status == 0


# -- P04/P06: --body input ---------------------------------------------------------------------------------


def dry(config, body, stdin=b"", cwd=None, server="report-prod"):
    return c(config, server, "t", "--body", body, "--dry-run", stdin=stdin, cwd=cwd)


def dry_via(via, config, tmp_path, text):
    """The same --body text given inline, as @FILE (relative to cwd) or on stdin (-)."""
    if via == "inline":
        return dry(config, text)
    if via == "file":
        (tmp_path / "b.json").write_text(text, encoding="utf-8")
        return dry(config, "@b.json", cwd=str(tmp_path))
    return dry(config, "-", stdin=text.encode())


def test_p04_inline_file_and_stdin_give_the_same_arguments(config, tmp_path, no_network):
    text = '{"keyword": "网关错误", "limit": 20, "big": 123456789012345678901234567890, "r": 0.1}'
    (tmp_path / "params.json").write_text(text, encoding="utf-8")
    results = [
        dry(config, text),
        dry(config, "@params.json", cwd=str(tmp_path)),
        dry(config, "@" + str(tmp_path / "params.json")),
        dry(config, "-", stdin=text.encode()),
    ]
    assert {r.exit_status for r in results} == {0}
    assert len({r.stdout for r in results}) == 1
    expected = '"arguments":{"keyword":"网关错误","limit":20,"big":123456789012345678901234567890,"r":0.1}'
    assert expected in results[0].stdout


def test_p04_stdin_is_read_exactly_once(config, no_network):
    stdin = TrapStdin(b'{"a": 1}')
    res = run_with(stdin, "--config", str(config), "report-prod", "t", "--body", "-", "--dry-run", env=ENV)
    assert res.exit_status == 0 and res.json["data"]["arguments"] == {"a": 1}
    assert len(stdin.reads) == 1


def test_p04_stdin_not_read_without_dash(config, no_network):
    stdin = TrapStdin()
    res = run_with(stdin, "--config", str(config), "report-prod", "t", "--body", "{}", "--dry-run", env=ENV)
    assert res.exit_status == 0 and stdin.reads == []


BAD_BODIES = {
    "empty": "",
    "spaces": "  \n\t",
    "array": "[1, 2]",
    "empty-array": "[]",
    "number": "1",
    "string": '"text"',
    "null": "null",
    "bool": "true",
    "invalid": "{keyword: 1}",
    "single-quotes": "{'a': 1}",
    "trailing-comma": '{"a": 1,}',
    "truncated": '{"a": ',
    "two-values": "{} {}",
    "nan": '{"a": NaN}',
    "dup-top": '{"a": 1, "a": 1}',
    "dup-deep": '{"a": {"b": [{"c": 1, "c": 2}]}}',
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
@pytest.mark.parametrize("via", ["inline", "file", "stdin"])
def test_p04_bad_bodies_are_invalid_arguments(name, via, config, tmp_path, no_network):
    text = BAD_BODIES[name]
    res = dry_via(via, config, tmp_path, text)
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "invalid_mcp_arguments", res.stderr


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_p04_bom_accepted_and_non_utf8_rejected(via, config, tmp_path, no_network):
    def run(raw: bytes):
        if via == "file":
            (tmp_path / "b.json").write_bytes(raw)
            return dry(config, "@b.json", cwd=str(tmp_path))
        return dry(config, "-", stdin=raw)

    ok = run(b'\xef\xbb\xbf{"a": "\xe4\xb8\xad"}')
    assert ok.exit_status == 0 and ok.json["data"]["arguments"] == {"a": "中"}
    for raw in (b'{"a": "\xff"}', b"\xff\xfe{\x00}\x00", b'{"a": "\xe4\xb8"}'):
        res = run(raw)
        assert res.error_code == "invalid_mcp_arguments" and "UTF-8" in res.json["error"]["message"]


def test_p04_undecodable_inline_body_is_rejected(config, no_network):
    res = dry(config, os.fsdecode(b'{"a": "\xff"}'))
    assert res.error_code == "invalid_mcp_arguments"


def test_p04_body_file_problems(config, tmp_path, no_network):
    res = dry(config, "@missing.json", cwd=str(tmp_path))
    assert res.exit_status == 1 and str(tmp_path / "missing.json") in res.json["error"]["message"]
    assert dry(config, "@").exit_status == 1
    assert dry(config, "@a\x00b").error_code == "usage_error"  # NUL in the path: not an internal error
    assert run_bkmcp("--config", "a\x00b", "srv", "--check").error_code == "invalid_mcp_config"
    assert dry(config, "@" + str(tmp_path)).exit_status == 1  # a directory


def test_p04_body_file_resolves_against_cwd_not_the_config_dir(write_config, tmp_path, no_network):
    (tmp_path / "cfgdir").mkdir()
    (tmp_path / "work").mkdir()
    path = write_mcp_json(tmp_path / "cfgdir", {"a": {"type": "http", "url": "https://x/"}})
    (tmp_path / "cfgdir" / "args.json").write_text('{"where": "config dir"}')
    (tmp_path / "work" / "args.json").write_text('{"where": "cwd"}')
    res = run_bkmcp("--config", str(path), "a", "t", "--body", "@args.json", "--dry-run", cwd=str(tmp_path / "work"))
    assert res.json["data"]["arguments"] == {"where": "cwd"}


SHELL_TEXT = 'it\'s "quoted"\nline2\ttab \\ back\\\\slash $(touch {marker}) `touch {marker}` ${{HOME}} 中文 ; | & > <'


@pytest.mark.parametrize("via", ["inline", "file", "stdin"])
def test_p06_shell_sensitive_text_is_data(via, config, tmp_path, no_network):
    marker = tmp_path / "pwned"
    value = SHELL_TEXT.format(marker=marker)
    text = json.dumps({"q": value, 'k"$(x)': ["`y`", "\\n"]}, ensure_ascii=False, separators=(",", ":"))
    res = dry_via(via, config, tmp_path, text)
    assert res.exit_status == 0, res.stderr
    assert res.json["data"]["arguments"] == {"q": value, 'k"$(x)': ["`y`", "\\n"]}
    assert text in res.stdout  # written back byte for byte
    assert not marker.exists()


def test_p04_number_fidelity_through_dry_run(config, no_network):
    """P02/P04: big ints, 1e400, 0.1, 12345678901234567890.5, -0.0, 1E+2 reach the output byte-equivalent."""
    text = (
        '{"a":123456789012345678901234567890,"b":1e400,"c":0.1,"d":12345678901234567890.5,"e":-0.0,'
        '"f":1E+2,"g":[1.50,-1e-400],"h":"00123"}'
    )
    res = dry(config, text)
    assert '"arguments":' + text + "," in res.stdout


# -- O02: dry-run ------------------------------------------------------------------------------------------


def test_o02_dry_run_envelope_http(config, no_network):
    res = dry(config, '{"keyword": "x"}')
    assert res.exit_status == 0 and res.stderr == ""
    assert res.stdout.count("\n") == 1
    assert res.json == {
        "ok": True,
        "data": {
            "dry_run": True,
            "server": "report-prod",
            "tool": "t",
            "transport": "http",
            "url": URL,
            "headers": {"X-Bkapi-Authorization": "***", "X-Tenant": "t1"},
            "arguments": {"keyword": "x"},
            "unverified": ["tool_exists", "input_schema", "authentication", "permissions"],
        },
    }
    assert "acc-tok-123456" not in res.stdout


def test_o02_dry_run_envelope_stdio(config, no_network):
    res = dry(config, "{}", server="local-fs")
    assert res.json == {
        "ok": True,
        "data": {
            "dry_run": True,
            "server": "local-fs",
            "tool": "t",
            "transport": "stdio",
            "command": "npx",
            "args": ["-y", "server-fs", "/data"],
            "env": {"API_KEY": "***"},
            "arguments": {},
            "unverified": ["tool_exists", "input_schema", "authentication", "permissions"],
        },
    }
    assert "fs-key-123456" not in res.stdout


def test_o02_dry_run_never_starts_anything_remote(config, monkeypatch, no_network):
    for name in ("run_check", "run_tools", "run_call"):
        monkeypatch.setattr(bkmcp, name, lambda *a, _n=name, **k: pytest.fail("dry-run reached " + _n))
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: pytest.fail("dry-run spawned a process"))
    assert dry(config, "{}", server="local-fs").exit_status == 0
    assert dry(config, "{}").exit_status == 0


def test_o02_dry_run_still_validates_config_and_auth(write_config, no_network):
    path = write_config(
        {"mcpServers": {"a": {"type": "http", "url": "https://x/", "headers": {"Authorization": "Bearer ${T}"}}}}
    )
    assert (
        run_bkmcp("--config", str(path), "a", "t", "--body", "{}", "--dry-run").error_code
        == "missing_environment_variable"
    )
    res = run_bkmcp("--config", str(path), "a", "t", "--body", "{}", "--dry-run", env={"T": ""})
    assert res.error_code == "invalid_mcp_config"


@pytest.mark.parametrize(
    "extra",
    [("--limit", "5"), ("--limit=5",), ("--check",), ("--tools",), ("--flag",)],
)
def test_o02_dry_run_rejections_through_main(extra, config, no_network):
    res = c(config, "report-prod", "t", "--body", "{}", "--dry-run", *extra)
    assert res.exit_status == 1 and res.error_code == "usage_error" and res.stdout == ""


# -- the exit ladder ---------------------------------------------------------------------------------------


def test_keyboard_interrupt_is_130(config, monkeypatch, no_network):
    """Ctrl-C before anything was sent: exit 130, a line on stderr, nothing on stdout (contract §7)."""

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bkmcp, "run_tools", interrupted)
    res = c(config, "report-prod", "--tools")
    assert res.exit_status == 130 and res.stdout == "" and "Traceback" not in res.stderr
    assert "interrupted" in res.stderr
    monkeypatch.setattr(bkmcp, "read_body", interrupted)
    assert dry(config, "-").exit_status == 130


@pytest.mark.parametrize(
    ("sent", "mode", "outcome", "stage"),
    [
        (["initialize"], ("--tools",), "not_sent", "negotiate"),
        (["server/discover", "tools/list"], ("--check",), "not_sent", "discover"),
        (["server/discover", "tools/list", "tools/call"], ("t", "--body", "{}"), "unknown", "call"),
    ],
)
def test_keyboard_interrupt_after_a_request_was_sent_is_an_mcp_cancelled_envelope(
    sent, mode, outcome, stage, config, monkeypatch, no_network
):
    """Issue 17 item 2: once a request was sent, Ctrl-C prints one ok:false envelope on stdout (mcp_cancelled,
    exit 130) that says whether tools/call had been sent and the stage it stopped in."""

    def interrupted(server, ctx, *a, **k):
        for method in sent:
            ctx.note_request(method)
        raise KeyboardInterrupt

    for name in ("run_tools", "run_check", "run_call"):
        monkeypatch.setattr(bkmcp, name, interrupted)
    res = c(config, "report-prod", *mode)
    assert res.exit_status == 130 and res.stderr == ""
    env = bkmcp.parse_json(res.stdout)
    assert env["ok"] is False and env["error"]["code"] == "mcp_cancelled"
    assert (env["error"]["outcome"], env["error"]["stage"]) == (outcome, stage)
    assert env["data"]["server"] == "report-prod"
    if outcome == "unknown":
        assert "do not" in env["error"]["hint"]  # never retried blindly


def test_internal_error_before_remote_is_exit_1_without_traceback(config, monkeypatch, no_network):
    monkeypatch.setattr(bkmcp, "load_config", lambda *a: {}["boom"])
    res = c(config, "report-prod", "--tools")
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "internal_error"
    assert "Traceback" not in res.stderr and "KeyError" in res.json["error"]["message"]
    assert "BKMCP_TRACEBACK=1" in res.json["error"]["hint"]


def test_internal_error_after_remote_start_is_exit_2_on_stdout(config, monkeypatch, no_network):
    monkeypatch.setattr(bkmcp, "run_check", lambda *a, **k: 1 / 0)
    res = c(config, "report-prod", "--check")
    assert res.exit_status == 2 and res.stderr == "" and "Traceback" not in res.stdout
    env = bkmcp.parse_json(res.stdout)
    assert env["error"]["code"] == "internal_error" and "do not retry it blindly" in env["error"]["hint"]


def test_traceback_only_when_asked(config, monkeypatch, no_network):
    monkeypatch.setattr(bkmcp, "run_check", lambda *a, **k: 1 / 0)
    res = c(config, "report-prod", "--check", env={**ENV, "BKMCP_TRACEBACK": "1"})
    assert "Traceback" in res.stderr and "ZeroDivisionError" in res.stderr
    assert bkmcp.parse_json(res.stdout)["error"]["code"] == "internal_error"


def test_broken_stdout_is_not_a_traceback(config, no_network):
    class Broken(io.StringIO):
        def write(self, s):
            raise BrokenPipeError

    err = io.StringIO()
    status = bkmcp.main(
        ["--config", str(config), "report-prod", "t", "--body", "{}", "--dry-run"],
        stdin=io.StringIO(),
        stdout=Broken(),
        stderr=err,
        env=ENV,
        cwd=os.getcwd(),
    )
    assert status == 1 and "Traceback" not in err.getvalue()


def test_surrogates_never_break_a_strict_utf8_stdout(config, no_network):
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    err = io.StringIO()
    status = bkmcp.main(
        ["--config", str(config), "report-prod", "t", "--body", '{"s": "\\udcff"}', "--dry-run"],
        stdin=io.StringIO(),
        stdout=out,
        stderr=err,
        env=ENV,
        cwd=os.getcwd(),
    )
    out.flush()
    assert status == 0, err.getvalue()
    assert bkmcp.parse_json(raw.getvalue())["data"]["arguments"] == {"s": "\udcff"}


def test_pretty_output_on_a_terminal(config, no_network):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bkmcp.main(
        ["--config", str(config), "report-prod", "t", "--body", "{}", "--dry-run"],
        stdin=io.StringIO(),
        stdout=out,
        stderr=io.StringIO(),
        env=ENV,
        cwd=os.getcwd(),
    )
    assert out.getvalue().startswith('{\n  "ok": true,')
    one = Tty()  # the documented way to one line on a terminal (docs/user-guide.md, Output): --jq .
    bkmcp.main(
        ["--config", str(config), "report-prod", "t", "--body", "{}", "--dry-run", "--jq", "."],
        stdin=io.StringIO(),
        stdout=one,
        stderr=io.StringIO(),
        env=ENV,
        cwd=os.getcwd(),
    )
    assert one.getvalue().count("\n") == 1 and bkmcp.parse_json(one.getvalue()) == bkmcp.parse_json(out.getvalue())


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("30s", 30.0), ("2m", 120.0), ("1h", 3600.0), ("1.5", 1.5), (None, 60.0)]
)
def test_timeout_reaches_the_operation_as_one_budget(text, seconds, config, monkeypatch, no_network):
    seen = []
    monkeypatch.setattr(
        bkmcp, "run_tools", lambda server, ctx, *, insecure: seen.append(ctx.deadline.seconds) or {"tools": []}
    )
    args = ("--timeout", text) if text else ()
    assert c(config, "public-docs", "--tools", *args).exit_status == 0
    assert seen == [pytest.approx(seconds)]


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1d", "0ms", ""])
def test_bad_timeouts_are_usage_errors_before_anything(text, tmp_path, no_network):
    res = run_bkmcp("--config", str(tmp_path / "missing.json"), "srv", "--check", "--timeout", text)
    assert res.exit_status == 1 and res.error_code == "usage_error"


def test_body_from_a_missing_stdin_is_a_usage_error(config, no_network):
    closed = io.TextIOWrapper(io.BytesIO(b""))
    closed.close()  # ValueError on read
    for stdin in (object(), closed):  # no stdin at all / a closed one
        res = run_with(stdin, "--config", str(config), "public-docs", "t", "--body", "-", "--dry-run", env=ENV)
        assert res.exit_status == 1 and res.error_code == "usage_error", res.stderr


def test_swallowed_flag_value_gets_a_precise_hint():
    """A value-less flag before another flag ("--loud --text x") explains what happened instead of only
    "unexpected argument"."""
    with pytest.raises(bkmcp.UsageError) as swallowed:
        bkmcp.parse_argv(["srv", "tool", "--loud", "--text", "x"])
    assert "unexpected argument 'x'" in swallowed.value.message
    assert swallowed.value.hint and "--loud took '--text' as its value" in swallowed.value.hint
    assert "--loud=true" in swallowed.value.hint
    # the rest of an unquoted value waits for discovery: its error names the tool's flags (test_positional_hints.py)
    assert bkmcp.parse_argv(["srv", "tool", "--text", "a", "b"]).positional == [("b", "text")]
    assert bkmcp.parse_argv(["srv", "tool", "./notes", "--x=1", "y"]).positional == [("./notes", None), ("y", None)]


# -- shell completion (issue 17 item 7) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shell", "marker"), [("bash", "-F _bkmcp bkmcp"), ("zsh", "#compdef bkmcp"), ("fish", "complete -c bkmcp")]
)
def test_completion_scripts_name_the_options_and_ask_for_server_names_offline(shell, marker, tmp_path, no_network):
    stdin = TrapStdin()
    res = run_with(stdin, "--completion", shell, env={"HOME": str(tmp_path)})
    assert res.exit_status == 0 and res.stderr == "" and stdin.reads == []
    assert marker in res.stdout
    for option in ("--check", "--tools", "--body", "--dry-run", "--jq", "--config", "--resident", "--registry"):
        assert option in res.stdout or f"-l {option[2:]}" in res.stdout, option
    assert "--completion servers" in res.stdout


def test_completion_servers_lists_the_configured_names_and_never_fails(tmp_path, write_config, no_network):
    config = write_config(
        {
            "mcpServers": {
                "b-two": {"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer ${NOPE}"}},
                "a.one": {"type": "stdio", "command": "never-run"},
            }
        }
    )
    res = run_bkmcp("--config", str(config), "--completion", "servers")
    assert (res.exit_status, res.stdout, res.stderr) == (0, "a.one\nb-two\n", "")
    res = run_bkmcp("--completion", "servers", env={"BK_CLI_CONFIG_DIR": str(config.parent)})
    assert res.stdout == "a.one\nb-two\n"
    (tmp_path / "x").mkdir()
    for env in (
        {"HOME": str(tmp_path / "none")},
        {"BK_CLI_CONFIG_DIR": str(write_config("{bad", name="x/mcp.json").parent)},
    ):
        res = run_bkmcp("--completion", "servers", env=env)
        assert (res.exit_status, res.stdout, res.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "args",
    [("--completion", "ksh"), ("--completion",), ("srv", "--completion", "bash"), ("--completion", "bash", "--check")],
)
def test_completion_usage_errors(args, tmp_path, no_network):
    res = run_bkmcp(*args, env={"HOME": str(tmp_path)})
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "usage_error", res.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes_options_and_server_names(tmp_path, write_config):
    """The generated script in a real bash: options after '-', server names from the config (via
    `bkmcp --completion servers`: reads the file, starts and contacts nothing)."""
    config = write_config(
        {
            "mcpServers": {
                "demo": {"type": "stdio", "command": "never-run"},
                "lab": {"type": "http", "url": "https://x/"},
            }
        }
    )
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "bkmcp"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "bkmcp.py"} "$@"\n')
    wrapper.chmod(0o755)
    script = run_bkmcp("--completion", "bash").stdout
    (tmp_path / "complete.bash").write_text(script)

    def complete(*words: str) -> list[str]:
        line = " ".join(words)
        program = (
            f"source {tmp_path / 'complete.bash'}\n"
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n"
            '_bkmcp bkmcp "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
            "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
        )
        proc = subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", program],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "BK_CLI_CONFIG_DIR": str(config.parent)},
        )
        assert proc.returncode == 0, proc.stderr
        return [w for w in proc.stdout.splitlines() if w]

    assert complete("bkmcp", "") == ["demo", "lab"]
    assert complete("bkmcp", "l") == ["lab"]
    assert "--tools" in complete("bkmcp", "demo", "--t") and "--timeout" in complete("bkmcp", "--t")
    assert sorted(complete("bkmcp", "--completion", "")) == ["bash", "fish", "zsh"]
    other = write_config({"mcpServers": {"only": {"type": "stdio", "command": "x"}}}, name="other.json")
    assert complete("bkmcp", "--config", str(other), "") == ["only"]
    assert complete("bkmcp", "demo", "") == []  # its server cannot start: no tool names, and never file names
    assert complete("bkmcp", "demo", "--ch") == ["--check"]  # the options valid after a server
    assert "--check" not in complete("bkmcp", "demo", "tool", "--")  # ... and after a tool
    assert complete("bkmcp", "demo", "tool", "--text", "") == []  # a tool flag's value: nothing offered
    assert complete("bkmcp", "--timeout", "=", "") == []  # bash splits --name=VALUE at '='
    assert complete("bkmcp", "--config", "=", str(other), "") == ["only"]


@pytest.mark.parametrize(
    "args",
    [
        ("--completion", "tools"),
        ("--completion", "tools", "srv", "tool"),
        ("--completion", "flags", "srv"),
        ("--completion", "flags", "srv", "tool", "--x", "1"),
        ("--completion", "flags", "srv", "tool", "extra"),
        ("--completion", "servers", "srv"),
        ("--completion", "tools", "srv", "--check"),
    ],
)
def test_completion_words_take_exactly_their_words(args, tmp_path, no_network):
    """Issue 28 item 6: ``--completion tools SERVER`` and ``--completion flags SERVER TOOL``, nothing else."""
    res = run_bkmcp(*args, env={"HOME": str(tmp_path)})
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "usage_error", res.stderr
    assert ("a server name" in res.stderr) == (args[1] != "servers"), res.stderr


def test_completion_words_print_nothing_when_the_server_cannot_answer(tmp_path, write_config, no_network):
    """A server whose program is missing, an unknown server, a broken config: no words, no output, exit 0."""
    config = write_config({"mcpServers": {"gone": {"type": "stdio", "command": str(tmp_path / "missing")}}})
    for args in (("tools", "gone"), ("flags", "gone", "echo"), ("tools", "unknown")):
        res = run_bkmcp("--config", str(config), "--completion", *args, env={"HOME": str(tmp_path)})
        assert (res.exit_status, res.stdout, res.stderr) == (0, "", ""), args


def test_completion_words_offer_only_names_a_shell_cannot_expand():
    """compgen -W expands its words: a server's name with '$', '`', quotes, spaces or a leading '-' is left out."""
    tools = [
        {"name": "read_file", "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
        {"name": "$(touch pwned)"},
        {"name": "a b"},
        {"name": "-x"},
        {"name": 7},
        "not a tool",
        {"name": "ns/tool.v2", "inputSchema": {"type": "object", "properties": {"ok": {}, "it's": {"type": "string"}}}},
    ]
    assert bkmcp.render_completion_words(tools, None) == "read_file\nns/tool.v2\n"
    assert bkmcp.render_completion_words(tools, "read_file") == "--path\n"
    assert bkmcp.render_completion_words(tools, "ns/tool.v2") == "--ok\n"
    assert bkmcp.render_completion_words(tools, "missing") == ""


@pytest.mark.parametrize(
    "args",
    [
        ("--completion", "prompts", "srv", "--prompt", "p"),
        ("--completion", "resources", "srv", "tool"),
        ("--completion", "values", "srv", "--prompt", "p"),
        ("--completion", "values", "srv", "tool", "--x", "1"),
        ("--completion", "values", "srv", "--read", "u{x}", "--x", "1", "extra"),
        ("--completion", "flags", "srv", "--read", "u{x}", "--x", "1"),
        ("--completion", "prompts", "srv", "--prompts"),
    ],
)
def test_prompt_and_resource_completion_words_take_exactly_their_words(args, tmp_path, no_network):
    """``--completion prompts|resources SERVER``, ``flags SERVER --prompt NAME|--read TEMPLATE`` and ``values
    SERVER --prompt NAME|--read TEMPLATE --ARG PARTIAL`` (contract §2), nothing else."""
    res = run_bkmcp(*args, env={"HOME": str(tmp_path)})
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "usage_error", res.stderr


def test_a_templates_flags_are_read_from_it_offline(tmp_path, write_config, no_network):
    """``--completion flags SERVER --read TEMPLATE``: its variables, no server asked (even one Tab may not start);
    a malformed template: nothing. A prompt's arguments named like a reserved option get no flag."""
    config = write_config({"mcpServers": {"gone": {"type": "stdio", "command": str(tmp_path / "missing")}}})
    words = run_bkmcp("--config", str(config), "--completion", "flags", "gone", "--read", "x://{a}/{+b}{?c,a}")
    assert (words.exit_status, words.stdout, words.stderr) == (0, "--a\n--b\n--c\n", "")
    broken = run_bkmcp("--config", str(config), "--completion", "flags", "gone", "--read", "x://{a")
    assert (broken.exit_status, broken.stdout, broken.stderr) == (0, "", "")
    prompt = {"name": "p", "arguments": [{"name": "who"}, {"name": "help"}, {"name": "a b"}, "x", {"name": 3}]}
    assert bkmcp.render_completion_target_flags(prompt, None) == "--who\n"
    assert bkmcp.render_completion_target_flags(None, "x://plain") == ""


def test_uris_templates_and_values_are_offered_as_is_or_single_quoted():
    """A word a shell would expand (a template's braces, '?', '$(…)', a blank) is offered in single quotes; one
    holding a quote, a backslash, '!', a control or non-ASCII character, or starting with '-', never."""
    words = ["mock://a", "mock://n/{id}", "$(touch x)", "two words", "it's", "a\\b", "hi!", "t\tab", "é", "-x", "", 5]
    assert bkmcp.render_completion_quoted(words) == "mock://a\n'mock://n/{id}'\n'$(touch x)'\n'two words'\n"


def test_completion_servers_offers_only_names_a_shell_cannot_expand(write_config, no_network):
    """Issue 36 item 2: server names pass the same filter as tool names (a project's .mcp.json may name a server
    ``$(…)``, which a shell would run when the word reached it)."""
    hostile = ["$(id>x)", "`id`", "${x:-y}", "~root", "*", "a'b", 'a"b', "a;b", "ok.one"]
    config = write_config({"mcpServers": {name: {"command": "never-run"} for name in hostile}})
    res = run_bkmcp("--config", str(config), "--completion", "servers")
    assert (res.exit_status, res.stdout, res.stderr) == (0, "ok.one\n", "")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_script_takes_what_bkmcp_prints_literally(shell, tmp_path):
    """Issue 36 item 2: the script never lets the shell expand a word bkmcp printed (no ``compgen -W``), even one
    the filter would have left out: a stand-in ``bkmcp`` prints hostile words, the script offers them as they are
    and nothing runs."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (tests/integration/test_completion_shells.py requires it in CI)")
    marker = tmp_path / "ran"
    words = [f"$(touch {marker})", f"`touch {marker}`", f"${{x:-$(touch {marker})}}", "~root", "*", "plain"]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bkmcp").write_text("#!/bin/sh\ncat " + str(tmp_path / "words") + "\n")
    (bindir / "bkmcp").chmod(0o755)
    (tmp_path / "words").write_text("".join(f"{w}\n" for w in words))
    (tmp_path / "complete.sh").write_text(bkmcp.render_completion("bash", ["bkmcp"]))
    # zsh runs the function as bashcompinit's _bash_complete does (its options: 0-based arrays, ksh globs)
    setup = "autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else ""
    options = "emulate -L sh; setopt kshglob noshglob braceexpand; " if shell == "zsh" else ""
    program = (
        f"{setup}source {tmp_path / 'complete.sh'}\n"
        f"run() {{ {options}COMP_WORDS=(bkmcp ''); COMP_CWORD=1; _bkmcp bkmcp '' bkmcp; "
        "printf '%s\\n' \"${COMPREPLY[@]}\"; }\nrun\n"
    )
    argv = [shell, "--norc", "--noprofile", "-c", program] if shell == "bash" else [shell, "-f", "-c", program]
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == words and not marker.exists()


def test_tab_resolves_a_stdio_server_away_from_the_shells_directory(tmp_path):
    """Issue 36 item 3 (contract §2): which servers Tab may start, and where. ``named``: --config on the line."""
    home, shell_dir = tmp_path / "home", tmp_path / "repo"
    (home / "bin").mkdir(parents=True)
    shell_dir.mkdir()
    python = home / "bin" / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    envr = bkmcp.Environment(
        io.StringIO(), io.StringIO(), io.StringIO(), {"HOME": str(home), "PATH": f".:{home}/bin"}, str(shell_dir)
    )

    def server(**entry):
        return bkmcp.parse_server("cfg", "s", {"type": "stdio", **entry})

    def tab(entry, named=False):
        resolved = bkmcp.resolve_completion_server(server(**entry), envr, named=named)
        return None if resolved is None else (resolved.command, resolved.cwd, resolved.args)

    assert tab({"command": "python3", "args": ["server.py"]}) == (str(python), str(home), ["server.py"])
    assert tab({"command": "/bin/true", "cwd": "/tmp"}) == ("/bin/true", "/tmp", [])
    assert tab({"command": "~/bin/python3"}) == (str(python), str(home), [])
    for relative in (
        {"command": "./server"},
        {"command": "bin/x", "cwd": "/tmp"},
        {"command": "/bin/true", "cwd": "sub"},
    ):
        assert tab(relative) is None, relative
    assert tab({"command": "missing"}) is None  # not on PATH's absolute directories ('.' is skipped)
    assert tab({"command": "/bin/true"}, named=True) is None  # a config named on the line: no stdio server
    http = bkmcp.resolve_completion_server(
        bkmcp.parse_server("cfg", "h", {"type": "http", "url": "http://127.0.0.1:9/mcp"}), envr, named=True
    )
    assert http is not None and http.url == "http://127.0.0.1:9/mcp"
    for leaky in (  # a named config's ${VAR} would send the user's environment where its author chose
        {"url": "http://127.0.0.1:9/${HOME}"},
        {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
    ):
        entry = bkmcp.parse_server("cfg", "h", {"type": "http", **leaky})
        assert bkmcp.resolve_completion_server(entry, envr, named=True) is None, leaky
    own = bkmcp.parse_server("cfg", "h", {"type": "http", "url": "http://127.0.0.1:9/${HOME}"})
    assert bkmcp.resolve_completion_server(own, envr, named=False) is not None  # the user's own config: as usual
    envr.env = {"PATH": "/usr/bin"}  # no HOME: a stdio entry without cwd has nowhere to run
    assert tab({"command": "/bin/true"}) is None


def test_resident_help_defaults_are_the_resident_modes_own():
    """The resident help (section 9) prints the defaults section 10 holds; the two must agree."""
    text = bkmcp.render_resident_help()
    assert f"(default {bkmcp.DEFAULT_MAX_PROCESSES})" in text
    assert f"(default {bkmcp.DEFAULT_MAX_USER_PROCESSES})" in text
    assert "(default 10m)" in text and bkmcp.parse_duration("10m") == bkmcp.DEFAULT_IDLE_TIMEOUT
    assert "(default 5s; 0: none)" in text and bkmcp.parse_duration("5s") == bkmcp.DEFAULT_SHUTDOWN_GRACE


def test_completion_offers_every_option_of_the_option_tables():
    """A new bkmcp option is completed too (the completion's list is checked against section 11's tables)."""
    offered = set(bkmcp._COMPLETION_OPTIONS.split()) | {"-h", "-v", "-r"}  # short forms: the long one is offered
    missing = sorted(routed_options() - offered - {"--context"})  # --context: refused
    assert missing == []
    assert set(bkmcp._COMPLETION_VALUE_OPTIONS.split()) <= {
        *bkmcp._VALUE_OPTIONS,
        *bkmcp._REGISTRY_VALUE_OPTIONS,
        *bkmcp._RESIDENT_OPTIONS,
    }


def test_only_the_process_own_short_command_ends_without_the_last_collection(monkeypatch, tmp_path):
    """11.5: ``main()`` reading sys.argv registers the exit collection once, however often it runs; ``main(argv)``
    (tests, the background process running a client's command) and the resident never do. The collection freezes
    what is left (tests/artifact/test_pyz_exit.py: at the real entry point, and that nothing left would act)."""
    import atexit
    import gc

    registered: list = []
    monkeypatch.setattr(bkmcp, "SHORT_COMMAND", [])  # reached through the module: the one main sets
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(atexit, "unregister", lambda f: registered.remove(f) if f in registered else None)
    out = io.StringIO()
    assert bkmcp.main(["--version"], stdout=out, env={}) == 0 and registered == []
    monkeypatch.setattr(sys, "argv", ["bkmcp", "--resident", "--help"])
    assert bkmcp.main(stdout=out, env={}) == 0 and registered == [] and bkmcp.SHORT_COMMAND == []
    monkeypatch.setattr(sys, "argv", ["bkmcp", "--version"])
    assert bkmcp.main(stdout=out, env={}) == 0 and bkmcp.main(stdout=out, env={}) == 0
    assert registered == [bkmcp._end_without_a_last_collection] and bkmcp.SHORT_COMMAND == [True]

    left = [{} for _ in range(3)]  # made after main() froze the heap: what the exit's collection has to freeze
    frozen = gc.get_freeze_count()
    try:
        bkmcp._end_without_a_last_collection()
        assert gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
        del left

    def interrupted() -> None:
        raise KeyboardInterrupt

    unfrozen = gc.get_freeze_count()
    monkeypatch.setattr(gc, "collect", interrupted)  # a Ctrl-C as the process ends: no traceback, nothing frozen
    bkmcp._end_without_a_last_collection()
    monkeypatch.undo()
    monkeypatch.delattr(gc, "freeze")  # an interpreter without gc.freeze collects as before
    bkmcp.freeze_heap()
    bkmcp._end_without_a_last_collection()
    assert gc.get_freeze_count() == unfrozen


def test_the_process_own_short_command_freezes_the_heap_once_it_knows_it_is_one(monkeypatch):
    """11.5: what exists when ``main()`` knows its command is the process's own short one (the interpreter's start,
    bkmcp's module) is frozen then, before the command runs, so that the exit's collection looks only at what the
    command made; ``main(argv)`` and the resident freeze nothing there."""
    import gc

    frozen_at: list = []
    monkeypatch.setattr(bkmcp, "SHORT_COMMAND", [])
    monkeypatch.setattr(gc, "freeze", lambda: frozen_at.append(list(bkmcp.SHORT_COMMAND)))
    monkeypatch.setattr(bkmcp, "_end_without_a_last_collection", lambda: None)  # registered, never run here
    out = io.StringIO()
    assert bkmcp.main(["--version"], stdout=out, env={}) == 0 and frozen_at == []
    monkeypatch.setattr(sys, "argv", ["bkmcp", "--resident", "--help"])
    assert bkmcp.main(stdout=out, env={}) == 0 and frozen_at == []
    monkeypatch.setattr(sys, "argv", ["bkmcp", "--version"])
    assert bkmcp.main(stdout=out, env={}) == 0 and frozen_at == [[True]]
    assert bkmcp.__version__ in out.getvalue()


# -- issue 40: printed commands carry --config; readable errors on a terminal; close spellings of options ------


def test_every_printed_command_carries_the_given_config_quoted_for_the_shell(tmp_path, no_network):
    """Issue 40 item 3: with --config, the server help's Usage and Examples lines, the root help's examples and the
    CLI's remedies read the same file when pasted (shell-quoted: the path has a space and a quote); without it,
    they name no --config."""
    import shlex

    folder = tmp_path / "Claude's files"
    folder.mkdir()
    path = write_mcp_json(folder, {"ev": {"command": "npx", "args": ["-y", "pkg"]}}, name="claude desktop.json")
    server_help = run_bkmcp("--config", str(path), "ev", "--help")
    assert server_help.exit_status == 0, server_help.stderr
    commands = [line.split("  ")[1] for line in server_help.stdout.splitlines() if line.startswith("  bkmcp ")]
    assert len(commands) == 17  # tools, resources, prompts, skills and tasks
    for command in commands:
        assert shlex.split(command)[:4] == ["bkmcp", "--config", str(path), "ev"], command
    root = run_bkmcp("--config", str(path), "--help").stdout
    examples = root.split("Examples:\n", 1)[1].splitlines()
    assert examples[0] == f"  bkmcp --config {shlex.quote(str(path))} report-prod --check"
    assert all("--config" in line for line in examples if line.startswith("  bkmcp"))
    error = bkmcp.ToolNotFoundError("no tool", hint="list the server's tools", remedy="list_tools")
    assert bkmcp.word_for_cli(error, "ev", str(path)).hint == f"run: bkmcp --config {shlex.quote(str(path))} ev --tools"
    default = run_bkmcp("ev", "--help", env={"BK_CLI_CONFIG_DIR": str(tmp_path)})
    assert default.error_code == "mcp_config_not_found"  # the default file: no --config in what bkmcp prints
    write_mcp_json(tmp_path, {"ev": {"command": "npx"}})
    default = run_bkmcp("ev", "--help", env={"BK_CLI_CONFIG_DIR": str(tmp_path)})
    assert "  bkmcp ev --check" in default.stdout and "--config" not in default.stdout.split("Usage:")[1]
    assert "\n  bkmcp report-prod --check" in run_bkmcp("--help", env={"BK_CLI_CONFIG_DIR": str(tmp_path)}).stdout
    template = run_bkmcp("--config", str(path), "ev", "--read", "demo://r/{id}", "--help")  # offline, as tool help
    usage = template.stdout.split("Usage:\n", 1)[1].splitlines()[0]
    assert shlex.split(usage) == ["bkmcp", "--config", str(path), "ev", "--read", "demo://r/{id}", "--id", "VALUE"]
    prompt = bkmcp.render_prompt_help(
        "ev", {"name": "greet", "arguments": [{"name": "who", "required": True}]}, str(path)
    )
    usage = " ".join(line.strip() for line in prompt.split("Usage:\n", 1)[1].split("\n\n")[0].splitlines())
    assert shlex.split(usage) == ["bkmcp", "--config", str(path), "ev", "--prompt", "greet", "--who", "VALUE"]


def test_shell_quote_is_shlex_quote():
    """``shell_quote`` spares help paths shlex's re import; it must quote exactly as shlex does."""
    import shlex

    for text in ["a", "", "a b", "it's", "~/x.json", "/p/mcp.json", "a$b", "-x", "é", "a\nb", "@%+=:,./-_"]:
        assert bkmcp.shell_quote(text) == shlex.quote(text), text


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_local_error_on_a_terminal_is_pretty_and_piped_is_one_line(config, no_network):
    """Issue 40 item 4: a local failure's envelope on stderr is pretty-printed on a terminal, as stdout's are;
    piped (a script reads stderr's last line) it stays one line."""
    for stderr, lines in ((_Tty(), 8), (io.StringIO(), 1)):
        status = bkmcp.main(
            ["--config", str(config), "--chek"], stdin=io.StringIO(), stdout=io.StringIO(), stderr=stderr, env=ENV
        )
        assert status == 1
        text = stderr.getvalue()
        assert text.count("\n") == lines, text
        assert json.loads(text)["error"]["code"] == "usage_error"
    assert _Tty().isatty() and text.startswith('{"ok":false,')


@pytest.mark.parametrize(
    ("args", "suggested"),
    [(("--chek", "report-prod"), "--check"), (("report-prod", "--tool"), "--tools"), (("--confg", "x"), "--config")],
)
def test_an_unknown_option_gets_its_close_spellings(args, suggested, config, no_network):
    """Issue 40 item 5: as tool, flag and server typos do, an option typo says what it may have meant."""
    res = run_bkmcp(*args)
    assert res.exit_status == 1 and res.error_code == "usage_error"
    assert res.json["error"]["hint"].startswith(f"did you mean {suggested}")
    assert run_bkmcp("--zzzzzz").json["error"]["hint"] == "run bkmcp --help"


# -- issue 37 item 5: which options each mode takes, as a table -----------------------------------------------------

ROOT_MODES = {"--sessions", "--completion SHELL", "--completion tools", "--completion flags", "--import, --list"}
ROOT_MODES |= {"--resident", "--dry-run"}


def test_the_mode_table_covers_every_root_option_and_every_mode():
    """check_invocation is derived from MODE_TABLE. Every option of the root parser (its routing tables, the
    catalogue and target options, --brief, --keep-alive) has a word there and is taken by some row or by every
    mode; every word a row names is such an option or a word for what is none (a server name, a tool, tool flags,
    bare arguments); every refusal and need is worded in USAGE_WORDS; every mode (the server's, invocation_modes,
    and the root's) has its row."""
    words = bkmcp.INVOCATION_WORDS
    parser = routed_options() | set(bkmcp.ROOT_OPTIONS)
    shown = set(re.findall(r"--[a-z][a-z-]+", bkmcp.render_root_help("mcp.json") + bkmcp.render_resident_help()))
    assert parser == set(bkmcp.ROOT_OPTIONS) and {"--read", "--prompts", "--brief", "--keep-alive"} <= shown & parser
    assert set(words.values()) == {bkmcp.ROOT_OPTIONS[name] for name in parser} | {"server", "tool"} | {
        "tool_tokens",
        "positional",
    }
    taken, named = set(bkmcp.EVERY_MODE_TAKES.split(", ")), set()
    for _given, takes, refusals, needs in bkmcp.MODE_TABLE.values():
        taken |= {word.split("+")[0] for word in takes.split(", ") if word}
        for part in filter(None, refusals.split("; ")):
            names, key = part.split(": ")
            assert key in bkmcp.USAGE_WORDS
            named |= set(names.split(", ")) - {"*"}
        for part in filter(None, needs.split("; ")):
            names, key = part.split(": ")
            assert key in bkmcp.USAGE_WORDS
            named |= set(names.split("|")) - {"-"}
    assert taken | named <= set(words), (taken | named) - set(words)
    assert (
        sorted(word for word, attr in words.items() if attr in bkmcp.ROOT_OPTIONS.values() and word not in taken) == []
    )
    server_modes = {mode for mode, _on in bkmcp.invocation_modes(bkmcp.Invocation())}
    assert server_modes | ROOT_MODES <= set(bkmcp.MODE_TABLE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sessions", "--resources"], "--sessions takes nothing else but --stop and --jq [--raw]"),
        (["--completion", "bash", "--prompts"], "--completion takes nothing else but --config"),
        (["--registry", "r.db", "--list", "--read", "u"], "nothing else but -v and --timeout (got --read)"),
    ],
)
def test_a_mode_refuses_an_option_outside_its_row_in_its_own_words(argv, message, tmp_path, no_network):
    """A mode given with an option its row does not take is refused in the row's words — the modes added since the
    ladder was written included (before, --sessions --resources said "a server name is required")."""
    res = run_bkmcp(*argv)
    assert res.exit_status == 1 and res.error_code == "usage_error" and res.stdout == ""
    assert message in res.json["error"]["message"], res.json
    assert run_bkmcp("--sessions", "--jq", ".", "--raw", "--help").exit_status == 0
