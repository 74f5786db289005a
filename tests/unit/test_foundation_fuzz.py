"""Hypothesis fuzzing of the config loader and the body parser: no traceback, only BkmcpError, exit 0 or 1.

CI runs with BKMCP_FUZZ_EXAMPLES=2000 (issue 2); the default keeps `make unit` quick.
"""

from __future__ import annotations

import contextlib
import json
import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bkmcp
from tests.helpers import FUZZ_EXAMPLES, run_bkmcp, write_mcp_json

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@contextlib.contextmanager
def no_network():
    """The socket guard of conftest, usable inside one hypothesis example."""
    saved = (socket.socket.connect, socket.socket.connect_ex, socket.create_connection)

    def guard(*a, **k):
        raise AssertionError("network connection attempted")

    socket.socket.connect = guard  # type: ignore[method-assign]
    socket.socket.connect_ex = guard  # type: ignore[method-assign]
    socket.create_connection = guard  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex, socket.create_connection = saved  # type: ignore[misc]


# -- strategies ---------------------------------------------------------------------------------------------

KEYS = [
    "mcpServers",
    "servers",
    "type",
    "url",
    "headers",
    "command",
    "args",
    "env",
    "cwd",
    "protocolVersion",
    "http",
    "stdio",
    "Authorization",
    "X-Bkapi-Authorization",
    "Host",
    "Mcp-Param-X",
    "x-api-key",
    "a",
    "",
]
TEXTS = st.one_of(
    st.sampled_from(
        [
            "http",
            "stdio",
            "https://mcp.example.com/m/",
            "http://127.0.0.1:1/x?q=1",
            "ftp://x/",
            "https://u@x/",
            "https://x/#f",
            "/rel",
            "Bearer ${TOK}",
            "Bearer ",
            "${MISSING}",
            "$${X}",
            "${env:X}",
            "${}",
            "${1A}",
            '{"access_token": "${TOK}"}',
            '{"bk_app_code": "a", "bk_app_secret": "s", "bk_ticket": "t"}',
            '{"access_token": ""}',
            "[]",
            "2025-06-18",
            "2026-07-28",
            "npx",
            "",
        ]
    ),
    st.text(max_size=30),
)
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), TEXTS)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=5),
    ),
    max_leaves=30,
)
SERVER = st.fixed_dictionaries(
    {"type": st.sampled_from(["http", "stdio"])},
    optional={
        "url": TEXTS,
        "headers": st.dictionaries(st.sampled_from(KEYS[10:]) | st.text(max_size=10), TEXTS, max_size=4),
        "command": TEXTS,
        "args": st.lists(TEXTS, max_size=3),
        "env": st.dictionaries(st.text(max_size=6), TEXTS, max_size=3),
        "cwd": TEXTS,
        "protocolVersion": TEXTS,
        "extra": JSON_LEAF,
    },
)
DOCUMENT = st.one_of(
    st.fixed_dictionaries({"mcpServers": st.dictionaries(st.text(max_size=8), SERVER, max_size=3)}),
    JSON_VALUE,
)
ENVIRONMENT = st.dictionaries(st.sampled_from(["TOK", "X", "MISSING", "A"]), TEXTS, max_size=4)


def _resolve_all(config: bkmcp.ConfigFile, env: dict[str, str]) -> None:
    for server in config.servers.values():
        try:
            resolved = bkmcp.resolve_server(server, env)
        except bkmcp.BkmcpError as exc:
            assert exc.exit_status == 1
            continue
        bkmcp.dump_json(bkmcp.build_dry_run(resolved, "t", {}))
        bkmcp.render_server_help(server)


# -- config loader -----------------------------------------------------------------------------------------


@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_parse_config_on_arbitrary_text(text):
    try:
        config = bkmcp.parse_config(text, "/fuzz/mcp.json")
    except bkmcp.BkmcpError as exc:
        assert exc.code == "invalid_mcp_config" and exc.exit_status == 1
    else:
        _resolve_all(config, {})


@FUZZ
@given(document=DOCUMENT, env=ENVIRONMENT, trailing=st.sampled_from(["", ",", " // c", "}"]))
def test_parse_config_on_json_documents(document, env, trailing):
    text = json.dumps(document)
    if trailing and text.endswith("}"):
        text = text[:-1] + trailing + "}"
    try:
        config = bkmcp.parse_config(text, "/fuzz/mcp.json")
    except bkmcp.BkmcpError as exc:
        assert exc.code == "invalid_mcp_config"
        return
    _resolve_all(config, env)


@FUZZ
@given(template=st.text(alphabet=st.sampled_from(list("${}$AB_1:-x ")), max_size=20), env=ENVIRONMENT)
def test_expand_env_never_crashes(template, env):
    try:
        value, used = bkmcp.expand_env(template, {"A": "${B}", **env}, where="w")
    except (bkmcp.InvalidConfigError, bkmcp.MissingEnvironmentVariableError):
        return
    assert isinstance(value, str) and all(isinstance(u, str) for u in used)


@FUZZ
@given(document=DOCUMENT, env=ENVIRONMENT)
def test_cli_on_fuzzed_config_files(tmp_path_factory, document, env):
    path = tmp_path_factory.mktemp("cfg") / "mcp.json"
    path.write_text(json.dumps(document))
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    name = next(iter(servers), "x") if isinstance(servers, dict) and servers else "x"
    with no_network():
        for args in ((name, "t", "--body", "{}", "--dry-run"), (name, "--help")):
            res = run_bkmcp("--config", str(path), *args, env=env)
            assert res.exit_status in (0, 1), res.stderr
            assert "Traceback" not in res.stdout + res.stderr
            if res.exit_status == 1:
                assert res.stdout == "" and res.error_code != "internal_error", res.stderr


# -- body parser -------------------------------------------------------------------------------------------


@FUZZ
@given(raw=st.one_of(st.text(max_size=200), st.binary(max_size=200), JSON_VALUE.map(json.dumps)))
def test_read_body_from_every_source(tmp_path_factory, raw):
    import io

    folder = tmp_path_factory.mktemp("body")
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")
    (folder / "b.json").write_bytes(data)
    sources = [("@b.json", io.TextIOWrapper(io.BytesIO(b""))), ("-", io.TextIOWrapper(io.BytesIO(data)))]
    if isinstance(raw, str):
        sources.append((raw, io.TextIOWrapper(io.BytesIO(b""))))
    for source, stdin in sources:
        if source.startswith("@") and source != "@b.json":
            continue
        try:
            value = bkmcp.read_body(source, stdin, str(folder))
        except bkmcp.BkmcpError as exc:
            assert exc.code in ("invalid_mcp_arguments", "usage_error")
        else:
            assert isinstance(value, dict)
            bkmcp.dump_json(value).encode("utf-8")


@FUZZ
@given(raw=st.one_of(st.text(max_size=200), JSON_VALUE.map(json.dumps)))
def test_dry_run_with_fuzzed_bodies(tmp_path_factory, raw):
    folder = tmp_path_factory.mktemp("dry")
    path = write_mcp_json(folder, {"s": {"type": "http", "url": "https://mcp.example.com/m"}})
    if raw.startswith("-") and raw != "-":
        return  # an option-looking --body value is a usage error tested elsewhere
    with no_network():
        res = run_bkmcp("--config", str(path), "s", "t", "--body", raw, "--dry-run")
    assert res.exit_status in (0, 1)
    assert "Traceback" not in res.stdout + res.stderr
    if res.exit_status == 0:
        envelope = bkmcp.parse_json(res.stdout)
        assert envelope["ok"] is True and isinstance(envelope["data"]["arguments"], dict)
        assert bkmcp.dump_json(envelope["data"]["arguments"]) == bkmcp.dump_json(bkmcp.parse_json(raw))
    else:
        assert res.stdout == "" and res.error_code in ("invalid_mcp_arguments", "usage_error")


NUMBER_TEXT = st.one_of(
    st.integers().map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
)


@FUZZ
@given(numbers=st.lists(NUMBER_TEXT, min_size=1, max_size=5))
def test_numbers_round_trip_and_survive_jq(numbers):
    text = "[" + ",".join(numbers) + "]"
    value = bkmcp.parse_json(text)
    assert bkmcp.dump_json(value) == text
    assert bkmcp.compile_jq(".data").apply({"ok": True, "data": value}) == [text]


def command_lines(words: list[str], *, word_size: int, size: int) -> st.SearchStrategy[list[str]]:
    """Command lines of up to ``size`` words, each one of ``words`` or any text up to ``word_size`` characters."""
    return st.lists(st.one_of(st.sampled_from(words), st.text(max_size=word_size)), max_size=size)


@FUZZ
@given(
    argv=command_lines(
        (
            "--check --tools --help -h --body {} - --dry-run --jq . --timeout 5s --config -v --insecure --context "
            "--format --version --resident --registry srv tool --limit --x=1 -- @f"
        ).split(),
        word_size=8,
        size=8,
    )
)
def test_arbitrary_command_lines_without_a_config(tmp_path_factory, argv):
    home = tmp_path_factory.mktemp("home")
    with no_network():
        res = run_bkmcp(*argv, env={"HOME": str(home)}, stdin=b"{}")
    assert res.exit_status in (0, 1), (argv, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    if res.exit_status == 1:
        assert res.stdout == "" and res.error_code != "internal_error", (argv, res.stderr)


@settings(max_examples=max(FUZZ_EXAMPLES // 4, 25), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    argv=command_lines(
        [
            *"--check --tools --help -h --body {}".split(),
            '{"a": 1E+2}',
            *"- @args.json --dry-run --jq . .data --timeout 2s -v --insecure".split(),
            *"--limit --x=1 srv fs tool --context x".split(),
        ],
        word_size=6,
        size=7,
    )
)
def test_arbitrary_command_lines_with_a_config(tmp_path_factory, argv):
    """Section 11 routing with real servers configured; remote paths hit a closed loopback port (exit 2)."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "args.json").write_text('{"from": "file"}')
    path = write_mcp_json(
        folder,
        {
            "srv": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${TOK}"}},
            "fs": {"type": "stdio", "command": "/nonexistent/server", "args": ["${TOK}"]},
        },
    )
    res = run_bkmcp("--config", str(path), *argv, env={"TOK": "tok-secret-31337"}, stdin=b'{"s": 1}', cwd=str(folder))
    assert res.exit_status in (0, 1, 2), (argv, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr
    assert "tok-secret-31337" not in res.stdout + res.stderr
    if res.exit_status == 1:
        assert res.stdout == "" and res.error_code != "internal_error", (argv, res.stderr)
    elif res.exit_status == 2:
        assert bkmcp.parse_json(res.stdout)["error"]["code"] != "internal_error", (argv, res.stdout)
