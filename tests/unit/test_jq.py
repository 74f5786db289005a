"""Section 9 --jq (O01): compiled first, applied once to the final envelope, one value per line, numbers kept."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import bkmcp
from tests.helpers import run_bkmcp

NUMBERS = ["123456789012345678901234567890", "1e400", "0.1", "12345678901234567890.5", "-0.0", "1E+2", "1.50", "-7"]
BODY = '{"n": [' + ", ".join(NUMBERS) + '], "s": "中文 \\"q\\" \\\\ $(rm -rf /) `id`\\n"}'


@pytest.fixture(params=["literal", "doubles", "executable"])
def jq_mode(request, monkeypatch):
    """Every fidelity test runs with literal-keeping jq (>= 1.7 binding), a doubles-only jq, and a jq executable."""
    if request.param == "doubles":
        monkeypatch.setattr(bkmcp, "_jq_keeps_literals", lambda module: False)
    elif request.param == "executable":
        if shutil.which("jq") is None:
            pytest.skip("no jq executable on PATH")
        monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    return request.param


@pytest.fixture
def config(write_config, jq_mode):
    return write_config({"mcpServers": {"a": {"type": "http", "url": "https://mcp.example.com/mcp/?x=1"}}})


def dry(config, *extra, body=BODY, **kw):
    return run_bkmcp("--config", str(config), "a", "t", "--body", body, "--dry-run", *extra, **kw)


def test_o01_identity_projection_keeps_every_number_byte_for_byte(config, no_network):
    res = dry(config, "--jq", ".data.arguments.n")
    assert res.exit_status == 0, res.stderr
    assert res.stdout == "[" + ",".join(NUMBERS) + "]\n"


@pytest.mark.parametrize("text", NUMBERS)
def test_o01_p04_each_number_survives_jq_alone(text, config, no_network):
    res = dry(config, "--jq", ".data.arguments.x", body=f'{{"x": {text}}}')
    assert res.stdout == text + "\n"


def test_o01_each_result_on_its_own_line(config, no_network):
    res = dry(config, "--jq", ".data.arguments.n[]")
    assert res.stdout.splitlines() == NUMBERS
    res = dry(config, "--jq", ".data.arguments.s, .data.url, .ok")
    assert res.stdout.splitlines() == [
        json.dumps('中文 "q" \\ $(rm -rf /) `id`\n', ensure_ascii=False),
        '"https://mcp.example.com/mcp/?x=1"',
        "true",
    ]
    assert dry(config, "--jq", "empty").stdout == ""


def test_o01_jq_keeps_its_meaning_for_comparisons_and_arithmetic(config, no_network):
    """Re-spelled numbers never turn into strings that compare or add wrongly."""
    body = '{"g": [1.0, 0.0, 2.5, 1E+2]}'
    selected = dry(config, "--jq", "[.data.arguments.g[] | select(. < 0.5)]", body=body).stdout
    assert selected in ("[0.0]\n", "[0]\n")  # literal-keeping jq keeps "0.0"; a doubles-only jq prints 0
    assert bkmcp.parse_json(dry(config, "--jq", ".data.arguments.g | map(. * 2)", body=body).stdout) == [2, 0, 5, 200]
    assert dry(config, "--jq", "[.data.arguments.g[] | type] | unique", body=body).stdout == '["number"]\n'
    assert dry(config, "--jq", ".data.arguments.g | length", body=body).stdout == "4\n"
    assert dry(config, "--jq", ".data.arguments.g", body=body).stdout == "[1.0,0.0,2.5,1E+2]\n"


def test_o01_big_numbers_pass_through_objects(config, no_network):
    body = '{"id": 123456789012345678901234567890, "v": 1e400, "w": 12345678901234567890.5}'
    res = dry(config, "--jq", ".data.arguments | {id, v, x: [.w]}", body=body)
    assert res.stdout == '{"id":123456789012345678901234567890,"v":1e400,"x":[12345678901234567890.5]}\n'
    huge = "9" * 5000
    assert dry(config, "--jq", ".data.arguments.h", body=f'{{"h": {huge}}}').stdout == huge + "\n"


def test_o01_literal_jq_compares_big_numbers_exactly(config, jq_mode, no_network):
    if jq_mode != "literal":
        pytest.skip("only a literal-keeping jq compares beyond doubles")
    body = '{"ids": [123456789012345678901234567890, 123456789012345678901234567891]}'
    res = dry(config, "--jq", ".data.arguments.ids[] | select(. == 123456789012345678901234567891)", body=body)
    assert res.stdout == "123456789012345678901234567891\n"
    res = dry(config, "--jq", ".data.arguments.ids[0] | tostring", body=body)
    assert res.stdout == '"123456789012345678901234567890"\n'


def test_o01_bad_expression_is_local_and_comes_before_everything(tmp_path, no_network, monkeypatch):
    """O01: invalid_jq_expression, exit 1, zero network, even before config errors and body reading."""
    monkeypatch.setattr(bkmcp, "load_config", lambda *a: pytest.fail("config loaded before jq compiled"))
    for args in (
        ("--jq", ".[", "a", "--check"),
        ("a", "--tools", "--jq", "{"),
        ("--config", str(tmp_path / "missing.json"), "a", "t", "--body", "@" + str(tmp_path / "nope"), "--jq", "|"),
        ("a", "t", "--body", "-", "--dry-run", "--jq", "nosuchfunction(1;2;3)"),
        ("a", "--check", "--jq", ""),
        ("a", "--check", "--jq", "   "),
    ):
        res = run_bkmcp(*args, env={"HOME": str(tmp_path)}, stdin=b'{"a": 1}')
        assert res.exit_status == 1, args
        assert res.error_code == "invalid_jq_expression" and res.stdout == ""


def test_o01_runtime_error_is_jq_error_exit_2_and_keeps_the_result(config, no_network):
    res = dry(config, "--jq", ".data.arguments.s | error")
    assert res.exit_status == 2 and res.stderr == ""
    env = bkmcp.parse_json(res.stdout)
    assert env["ok"] is False and env["error"]["code"] == "jq_error"
    assert "nothing was sent" in env["error"]["hint"]  # a dry run: no remote operation happened
    assert env["data"]["arguments"]["n"][0] == 123456789012345678901234567890  # unprojected data kept
    assert dry(config, "--jq", ".data.arguments.n + 1").json["error"]["code"] == "jq_error"


def test_o01_jq_never_hides_a_failure(write_config, monkeypatch, no_network):
    """O01, issue 17 item 1: --jq projects success envelopes only; a failure envelope is printed whole and
    unprojected, on its usual stream with its usual exit status (contract §7)."""
    path = write_config({"mcpServers": {"a": {"type": "http", "url": "https://x/"}}})
    calls = []

    def failing(*a, **k):
        calls.append(1)
        raise bkmcp.DiscoveryIncompleteError("page 3 failed", data={"pages": 2, "big": bkmcp.JsonNumber("1e400")})

    monkeypatch.setattr(bkmcp, "run_tools", failing)
    for expr in ("[.ok, .error.code, .data.pages, .data.big]", ".data.tools[]", ".data.tools[].name", "empty"):
        res = run_bkmcp("--config", str(path), "a", "--tools", "--jq", expr)
        assert res.exit_status == 2 and res.stderr == "", expr
        env = bkmcp.parse_json(res.stdout)
        assert env["ok"] is False and env["error"]["code"] == "mcp_discovery_incomplete", expr
        assert env["data"] == {"pages": 2, "big": bkmcp.JsonNumber("1e400")}
        assert "unprojected_error" not in env["error"]
    assert len(calls) == 4  # one remote operation per run, never retried because of jq

    def unauthorized(*a, **k):
        raise bkmcp.AuthRequiredError("the server answered 401", hint="fix the headers", data={"server": "a"})

    monkeypatch.setattr(bkmcp, "run_tools", unauthorized)
    res = run_bkmcp("--config", str(path), "a", "--tools", "--jq", ".data.tools[].name")
    assert res.exit_status == 2 and res.stderr == ""
    assert res.json["error"]["code"] == "mcp_auth_required"  # the 401 is on stdout, not swallowed by the filter

    def tool_error(server, ctx, name, **k):
        return {"server": "a", "tool": name, "result": {"content": [], "isError": True}}

    monkeypatch.setattr(bkmcp, "run_call", tool_error)
    res = run_bkmcp("--config", str(path), "a", "t", "--body", "{}", "--jq", ".data.result.content[]")
    assert res.exit_status == 2 and res.json["error"]["code"] == "mcp_tool_error"
    assert res.json["data"]["result"]["isError"] is True

    def not_found(*a, **k):
        raise bkmcp.ToolNotFoundError("no tool 't'")

    monkeypatch.setattr(bkmcp, "run_call", not_found)
    res = run_bkmcp("--config", str(path), "a", "t", "--body", "{}", "--jq", "empty")
    assert res.exit_status == 1 and res.stdout == "" and res.error_code == "mcp_tool_not_found"  # local: stderr


def test_o01_success_projection_after_remote_runs_once(write_config, monkeypatch, no_network):
    path = write_config({"mcpServers": {"a": {"type": "http", "url": "https://x/"}}})
    calls = []

    def tools(*a, **k):
        calls.append(1)
        return {"server": "a", "tool_count": 2, "complete": True, "tools": [{"name": "x"}, {"name": "y"}]}

    monkeypatch.setattr(bkmcp, "run_tools", tools)
    res = run_bkmcp("--config", str(path), "a", "--tools", "--jq", ".data.tools[].name")
    assert (res.exit_status, res.stdout, calls) == (0, '"x"\n"y"\n', [1])


def test_o01_help_is_never_projected(config, no_network):
    for args in (
        ("--help", "--jq", ".["),
        ("--config", str(config), "a", "--help", "--jq", ".x"),
        ("--jq", ".["),
        ("--config", str(config), "a", "--jq", ".["),
    ):
        res = run_bkmcp(*args)
        assert res.exit_status == 0 and res.stdout.startswith("bkmcp")


def test_jq_program_unit():
    prog = bkmcp.compile_jq(".a")
    assert prog.apply({"a": bkmcp.JsonNumber("1E+2")}) == ["1E+2"]
    with pytest.raises(bkmcp.InvalidJqExpressionError):
        bkmcp.compile_jq(".a[")
    with pytest.raises(bkmcp.JqError) as info:
        bkmcp.compile_jq(".a.b").apply({"ok": True, "data": {}, "a": 5})
    assert info.value.data == {}


def test_same_json_never_equates_numbers_with_booleans_or_strings():
    assert bkmcp._same_json([1, {"a": bkmcp.JsonNumber("1E+2")}], [1, {"a": 100}])
    assert not bkmcp._same_json(True, 1) and not bkmcp._same_json(1, True) and not bkmcp._same_json("1", 1)
    assert not bkmcp._same_json({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not bkmcp._same_json([1], [1, 2])


def test_marker_strings_in_data_are_not_numbers(config, no_network):
    body = json.dumps({"s": bkmcp._JQ_MARK + "deadbeef-0\ue001"})
    res = dry(config, "--jq", ".data.arguments.s", body=body)
    assert bkmcp.parse_json(res.stdout) == bkmcp._JQ_MARK + "deadbeef-0\ue001"


def test_jq_errors_in_every_mode(config, no_network):
    assert dry(config, "--jq", ".[").error_code == "invalid_jq_expression"
    assert dry(config, "--jq", 'error("x")').json["error"]["code"] == "jq_error"
    assert dry(config, "--jq", ".data.arguments.n # a comment").stdout == "[" + ",".join(NUMBERS) + "]\n"
    assert dry(config, "--jq", "def f: .data.tool; f").stdout == '"t"\n'


def test_jq_unavailable(write_config, monkeypatch, no_network):
    config = write_config({"mcpServers": {"a": {"type": "http", "url": "https://x/"}}})
    monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    res = dry(config, "--jq", ".")
    assert res.exit_status == 1 and res.error_code == "jq_unavailable"


@pytest.mark.parametrize("depth", [200, 500, 980])
def test_deeply_nested_results_are_jq_error_never_internal(depth, config, no_network):
    body = '{"a": ' + "[" * depth + "1" + "]" * depth + "}"
    res = dry(config, "--jq", ".data.arguments", body=body)
    if res.exit_status == 0:
        assert res.stdout == body.replace(" ", "") + "\n"
    elif res.exit_status == 1:  # the parser's own nesting limit (it depends on the stack depth of the caller)
        assert res.error_code == "invalid_mcp_arguments" and "nesting too deep" in res.stderr
    else:
        assert res.exit_status == 2 and res.json["error"]["code"] == "jq_error", res.stdout + res.stderr


@pytest.mark.parametrize(
    ("expression", "stdout", "stderr", "status"),
    [
        ('"x\\n" | halt_error(5)', "", "x\n", 5),
        (".ok, halt_error", "true\n", None, 5),  # a non-string message: JSON with a newline
        (".ok, halt, 3", "true\n", "", 0),
        (".data.tool, halt_error(1)", '"t"\n', None, 1),
        ('"bye" | halt_error(0)', "", "bye", 0),
        (
            ".data.arguments | halt_error(300)",
            "",
            '{"n":['
            + ",".join(NUMBERS)
            + '],"s":'
            + json.dumps('中文 "q" \\ $(rm -rf /) `id`\n', ensure_ascii=False)
            + "}\n",
            44,
        ),
        ("(halt_error(3) | length)", "", None, 3),  # halt_error is never a value that flows on
    ],
)
def test_jq_halt_and_halt_error_behave_as_in_jq_1_7(expression, stdout, stderr, status, config, no_network):
    res = dry(config, "--jq", expression)
    assert (res.exit_status, res.stdout) == (status, stdout), res.stderr
    if stderr is not None and stderr.startswith("{"):  # JSON as jq prints it: numbers equal, maybe re-spelled
        assert res.stderr.endswith("}\n") and bkmcp._same_json(bkmcp.parse_json(res.stderr), bkmcp.parse_json(stderr))
    elif stderr is not None:
        assert res.stderr == stderr
    elif expression.startswith(".ok"):
        assert bkmcp.parse_json(res.stderr) == bkmcp.parse_json(dry(config).stdout)


def test_jq_halt_error_never_hides_a_failure(write_config, jq_mode, monkeypatch, no_network):
    """A refused connection (an ``httpx.MockTransport`` that raises what a closed port raises: no socket)."""
    httpx = bkmcp.import_httpx()

    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    def refusing_client(url, *, insecure):
        return httpx.Client(transport=httpx.MockTransport(refuse), cookies=bkmcp._no_cookies())

    monkeypatch.setattr(bkmcp, "new_http_client", refusing_client)
    config = write_config({"mcpServers": {"a": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}})
    res = run_bkmcp("--config", str(config), "a", "--tools", "--jq", ".error.code | halt_error(0)")
    assert res.exit_status == 2 and res.stderr == ""  # a failure is not projected: the program never runs on it
    assert res.json["error"]["code"] == "mcp_connection_error"


def test_jq_halt_error_needs_a_number(config, no_network):
    res = dry(config, "--jq", 'halt_error("five")')
    assert res.exit_status == 2 and res.error_code == "jq_error"
    assert "halt_error/1: number required" in res.json["error"]["message"]


def test_jq_module_directive_and_halt_error_is_refused(config, tmp_path, jq_mode, no_network):
    (tmp_path / "mod.jq").write_text("def f: 1;", encoding="utf-8")
    include = f'include "mod" {{search: {json.dumps(str(tmp_path))}}}; '
    alone = dry(config, "--jq", include + "f")
    if jq_mode == "executable":  # the executable fallback compiles the program inside an expression: no directives
        assert alone.error_code == "invalid_jq_expression" and "syntax error" in alone.stderr
        return
    assert alone.stdout == "1\n", alone.stderr  # a module directive alone works (unstreamed)
    res = dry(config, "--jq", include + "f, halt_error")
    assert res.exit_status == 1 and res.error_code == "invalid_jq_expression"
    assert "halt_error cannot be used in a program that starts with import/include" in res.stderr


def fake_jq(tmp_path, monkeypatch, script: str) -> None:
    """A ``jq`` executable on PATH (the binding hidden) that runs ``script`` (sh)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    jq = bin_dir / "jq"
    jq.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    jq.chmod(0o755)
    monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")


def dry_run_jq(write_config, program: str, *options: str, **kw):
    """``bkmcp --config C OPTIONS a t --body {} --dry-run --jq PROGRAM``, server ``a`` a closed loopback port."""
    config = write_config({"mcpServers": {"a": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}})
    return run_bkmcp("--config", str(config), *options, "a", "t", "--body", "{}", "--dry-run", "--jq", program, **kw)


def test_jq_executable_past_the_budget_is_jq_error(tmp_path, monkeypatch, write_config, no_network):
    """A jq executable that answers nothing is killed at the budget: jq_error, not internal_error."""
    fake_jq(tmp_path, monkeypatch, 'if [ "$1" = "-n" ]; then exit 0; fi\nexec sleep 30\n')
    res = dry_run_jq(write_config, ".", "--timeout", "300ms", env={"PATH": os.environ["PATH"]})
    assert res.exit_status == 2 and res.error_code == "jq_error", res.stdout + res.stderr
    assert "did not finish within the time --timeout left for it" in res.json["error"]["message"]


def test_jq_executable_that_cannot_compile_in_time_is_jq_unavailable(tmp_path, monkeypatch, write_config, no_network):
    fake_jq(tmp_path, monkeypatch, "exec sleep 30\n")
    monkeypatch.setattr(bkmcp, "JQ_EXECUTABLE_CHECK_SECONDS", 0.2)
    res = dry_run_jq(write_config, ".")
    assert res.exit_status == 1 and res.error_code == "jq_unavailable", res.stdout + res.stderr
    assert "did not compile the --jq expression within 200ms" in res.stderr


def test_jq_executable_silent_computation_is_stopped_at_the_budget(monkeypatch, write_config, no_network):
    if shutil.which("jq") is None:
        pytest.skip("no jq executable on PATH")
    monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    res = dry_run_jq(write_config, "last(range(1e15))", "--timeout", "500ms")
    assert res.exit_status == 2 and res.error_code == "jq_error"


def test_jq_values_stream_with_the_executable_and_stop_at_the_budget(monkeypatch, write_config, no_network):
    if shutil.which("jq") is None:
        pytest.skip("no jq executable on PATH")
    monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    res = dry_run_jq(write_config, "repeat(.ok)", "--timeout", "300ms")
    lines = res.stdout.splitlines()
    assert res.exit_status == 2 and lines[0] == "true" and json.loads(lines[-1])["error"]["code"] == "jq_error"


def test_jq_halt_error_with_nan_is_jq_error(config, no_network):
    res = dry(config, "--jq", "halt_error(nan)")
    assert res.exit_status == 2 and res.error_code == "jq_error" and "invalid exit status" in res.stdout


def test_jq_executable_that_cannot_run_is_jq_unavailable(tmp_path, monkeypatch, write_config, no_network):
    broken = tmp_path / "jq"
    broken.write_text("not a program", encoding="utf-8")
    broken.chmod(0o644)
    monkeypatch.setattr(bkmcp, "_load_jq_module", lambda: None)
    monkeypatch.setattr(shutil, "which", lambda name: str(broken))
    res = dry_run_jq(write_config, ".")
    assert res.exit_status == 1 and res.error_code == "jq_unavailable" and "cannot be run" in res.stderr
