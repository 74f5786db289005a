"""The `make conformance` gate itself: the runner's judgement, the expected-failures file, the driver's plans.

The pure parts run everywhere. The two end-to-end tests run the real harness (0.1.16, scenario `initialize`) in its
network namespace and show that the gate fails on an unexpected pass and on an unexpected failure; they need
`.ci/install_conformance.sh` (skipped without it, a failure with BKMCP_CONFORMANCE_REQUIRED=1, which
`make conformance` sets).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rc = _load("bkmcp_conformance_runner", HERE / "run_conformance.py")
drv = _load("bkmcp_conformance_driver", HERE / "driver.py")

LIST_0_2_0 = """Client scenarios (test against a client):
  - initialize [2025-06-18,2025-11-25]
  - tools_call [2025-06-18,2025-11-25,2026-07-28]
  - request-metadata [2026-07-28]
  - auth/metadata-default [2025-11-25,2026-07-28]
  - auth/2025-03-26-oauth-metadata-backcompat [2025-03-26]
  - auth/dpop [extension]
"""


def outcome(
    run_id: str,
    statuses: list[str],
    *,
    version: str = "0.2.0-alpha.12",
    exit_status: int | None = None,
    ids: list[str] | None = None,
):
    scenario, _, spec = run_id.partition("@")
    checks = [
        {"id": (ids or [f"check-{i}" for i in range(len(statuses))])[i], "status": s} for i, s in enumerate(statuses)
    ]
    passed, counts, failures = rc.judge_checks(checks)
    status = (0 if passed else 1) if exit_status is None else exit_status
    return rc.Outcome(rc.Run(version, scenario, spec or None), passed and status == 0, status, counts, failures)


def test_scenario_list_and_the_runs_planned_from_it():
    listed = rc.parse_scenario_list(LIST_0_2_0)
    assert listed[0] == ("initialize", ["2025-06-18", "2025-11-25"])
    assert ("auth/dpop", ["extension"]) in listed
    ids = [r.run_id for r in rc.plan_runs("0.2.0-alpha.12", listed)]
    # the inferred run (latest dated release it lists) once, then every other dated version it lists
    assert ids == [
        "initialize",
        "initialize@2025-06-18",
        "tools_call",
        "tools_call@2025-06-18",
        "tools_call@2026-07-28",
        "request-metadata",
        "auth/metadata-default",
        "auth/metadata-default@2026-07-28",
        "auth/2025-03-26-oauth-metadata-backcompat",
        "auth/dpop",
    ]
    # 0.1.16's --spec-version only filters: one run per scenario
    assert [r.run_id for r in rc.plan_runs("0.1.16", listed)] == [name for name, _ in listed]


def test_a_run_passes_only_with_a_success_and_no_failure():
    assert rc.judge_checks([{"id": "a", "status": "SUCCESS"}, {"id": "i", "status": "INFO"}])[0] is True
    assert rc.judge_checks([{"id": "a", "status": "SUCCESS"}, {"id": "w", "status": "WARNING"}])[0] is True
    assert rc.judge_checks([{"id": "a", "status": "SUCCESS"}, {"id": "b", "status": "FAILURE"}]) == (
        False,
        {"SUCCESS": 1, "FAILURE": 1},
        ["b"],
    )
    assert rc.judge_checks([{"id": "s", "status": "SKIPPED"}])[0] is False  # exercised nothing
    assert rc.judge_checks([])[0] is False
    # a client that exits non-zero fails the run even when every check passed (the harness says FAILED)
    assert outcome("x", ["SUCCESS"], exit_status=2).passed is False


def test_expected_failures_lines_whole_runs_and_single_checks():
    text = """# comment
0.1.16          auth/basic-cimd          oauth   # why
0.2.0-alpha.12  sep-2322:check-a         mrtr
0.2.0-alpha.12  sep-2322:check-b         mrtr

"""
    expected = rc.parse_expected(text)
    assert expected[("0.1.16", "auth/basic-cimd")] == rc.Expected("oauth", None)
    assert expected[("0.2.0-alpha.12", "sep-2322")] == rc.Expected("mrtr", ["check-a", "check-b"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.1.16 initialize", "want 'VERSION RUN-ID[:CHECK-ID] CAPABILITY'"),
        ("0.1.15 initialize oauth", "unknown harness version '0.1.15'"),
        ("0.1.16 initialize magic", "unknown capability 'magic'"),
        ("0.1.16 initialize oauth\n0.1.16 initialize oauth", "conflicts with an earlier line"),
        ("0.1.16 initialize oauth\n0.1.16 initialize:c oauth", "conflicts with an earlier line"),
        ("0.1.16 initialize:c oauth\n0.1.16 initialize oauth", "conflicts with an earlier line"),
        ("0.1.16 initialize:c oauth\n0.1.16 initialize:d mrtr", "conflicts with an earlier line"),
    ],
)
def test_expected_failures_file_errors_name_the_line(text, message):
    with pytest.raises(ValueError, match=r"expected_failures\.txt:\d+: .*" + re.escape(message)):
        rc.parse_expected(text)


def test_the_committed_expected_failures_file():
    expected = rc.parse_expected((HERE / "expected_failures.txt").read_text(encoding="utf-8"))
    capabilities = {e.capability for e in expected.values()}
    assert capabilities <= set(rc.CAPABILITIES)
    assert {v for v, _ in expected} == set(rc.VERSIONS)
    # until issue 11 item 4 lands: the invalid tools' checks only, never the valid tool's
    entry = expected.get(("0.2.0-alpha.12", "http-invalid-tool-headers"))
    assert entry is None or (entry.checks and "sep-2243-client-reject-invalid-tool" not in entry.checks)


def test_the_gate_fails_on_unexpected_failures_and_passes_and_stale_lines():
    expected = rc.parse_expected("""0.2.0-alpha.12 auth/x oauth
0.2.0-alpha.12 fixed oauth
0.2.0-alpha.12 gone oauth
0.2.0-alpha.12 mrtr:a mrtr
0.2.0-alpha.12 mrtr:b mrtr
0.2.0-alpha.12 more:a mrtr
""")
    outcomes = [
        outcome("ok", ["SUCCESS"]),  # pass, not listed: fine
        outcome("broken", ["SUCCESS", "FAILURE"], ids=["s", "f"]),  # fails, not listed
        outcome("auth/x", ["FAILURE"]),  # fails, listed: fine
        outcome("fixed", ["SUCCESS"]),  # passes, listed
        outcome("mrtr", ["SUCCESS", "FAILURE", "FAILURE"], ids=["s", "a", "b"]),  # exactly the listed checks
        outcome("more", ["SUCCESS", "FAILURE", "FAILURE"], ids=["s", "a", "c"]),  # one more than listed
    ]
    problems = rc.compare(outcomes, expected)
    assert [p.split(":")[0] for p in problems] == [
        "UNEXPECTED FAILURE 0.2.0-alpha.12 broken",
        "UNEXPECTED PASS 0.2.0-alpha.12 fixed (listed as needing oauth)",
        "UNEXPECTED FAILURE 0.2.0-alpha.12 more",
        "STALE 0.2.0-alpha.12 gone",
    ]
    assert "failing checks f" in problems[0]
    assert "failing checks c besides the listed a" in problems[2]
    fixed_check = rc.compare(
        [outcome("mrtr", ["SUCCESS", "FAILURE"], ids=["s", "a"])], {k: v for k, v in expected.items() if k[1] == "mrtr"}
    )
    assert fixed_check == [
        "UNEXPECTED PASS 0.2.0-alpha.12 mrtr: check(s) b (listed as needing mrtr) pass now: remove their lines"
    ]
    assert (
        rc.compare(
            outcomes[:1] + outcomes[2:3] + outcomes[4:5],
            {k: v for k, v in expected.items() if k[1] in ("auth/x", "mrtr")},
        )
        == []
    )


def test_driver_arguments_from_a_schema():
    schema = {
        "type": "object",
        "required": ["s", "i", "n", "b", "o", "a", "z", "e", "u", "missing"],
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "o": {"type": "object"},
            "a": {"type": "array"},
            "z": {"type": "null"},
            "e": {"enum": ["red", "green"]},
            "u": {"type": ["null", "integer"]},
            "optional": {"type": "string"},
        },
    }
    assert drv.sample_arguments(schema) == {
        "s": "x",
        "i": 1,
        "n": 1.5,
        "b": True,
        "o": {},
        "a": [],
        "z": None,
        "e": "red",
        "u": 1,
        "missing": "x",
    }
    assert drv.sample_arguments(None) == {}
    assert drv.sample_arguments({"required": "nope", "properties": []}) == {}


def test_driver_plans():
    tools = [{"name": "add_numbers", "inputSchema": {"required": ["a"], "properties": {"a": {"type": "number"}}}}]
    assert drv.plan_calls("tools_call", tools, {}) == [["add_numbers", "--a", "2", "--b", "3"]]
    assert drv.plan_calls("other", tools, {}) == [["add_numbers", "--body", '{"a": 1.5}']]
    given = {"toolCalls": [{"name": "t", "arguments": {"region": "us", "verbose": None}}, {"name": "u"}]}
    assert drv.plan_calls("http-custom-headers", tools, given) == [
        ["t", "--body", '{"region": "us", "verbose": null}'],
        ["u", "--body", "{}"],
    ]
    focal = {"name": "json_schema_2020_12_tool", "inputSchema": {"$schema": "x", "$defs": {"a": {}}}}
    calls = drv.plan_calls("json-schema-2020-12-preservation", [focal, {"name": "json_schema_echo"}], {})
    assert json.loads(calls[-1][2]) == {"schema": focal["inputSchema"]}
    assert drv.plan_calls("json-schema-ref-no-deref", [{"name": "lookup_user"}], {}) == [["lookup_user", "--help"]]
    assert drv.excluded_names([{"name": "a", "reason": "r"}, "b", {"reason": "no name"}]) == ["a", "b"]
    assert drv.excluded_names({"c": "reason"}) == ["c"]
    assert drv.excluded_names(None) == []


# ---------------------------------------------------------------- end to end (real harness, real bkmcp)

NODE = ROOT / ".conformance" / "node" / "node_modules" / ".bin" / "node"


def _harness_or_skip() -> None:
    problem = None
    if not NODE.exists():
        problem = f"{NODE} missing: run .ci/install_conformance.sh"
    else:
        probe = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode != 0:
            problem = f"no private network namespace here (unshare --user --net): {probe.stderr.strip()}"
    if problem and os.environ.get("BKMCP_CONFORMANCE_REQUIRED") == "1":
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)


def _gate(tmp_path: Path, expected_text: str, bkmcp: str) -> subprocess.CompletedProcess[str]:
    expected = tmp_path / "expected.txt"
    expected.write_text(expected_text, encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            str(HERE / "run_conformance.py"),
            "--version",
            "0.1.16",
            "--scenario",
            "initialize",
            "--expected",
            str(expected),
            "--out",
            str(tmp_path / "results"),
            "--bkmcp",
            bkmcp,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_gate_end_to_end_pass_and_unexpected_pass(tmp_path):
    _harness_or_skip()
    bkmcp = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'bkmcp.py'))}"
    ok = _gate(tmp_path, "", bkmcp)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0.1.16: 1/1 passed, 0 expected failures, 0 unexpected" in ok.stdout
    summary = json.loads((tmp_path / "results" / "summary.json").read_text(encoding="utf-8"))
    assert summary["runs"][0]["checks"]["SUCCESS"] == 1
    # the harness's server saw bkmcp's initialize: protocol version and clientInfo as sent
    checks = next((tmp_path / "results" / "0.1.16" / "initialize").glob("*/checks.json"))
    init = next(c for c in json.loads(checks.read_text(encoding="utf-8")) if c["id"] == "mcp-client-initialization")
    assert init["details"]["clientName"] == "bkmcp" and init["details"]["protocolVersionSent"] == "2025-11-25"
    # lines for the harness version and the scenarios left out are not judged, nor reported stale
    others = _gate(tmp_path, "0.2.0-alpha.12 initialize elicitation\n0.1.16 tools_call elicitation\n", bkmcp)
    assert others.returncode == 0, others.stdout + others.stderr
    listed = _gate(tmp_path, "0.1.16 initialize elicitation\n", bkmcp)
    assert listed.returncode == 1
    assert "UNEXPECTED PASS 0.1.16 initialize (listed as needing elicitation)" in listed.stdout


def test_gate_end_to_end_unexpected_failure(tmp_path):
    _harness_or_skip()
    # a "bkmcp" that exits 2 at once: the harness's server sees no initialize, the client exits non-zero
    broken = f"{shlex.quote(sys.executable)} -c {shlex.quote('import sys; sys.exit(2)')}"
    failed = _gate(tmp_path, "", broken)
    assert failed.returncode == 1
    assert "UNEXPECTED FAILURE 0.1.16 initialize" in failed.stdout
    # a malformed expectations file stops the gate before any run, with the line, not a traceback
    malformed = _gate(tmp_path, "0.1.16 initialize\n", broken)
    assert malformed.returncode == 1 and "Traceback" not in malformed.stderr
    assert "expected_failures.txt:1: want 'VERSION RUN-ID[:CHECK-ID] CAPABILITY'" in malformed.stderr


FAKE_BKMCP = r"""
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
    config = json.load(open(args[args.index("--config") + 1], encoding="utf-8"))
    log.write(json.dumps({"argv": args, "config": config}) + "\n")
if "--tools" in args:
    print(json.dumps({"ok": True, "data": {"tools": [{"name": "good", "inputSchema": {"required": ["r"],
          "properties": {"r": {"type": "string"}}}}], "excluded": [{"name": "bad", "reason": "x-mcp-header ''"}]}}))
elif "bad" in args and os.environ.get("FAKE_SENDS_EXCLUDED") != "1":
    sys.stderr.write(json.dumps({"ok": False, "error": {"code": "mcp_tool_not_found", "message": "bad"}}) + "\n")
    sys.exit(1)
else:
    print(json.dumps({"ok": True, "data": {"result": {}}}))
"""


@pytest.mark.parametrize(("sends_excluded", "status"), [(False, 0), (True, 3)])
def test_driver_requires_excluded_tools_to_be_refused(tmp_path, monkeypatch, sends_excluded, status):
    fake = tmp_path / "fake_bkmcp.py"
    fake.write_text(FAKE_BKMCP, encoding="utf-8")
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_SENDS_EXCLUDED", "1" if sends_excluded else "0")
    monkeypatch.setenv("MCP_CONFORMANCE_SCENARIO", "http-invalid-tool-headers")
    monkeypatch.setenv("MCP_CONFORMANCE_PROTOCOL_VERSION", "2026-07-28")
    monkeypatch.setenv("BKMCP_CONFORMANCE_PIN", "1")
    monkeypatch.delenv("MCP_CONFORMANCE_CONTEXT", raising=False)
    bkmcp = f"{shlex.quote(sys.executable)} {shlex.quote(str(fake))}"
    assert drv.main(["--bkmcp", bkmcp, "http://127.0.0.1:9/mcp"]) == status
    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [c["argv"][c["argv"].index("-v") + 1 :] for c in calls] == [
        ["conformance", "--tools"],
        ["conformance", "good", "--body", '{"r": "x"}'],
        ["conformance", "bad", "--body", "{}"],
    ]
    assert calls[0]["config"] == {
        "mcpServers": {
            "conformance": {"type": "http", "url": "http://127.0.0.1:9/mcp", "protocolVersion": "2026-07-28"}
        }
    }


def test_driver_reads_every_resource_and_prompt_of_the_standard_headers_scenario(monkeypatch):
    """http-standard-headers (issue 38 item 8): the driver lists and reads the resources and gets the prompts, so the
    harness sees Mcp-Method/Mcp-Name on resources/read and prompts/get; here against the mock, on the real wire."""
    sys.path.insert(0, str(ROOT))
    from mock_server.mcp_mock import MockServer

    resource = {"uri": "file:///path/to/file%20name.txt", "name": "f", "mimeType": "text/plain", "x-mock-text": "t"}
    prompts = [{"name": "test_prompt"}, {"name": "p2", "arguments": [{"name": "who", "required": True}]}]
    tools = [{"name": "test_headers", "inputSchema": {"type": "object"}}]
    server = MockServer({"versions": ["2026-07-28"], "tools": tools, "resources": [resource], "prompts": prompts})
    url = server.start()
    try:
        monkeypatch.setenv("MCP_CONFORMANCE_SCENARIO", "http-standard-headers")
        monkeypatch.delenv("MCP_CONFORMANCE_CONTEXT", raising=False)
        monkeypatch.delenv("BKMCP_CONFORMANCE_PIN", raising=False)
        assert drv.main([url]) == 0
        sent = [(e["rpc_method"], e["headers"].get("mcp-name"), e["json"].get("params", {})) for e in server.log]
        reads = [(name, params["uri"]) for method, name, params in sent if method == "resources/read"]
        assert reads == [(resource["uri"], resource["uri"])]
        gets = [(name, params.get("arguments")) for method, name, params in sent if method == "prompts/get"]
        assert gets == [("test_prompt", None), ("p2", {"who": "x"})]
    finally:
        server.stop()
