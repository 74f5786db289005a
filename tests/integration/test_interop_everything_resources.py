"""Resources, resource templates and prompts (issue 38 items 1, 2, 6) against the real
``@modelcontextprotocol/server-everything@2026.8.31`` over stdio and HTTP: every resource and template listed (7 and
2; the Inspector CLI lists the same), every resource read, both templates read through their flags, every prompt (4)
fetched with its arguments, an unknown URI's stable code; and warm (--keep-alive) byte for byte the one-shot answer.
Skipped with the fixture's reason only when the server is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, pids_running, until, write_mcp_json

pytestmark = [pytest.mark.integration, pytest.mark.interop]

TEXT_TEMPLATE = "demo://resource/dynamic/text/{resourceId}"
BLOB_TEMPLATE = "demo://resource/dynamic/blob/{resourceId}"
# every prompt with arguments that fit it (completable-prompt's values are the ones its completion offers)
PROMPTS = {
    "simple-prompt": [],
    "args-prompt": ["--city", "Paris", "--state", "TX"],
    "completable-prompt": ["--department", "Engineering", "--name", "Alice"],
    "resource-prompt": ["--resourceType", "Text", "--resourceId", "1"],
}


class Everything:
    """bkmcp in a fresh interpreter against one server-everything entry ``ev``, with a private runtime folder for
    its background process (--keep-alive)."""

    def __init__(self, tmp: Path, entry: dict) -> None:
        self.tmp = tmp
        runtime = tmp / "run"
        runtime.mkdir(mode=0o700)
        self.daemon = f"--keep-alive-daemon {runtime / 'bkmcp'}"
        self.config = write_mcp_json(tmp / "mcp.json", {"ev": entry})
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp), "XDG_RUNTIME_DIR": str(runtime)}

    def run(self, *args: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(self.config), "ev", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.tmp, timeout=120)

    def data(self, *args: str) -> dict:
        done = self.run(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return json.loads(done.stdout)["data"]

    def close(self) -> None:
        subprocess.run(
            [sys.executable, str(ROOT / "bkmcp.py"), "--sessions", "--stop"],
            env=self.env,
            capture_output=True,
            timeout=60,
        )
        until(lambda: not pids_running(self.daemon), "the background process ended", 20)


@pytest.fixture(params=["http", "stdio"])
def ev(request, tmp_path):
    if request.param == "http":
        entry = {"type": "http", "url": request.getfixturevalue("everything_server").url}
    else:
        argv = request.getfixturevalue("everything_stdio_argv")
        entry = {"type": "stdio", "command": argv[0], "args": argv[1:]}
    made = Everything(tmp_path, entry)
    yield made
    made.close()


def test_every_resource_and_template_is_listed_and_every_resource_read(ev):
    data = ev.data("--resources")
    assert (data["resource_count"], data["template_count"], data["complete"]) == (7, 2, True)
    assert [t["uriTemplate"] for t in data["templates"]] == [TEXT_TEMPLATE, BLOB_TEMPLATE]
    for resource in data["resources"]:
        contents = ev.data("--read", resource["uri"])["result"]["contents"]
        assert contents[0]["uri"] == resource["uri"] and contents[0]["text"].strip(), resource["uri"]
        raw = ev.run("--read", resource["uri"], "-r")
        assert raw.returncode == 0 and raw.stdout.rstrip("\n") == contents[0]["text"].rstrip("\n")
    brief = ev.data("--resources", "--brief")
    assert brief["templates"][0]["uriTemplate"] == TEXT_TEMPLATE and "summary" in brief["resources"][0]


def test_both_templates_are_read_through_their_flags(ev):
    text = ev.data("--read", TEXT_TEMPLATE, "--resourceId", "2")["result"]["contents"][0]
    assert text["uri"] == "demo://resource/dynamic/text/2" and text["text"].startswith("Resource 2:")
    blob = ev.data("--read", BLOB_TEMPLATE, "--resourceId=3")["result"]["contents"][0]
    assert blob["uri"] == "demo://resource/dynamic/blob/3" and blob["blob"]
    help_ = ev.run("--read", TEXT_TEMPLATE, "--help")
    assert help_.returncode == 0 and "--resourceId VALUE  required" in help_.stdout


def test_an_unknown_uri_is_mcp_resource_not_found(ev):
    done = ev.run("--read", "demo://resource/nowhere")
    assert done.returncode == 2 and json.loads(done.stdout)["error"]["code"] == "mcp_resource_not_found"


def test_every_prompt_is_fetched_with_its_arguments(ev):
    listed = ev.data("--prompts")
    assert sorted(p["name"] for p in listed["prompts"]) == sorted(PROMPTS) and listed["prompt_count"] == 4
    for name, flags in PROMPTS.items():
        messages = ev.data("--prompt", name, *flags)["result"]["messages"]
        assert messages and all(m["role"] in ("user", "assistant") for m in messages), name
        raw = ev.run("--prompt", name, *flags, "-r")
        assert raw.returncode == 0 and raw.stdout.startswith(f"[{messages[0]['role']}]\n"), name
    city = ev.data("--prompt", "args-prompt", "--city", "Paris")["result"]["messages"][0]["content"]["text"]
    assert "Paris" in city
    missing = ev.run("--prompt", "args-prompt", "--state", "TX")
    assert missing.returncode == 1 and json.loads(missing.stderr.splitlines()[-1])["error"]["code"] == (
        "invalid_mcp_arguments"
    )
    help_ = ev.run("--prompt", "resource-prompt", "--help")
    assert "--resourceType  required" in help_.stdout and "--resourceId  required" in help_.stdout


def test_warm_answers_are_the_one_shot_answers(ev):
    commands = [
        ["--resources"],
        ["--resources", "--brief"],
        ["--read", "demo://resource/static/document/features.md"],
        ["--read", "demo://resource/static/document/features.md", "-r"],
        ["--read", "demo://resource/nowhere"],
        ["--prompts"],
        ["--prompt", "args-prompt", "--city", "Paris", "--state", "TX"],
        ["--prompt", "simple-prompt", "-r"],  # (resource-prompt's text names the second it was made)
        ["--prompt", "args-prompt"],
    ]
    for args in commands:
        one = ev.run(*args)
        warm = ev.run(*args, "--keep-alive")
        assert (warm.returncode, warm.stdout, warm.stderr) == (one.returncode, one.stdout, one.stderr), args
    assert pids_running(ev.daemon), "the warm commands ran in a background process"


@pytest.mark.parametrize("server", ["everything_server", "sdk_everything_stateful"])
def test_counts_equal_the_inspector_clis(request, tmp_path, inspector_cli, server):
    """bkmcp's --resources and --prompts list what the MCP Inspector CLI 2.12.0 lists (resources/list,
    resources/templates/list, prompts/list over HTTP), in the same order; skipped with the fixture's reason only
    when the Inspector is not installed (`make peers`) and BKMCP_INTEROP_REQUIRED is not set."""
    url = request.getfixturevalue(server).url

    def inspector(method: str) -> dict:
        argv = [*inspector_cli, "--cli", url, "--transport", "http", "--method", method]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, (method, done.stdout, done.stderr)
        answer = json.loads(done.stdout)
        assert "nextCursor" not in answer, (method, "the Inspector listed one page only")
        return answer

    ev = Everything(tmp_path, {"type": "http", "url": url})
    resources, prompts = ev.data("--resources"), ev.data("--prompts")
    theirs = (
        [r["uri"] for r in inspector("resources/list")["resources"]],
        [t["uriTemplate"] for t in inspector("resources/templates/list")["resourceTemplates"]],
        [p["name"] for p in inspector("prompts/list")["prompts"]],
    )
    ours = (
        [r["uri"] for r in resources["resources"]],
        [t["uriTemplate"] for t in resources["templates"]],
        [p["name"] for p in prompts["prompts"]],
    )
    assert ours == theirs
    assert (resources["resource_count"], resources["template_count"], prompts["prompt_count"]) == tuple(
        map(len, theirs)
    )
    assert tuple(map(len, ours)) == {"everything_server": (7, 2, 4), "sdk_everything_stateful": (3, 1, 4)}[server]
