"""Issue 11 item 3: error messages read well: the source named once, no doubled words, and a hint saying what to
do next."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import run_bkmcp

HTTP = {"type": "http", "url": "http://127.0.0.1:9/mcp"}
DRY_CALL = ["srv", "t", "--body", "{}", "--dry-run"]


def with_headers(headers: dict[str, str]) -> dict:
    """A config whose server ``srv`` (HTTP, a closed loopback port) sends ``headers``."""
    return {"mcpServers": {"srv": {**HTTP, "headers": headers}}}


CASES = {
    "config-directory": ("{dir}", {}, ["srv", "--tools"]),
    "top-level-array": ("[]", {}, ["srv", "--tools"]),
    "duplicate-header": (with_headers({"X-A": "1", "x-a": "2"}), {}, ["srv", "--tools"]),
    "empty-authorization": (with_headers({"Authorization": ""}), {}, DRY_CALL),
    "empty-bearer": (with_headers({"Authorization": "Bearer "}), {}, DRY_CALL),
    "bkapi-not-json": (with_headers({"X-Bkapi-Authorization": "{x"}), {}, DRY_CALL),
    "bkapi-empty": (with_headers({"X-Bkapi-Authorization": " "}), {}, DRY_CALL),
    "bkapi-array": (with_headers({"X-Bkapi-Authorization": "[]"}), {}, DRY_CALL),
    "non-ascii-reference": (with_headers({"X-A": "${ÄÖ}"}), {}, DRY_CALL),
    "empty-jq": ({"mcpServers": {"srv": HTTP}}, {}, ["srv", "--tools", "--jq", " "]),
    "bad-jq": ({"mcpServers": {"srv": HTTP}}, {}, ["srv", "--tools", "--jq", ".["]),
    "argv-server-name": ({"mcpServers": {"srv": HTTP}}, {}, ["a b", "--tools"]),
    "body-empty-file-name": ({"mcpServers": {"srv": HTTP}}, {}, ["srv", "t", "--body", "@", "--dry-run"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_messages_have_a_next_step_and_no_doubled_words(name, write_config, tmp_path, no_network):
    content, env, args = CASES[name]
    path = str(tmp_path) if content == "{dir}" else str(write_config(content))
    res = run_bkmcp("--config", path, *args, env=env)
    error = res.json["error"]
    assert res.exit_status == 1, res.stderr
    assert error.get("hint"), f"{error['code']}: {error['message']!r} says nothing about what to do next"
    for text in (error["message"], error["hint"]):
        assert not re.search(r"\b(\w{2,}) \1\b", text, re.IGNORECASE), text
    assert error["message"].count("server name") <= 1 and error["message"].count("--body") <= 1


def test_invalid_argv_server_name_names_the_rule_once(write_config, no_network):
    res = run_bkmcp("--config", str(write_config({"mcpServers": {"srv": HTTP}})), "", "--tools")
    assert res.json["error"]["message"] == "invalid server name '': the name must not be empty"
    assert json.dumps(res.json).count("server name") == 1
