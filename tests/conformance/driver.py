#!/usr/bin/env python3
"""The client command the MCP conformance harness runs: one scenario, as bkmcp commands (stdlib only, Python 3.9+).

    driver.py [--bkmcp CMD] [--timeout DURATION] SERVER_URL      (CMD default: $BKMCP_CONFORMANCE_BKMCP)

The harness (``conformance client --command 'driver.py …' --scenario S``) starts the scenario's server, appends
its URL as the last argument and sets ``MCP_CONFORMANCE_SCENARIO`` (plus ``MCP_CONFORMANCE_CONTEXT``, a JSON object
for scenarios that hand the client data, and, from 0.2.0, ``MCP_CONFORMANCE_PROTOCOL_VERSION``). The driver writes
a temporary ``mcp.json`` with one http server ``conformance`` at that URL and runs bkmcp the way a user would:

1. ``bkmcp conformance --tools`` (negotiation + the whole catalogue); if that fails, the scenario stops there
   (an OAuth server's 401 is ``mcp_auth_required``: bkmcp has no OAuth, docs/contract.md §4);
2. one call per tool, tools excluded by bkmcp (``data.excluded``) included, so that the harness sees whether bkmcp
   refuses them: with the arguments ``MCP_CONFORMANCE_CONTEXT.toolCalls`` names, else the scenario's own plan
   below, else arguments made from the tool's ``inputSchema`` (each required property: its first ``enum`` value,
   else a plain value of its type);
3. for the scenarios of ``READS_RESOURCES_AND_PROMPTS`` (whose server offers them), ``--resources`` and a
   ``--read`` of each resource, ``--prompts`` and a ``--prompt`` of each prompt (each required argument ``x``):
   the harness checks the ``Mcp-Method``/``Mcp-Name`` headers of those requests (issue 38);
4. for the SEP-2640 scenarios, ``--skills`` (every one), then, where the scenario serves a skill to load
   (``LOADS_SKILLS``), ``--skill NAME`` of each listed skill: the harness checks that nothing is read ahead and that
   a file failing its digest, size or frontmatter check stops the load (issue 38 item 5).

The era is bkmcp's to negotiate. Only ``BKMCP_CONFORMANCE_PIN=1`` (the runner sets it for a run at an explicit
``--spec-version``) writes ``MCP_CONFORMANCE_PROTOCOL_VERSION`` into the config as ``protocolVersion``.
Every bkmcp command line and its stdout/stderr go to the driver's stderr/stdout, which the harness saves as
``stderr.txt``/``stdout.txt`` next to ``checks.json``. Exit status: 0 if every bkmcp command exited 0, else the
first non-zero status, where a call of a tool bkmcp excluded counts as success only if bkmcp refused it
(``mcp_tool_not_found``, exit 1) and as 3 otherwise. The harness reports a client that exits non-zero as failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any

SERVER = "conformance"
# A scenario server that never answers (one waiting on a client capability bkmcp lacks) ends within this.
SHORT_TIMEOUT: dict[str, str] = {}
READS_RESOURCES_AND_PROMPTS = {"http-standard-headers"}
# Scenarios whose server asks the client (elicitation, input_required rounds): each call accepts with the requested
# schema's defaults (``--inputs '{}'``, SEP-1034), as an agent that was told to accept would (docs/contract.md §5).
ANSWERS = {
    "sep-2322-client-request-state": ["--inputs", "{}"],
    "elicitation-sep1034-client-defaults": ["--inputs", "{}"],
}
# SEP-2640 scenarios: each lists the skills; these also load each (no-prefetch must see no file read at all)
LISTS_SKILLS = {"sep-2640-client-no-prefetch"}
LOADS_SKILLS = {"sep-2640-client-verify-digest", "sep-2640-client-verify-size", "sep-2640-client-verify-frontmatter"}
_PLAIN = {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "object": {}, "array": [], "null": None}


def sample_arguments(schema: Any) -> dict[str, Any]:
    """Arguments for a tool nobody described: each required property gets its first enum value or a plain value."""
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    args: dict[str, Any] = {}
    for name in required:
        prop = props.get(name) if isinstance(props.get(name), dict) else {}
        if isinstance(prop.get("enum"), list) and prop["enum"]:
            args[name] = prop["enum"][0]
            continue
        kind = prop.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        args[name] = _PLAIN.get(kind, "x") if isinstance(kind, str) else "x"
    return args


def excluded_names(excluded: Any) -> list[str]:
    """Names of the tools `--tools` lists under ``data.excluded`` (objects with a name, names, or name -> reason)."""
    if isinstance(excluded, dict):
        return [str(name) for name in excluded]
    if isinstance(excluded, list):
        return [
            str(e["name"]) if isinstance(e, dict) else str(e)
            for e in excluded
            if isinstance(e, str) or (isinstance(e, dict) and "name" in e)
        ]
    return []


def plan_calls(scenario: str, tools: list[dict[str, Any]], context: dict[str, Any]) -> list[list[str]]:
    """The bkmcp argument lists (after ``<server>``) for the calls of one scenario, in order."""
    by_name = {t.get("name"): t for t in tools}
    if scenario == "tools_call" and "add_numbers" in by_name:
        return [["add_numbers", "--a", "2", "--b", "3"]]  # the flag path, as a user types it
    if scenario == "json-schema-2020-12-preservation" and "json_schema_echo" in by_name:
        # Echo the focal tool's inputSchema exactly as `--tools` showed it: proves bkmcp keeps it verbatim.
        focal = by_name.get("json_schema_2020_12_tool", {})
        calls = [["json_schema_echo", "--body", json.dumps({"schema": focal.get("inputSchema", {})})]]
        if focal:
            calls.insert(
                0,
                [
                    "json_schema_2020_12_tool",
                    "--body",
                    json.dumps({"name": "Ada", "contactMethod": "email", "email": "ada@example.org"}),
                ],
            )
        return calls
    if scenario == "json-schema-ref-no-deref" and "lookup_user" in by_name:
        # Its server has no tools/call (-32601); tool help is the other path that reads the schema's $refs.
        return [["lookup_user", "--help"]]
    given = context.get("toolCalls")
    if isinstance(given, list):
        return [[c["name"], "--body", json.dumps(c.get("arguments") or {})] for c in given if isinstance(c, dict)]
    return [[t["name"], "--body", json.dumps(sample_arguments(t.get("inputSchema")))] for t in tools]


def run_bkmcp(bkmcp: list[str], args: list[str]) -> subprocess.CompletedProcess[str]:
    argv = bkmcp + args
    print(f"driver: $ {shlex.join(argv)}", file=sys.stderr, flush=True)
    # bkmcp bounds itself (--timeout); this is only a safety net so that a hung bkmcp cannot hang the harness.
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    print(f"driver: exit {proc.returncode}", file=sys.stderr, flush=True)
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("BKMCP_CONFORMANCE_BKMCP") or (
        f"{shlex.quote(sys.executable)} {shlex.quote(os.path.join(os.path.dirname(__file__), '..', '..', 'bkmcp.py'))}"
    )
    parser.add_argument(
        "--bkmcp",
        default=default,
        help="how to run bkmcp (a shell-quoted command line; default: "
        "$BKMCP_CONFORMANCE_BKMCP, else this Python + bkmcp.py)",
    )
    parser.add_argument("--timeout", default="20s", help="bkmcp --timeout for each command (default 20s)")
    parser.add_argument("url")
    opts = parser.parse_args(argv)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    entry: dict[str, Any] = {"type": "http", "url": opts.url}
    if os.environ.get("BKMCP_CONFORMANCE_PIN") == "1" and os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION"):
        entry["protocolVersion"] = os.environ["MCP_CONFORMANCE_PROTOCOL_VERSION"]
    timeout = SHORT_TIMEOUT.get(scenario, opts.timeout)
    print(f"driver: scenario {scenario!r}, server {entry}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="bkmcp-conformance-") as tmp:
        config = os.path.join(tmp, "mcp.json")
        with open(config, "w", encoding="utf-8") as fh:
            json.dump({"mcpServers": {SERVER: entry}}, fh)
        bkmcp = shlex.split(opts.bkmcp) + ["--config", config, "--timeout", timeout, "-v"]
        listed = run_bkmcp(bkmcp, [SERVER, "--tools"])
        if listed.returncode != 0:
            return listed.returncode
        data = json.loads(listed.stdout).get("data", {})
        tools = list(data.get("tools", []))
        excluded = excluded_names(data.get("excluded"))
        tools += [{"name": name} for name in excluded]
        status = 0
        for call in plan_calls(scenario, tools, context):
            done = run_bkmcp(bkmcp, [SERVER] + call + ANSWERS.get(scenario, []))
            if call[0] in excluded:
                # bkmcp listed this tool as excluded: calling it must be refused locally, never sent.
                refused = done.returncode == 1 and '"mcp_tool_not_found"' in done.stderr + done.stdout
                print(
                    f"driver: excluded tool {call[0]!r} {'refused' if refused else 'NOT refused'}",
                    file=sys.stderr,
                    flush=True,
                )
                status = status or (0 if refused else 3)
            else:
                status = status or done.returncode
        if scenario in READS_RESOURCES_AND_PROMPTS:
            read = read_resources_and_prompts(bkmcp)  # run whatever the calls did
            status = status or read
        if scenario in LISTS_SKILLS | LOADS_SKILLS:
            status = status or list_and_load_skills(bkmcp, load=scenario in LOADS_SKILLS)
        return status


def list_and_load_skills(bkmcp: list[str], *, load: bool) -> int:
    """``--skills``, then (``load``) ``--skill NAME`` of each listed skill; the first non-zero exit status, else 0."""
    listed = run_bkmcp(bkmcp, [SERVER, "--skills"])
    if listed.returncode != 0 or not load:
        return listed.returncode
    status = 0
    for skill in json.loads(listed.stdout).get("data", {}).get("skills", []):
        done = run_bkmcp(bkmcp, [SERVER, "--skill", str(skill.get("name"))])
        status = status or done.returncode
    return status


def read_resources_and_prompts(bkmcp: list[str]) -> int:
    """``--resources`` then ``--read`` each resource, ``--prompts`` then ``--prompt`` each prompt; the first non-zero
    exit status, else 0."""
    status = 0
    for listing, key, read in (("--resources", "resources", "--read"), ("--prompts", "prompts", "--prompt")):
        listed = run_bkmcp(bkmcp, [SERVER, listing])
        if listed.returncode != 0:
            status = status or listed.returncode
            continue
        for item in json.loads(listed.stdout).get("data", {}).get(key, []):
            if read == "--read":
                args = [read, str(item.get("uri"))]
            else:
                declared = item.get("arguments") if isinstance(item.get("arguments"), list) else []
                required = [a["name"] for a in declared if isinstance(a, dict) and a.get("required") is True]
                args = [read, str(item.get("name"))] + [part for name in required for part in (f"--{name}", "x")]
            done = run_bkmcp(bkmcp, [SERVER] + args)
            status = status or done.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
