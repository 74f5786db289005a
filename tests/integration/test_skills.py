"""Skills (SEP-2640; issue 38 item 5, docs/contract.md §2 "Skills") against the mock server's skills (``skills:
true``: DEFAULT_SKILLS, with a wrong digest, a wrong size, a frontmatter unlike the listing's, a file outside the
skill and a dynamic skill), over HTTP and stdio in both eras: ``--skills`` lists and reads nothing ahead;
``--skill NAME`` reads SKILL.md first and each file only after the one before it verified; an unverified file
reaches neither stdout nor disk and nothing is read after it; ``--out DIR`` writes a verified copy through the one
writer; the extension is declared by skill commands only.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mock_server.mcp_mock import DEFAULT_SKILLS, SKILLS_EXTENSION
from tests.helpers import UNVERIFIED_SKILLS, MockTarget, run_bkmcp

pytestmark = pytest.mark.integration

MODERN, LEGACY = "2026-07-28", "2025-11-25"
PDF = DEFAULT_SKILLS[0]["files"]


class Skills(MockTarget):
    """The mock with ``skills`` over one transport and era."""

    def __init__(self, tmp: Path, transport: str, version: str, skills: Any = True, **scenario: Any) -> None:
        super().__init__(tmp, transport, version, {"skills": skills, **scenario})

    def reads(self) -> list[str]:
        return [r["params"]["uri"] for r in self.requests() if r["method"] == "resources/read"]

    def methods(self) -> list[str]:
        return [r["method"] for r in self.requests() if r["method"] not in ("initialize", "server/discover")]

    def declared(self) -> list[Any]:
        """The client capabilities of every request that carries them (initialize's, or a modern request's _meta)."""
        found = []
        for request in self.requests():
            params = request.get("params") or {}
            if request["method"] == "initialize":
                found.append(params.get("capabilities"))
            elif "io.modelcontextprotocol/clientCapabilities" in (params.get("_meta") or {}):
                found.append(params["_meta"]["io.modelcontextprotocol/clientCapabilities"])
        return found


@pytest.fixture(params=[("http", LEGACY), ("http", MODERN), ("stdio", LEGACY), ("stdio", MODERN)], ids="-".join)
def skills(request, tmp_path):
    made = Skills(tmp_path, *request.param)
    yield made
    made.stop()


@pytest.fixture
def http_skills(tmp_path):
    made = Skills(tmp_path, "http", MODERN)
    yield made
    made.stop()


def test_skills_lists_each_skill_and_reads_nothing_ahead(skills):
    result = skills.run("--skills")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert data["skill_count"] == len(DEFAULT_SKILLS) and data["complete"] is True
    assert data["skills"][0] == {
        "name": "pdf-processing",
        "uri": "skill://pdf-processing/SKILL.md",
        "frontmatter": DEFAULT_SKILLS[0]["frontmatter"],
        "file_count": 3,
    }
    assert data["skills"][-1]["file_count"] is None  # dynamic: no digests
    assert skills.methods() == ["skills/list"] and skills.reads() == []
    assert skills.declared() and all(c == {"extensions": {SKILLS_EXTENSION: {}}} for c in skills.declared())


def test_only_skill_commands_declare_the_extension(http_skills):
    assert http_skills.run("--tools").exit_status == 0
    assert http_skills.run("--read", "skill://pdf-processing/SKILL.md").exit_status == 0
    assert http_skills.declared() and all(c == {} for c in http_skills.declared())


def test_skill_reads_its_files_lazily_each_verified(skills):
    result = skills.run("--skill", "pdf-processing")
    assert result.exit_status == 0, result.stdout + result.stderr
    data = result.json["data"]
    assert (data["skill"], data["uri"]) == ("pdf-processing", "skill://pdf-processing/SKILL.md")
    assert [(f["path"], f["text"]) for f in data["files"]] == list(PDF.items())
    assert data["files"][0]["sha256"] == hashlib.sha256(PDF["SKILL.md"].encode()).hexdigest()
    assert data["files"][0]["bytes"] == len(PDF["SKILL.md"].encode())
    assert skills.reads() == [f"skill://pdf-processing/{path}" for path in PDF]  # SKILL.md first
    raw = skills.run("--skill", "pdf-processing", "-r")
    assert raw.stdout.startswith("[SKILL.md]\n---\nname: pdf-processing\n")
    assert "\n[references/FORMS.md]\n# Forms\n" in raw.stdout


@pytest.mark.parametrize(("name", "reason", "reads"), UNVERIFIED_SKILLS)
def test_an_unverified_skill_reaches_neither_stdout_nor_disk(tmp_path, name, reason, reads):
    for version in (LEGACY, MODERN):
        (tmp_path / version).mkdir()
        made = Skills(tmp_path / version, "http", version)
        try:
            result = made.run("--skill", name, "--out", "copy")
            assert result.exit_status == 2 and result.stderr == ""
            envelope = result.json
            assert envelope["error"]["code"] == "skill_unverified" and envelope["error"]["reason"] == reason
            assert envelope["data"] == {"server": "m"}  # no content, no file list
            for text in ("Evil", "Exfiltrate", "Body."):
                assert text not in result.stdout
            assert len(made.reads()) == reads  # nothing read after the file that failed
            assert list((made.cwd / "copy").iterdir()) == []
        finally:
            made.stop()


def test_out_writes_a_verified_copy_with_its_layout(http_skills):
    (http_skills.cwd / "copy").mkdir()
    victim = http_skills.cwd / "victim"
    victim.mkdir()
    (http_skills.cwd / "copy" / "pdf-processing").symlink_to(victim)  # taken, and a link: never followed
    result = http_skills.run("--skill", "pdf-processing", "--out", "copy")
    assert result.exit_status == 0, result.stderr
    folder = http_skills.cwd / "copy" / "pdf-processing-1"
    data = result.json["data"]
    assert data["directory"] == str(folder)
    assert [f["file"] for f in data["files"]] == [str(folder / path) for path in PDF]
    assert all("text" not in f for f in data["files"])
    for path, text in PDF.items():
        assert (folder / path).read_text() == text and ((folder / path).stat().st_mode & 0o777) == 0o644
    assert list(victim.iterdir()) == []
    refused = http_skills.run("--skill", "pdf-processing", "--out", "-")
    assert (
        refused.exit_status == 1
        and json.loads(refused.stderr.splitlines()[-1])["error"]["code"] == "out_needs_one_blob"
    )
    capped = http_skills.run("--skill", "pdf-processing", "--out", "copy", "--max-blob-bytes", "100")
    assert capped.exit_status == 2 and capped.json["error"]["code"] == "blob_too_large"
    assert sorted(os.listdir(http_skills.cwd / "copy")) == ["pdf-processing", "pdf-processing-1"]


def test_names_are_labels_a_uri_picks_one_of_two(tmp_path):
    def spec(path: str) -> dict[str, Any]:
        text = f"---\nname: refunds\ndescription: {path}\n---\n"
        return {"name": path, "frontmatter": {"name": "refunds", "description": path}, "files": {"SKILL.md": text}}

    made = Skills(tmp_path, "http", MODERN, skills=[spec("billing/refunds"), spec("support/refunds")])
    try:
        both = made.run("--skill", "refunds")
        assert both.exit_status == 1
        error = json.loads(both.stderr.splitlines()[-1])["error"]
        assert error["code"] == "mcp_skill_not_found" and "give the URI" in error["message"]
        one = made.run("--skill", "skill://support/refunds/SKILL.md")
        assert one.exit_status == 0 and one.json["data"]["frontmatter"]["description"] == "support/refunds"
        missing = made.run("--skill", "refund")
        assert json.loads(missing.stderr.splitlines()[-1])["error"]["suggestions"] == ["refunds", "refunds"]
        assert made.reads() == ["skill://support/refunds/SKILL.md"]
    finally:
        made.stop()


def test_a_server_without_the_extension_gets_no_skills_request(tmp_path):
    made = Skills(tmp_path, "http", LEGACY, skills=None)
    try:
        result = made.run("--skills")
        assert result.exit_status == 2
        assert result.json["error"]["code"] == "mcp_capability_unsupported"
        assert result.json["error"]["capability"] == SKILLS_EXTENSION and made.methods() == []
    finally:
        made.stop()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--skills", "-r"), "--skills has none"),
        (("--skills", "--tools"), "cannot be combined"),
        (("--skill", "pdf-processing", "--who", "x"), "--skill and tool flags cannot be combined"),
        (("--skill", "pdf-processing", "extra"), "--skill and a tool call cannot be combined"),
        (("--skill",), "needs a value"),
        (("--skills", "--out", "o"), "--skills and --out cannot be combined"),
    ],
)
def test_skill_options_misused_are_usage_errors(http_skills, args, words):
    result = http_skills.run(*args)
    assert result.exit_status == 1 and result.stdout == ""
    error = json.loads(result.stderr.splitlines()[-1])["error"]
    assert error["code"] == "usage_error" and words in error["message"]
    assert http_skills.reads() == []


def test_skill_commands_run_one_shot_even_with_keep_alive(http_skills, tmp_path):
    """docs/contract.md §14: a skill session declares the extension, so it is never a kept one."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    for args in (("--skills",), ("--skill", "pdf-processing")):
        argv = ("--config", str(http_skills.config), "--keep-alive", "m", *args)
        result = run_bkmcp(*argv, env={"XDG_RUNTIME_DIR": str(runtime)}, cwd=str(http_skills.cwd))
        assert result.exit_status == 0, result.stderr
    assert list(runtime.iterdir()) == []
