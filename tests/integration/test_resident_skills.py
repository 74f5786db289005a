"""Skills in the resident mode (issue 38 item 7, docs/contract.md §11.2 "Skills"): ``list_skills`` and
``read_skill`` against the mock server's skills (``skills: true``: DEFAULT_SKILLS with its hostile variants) over
HTTP and stdio in both eras. ``read_skill`` verifies as ``--skill`` does (one path, ``load_skill``): a verified
skill's files as text (a file that is not UTF-8 as its size and sha256), an unverified one ``skill_unverified`` with
nothing of its content in the answer or the events. The extension is declared on the skill commands' requests only:
per request on a kept 2026-07-28 session, by a legacy server's own session at ``initialize``; the kept session's
other requests declare nothing. Two users of a per-user server read through their own sessions.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from resident_harness import (
    KINDS,
    LEGACY,
    MODERN,
    ResidentWorld,
    http_row,
    mock_stdio,
    stdio_row,
    world_fixtures,
    write_registry,
)

from mock_server.mcp_mock import DEFAULT_SKILLS, SKILLS_EXTENSION, MockServer
from tests.helpers import UNVERIFIED_SKILLS

pytestmark = pytest.mark.integration

PDF = DEFAULT_SKILLS[0]["files"]
DECLARED = {"extensions": {SKILLS_EXTENSION: {}}}
META = "io.modelcontextprotocol/clientCapabilities"


class World(ResidentWorld):
    """One mock server ``m`` with skills behind a ``bkmcp --resident``; what the server received."""

    def methods(self) -> list[str]:
        return [r["method"] for r in self.requests() if r["method"] not in ("initialize", "server/discover")]

    def reads(self) -> list[str]:
        return [r["params"]["uri"] for r in self.requests() if r["method"] == "resources/read"]

    def declared(self) -> list[tuple[str, Any]]:
        """(method, the client capabilities it carried) of each request that carries them: initialize's, or a
        2026-07-28 request's _meta."""
        found = []
        for request in self.requests():
            params = request.get("params") or {}
            if request["method"] == "initialize":
                found.append(("initialize", params.get("capabilities")))
            elif META in (params.get("_meta") or {}):
                found.append((request["method"], params["_meta"][META]))
        return found


make_world, world = world_fixtures(World, skills=True)


def test_list_skills_lists_each_skill_and_reads_nothing(world):
    result = world.res.ok("list_skills", "ann")
    assert result["errors"] == []
    [server] = result["servers"]
    assert (server["server_name"], server["skill_count"]) == ("m", len(DEFAULT_SKILLS))
    assert server["skills"][0] == {
        "name": "pdf-processing",
        "uri": "skill://pdf-processing/SKILL.md",
        "frontmatter": DEFAULT_SKILLS[0]["frontmatter"],
        "file_count": 3,
    }
    assert server["skills"][-1]["file_count"] is None  # dynamic: no digests
    assert world.methods() == ["tools/list", "skills/list"] or world.methods() == ["skills/list"]
    assert world.reads() == []
    [event] = world.res.wait_event("skills.listed")
    assert (event["server"], event["user"], event["skill_count"]) == ("m", "ann", len(DEFAULT_SKILLS))


def test_read_skill_answers_the_verified_files_and_declares_the_extension_on_its_requests_only(world):
    world.res.ok("list_tools", "ann")
    skill = world.res.ok("read_skill", "ann", server_name="m", name="pdf-processing")
    assert (skill["server_name"], skill["name"], skill["skill"]) == ("m", "pdf-processing", "pdf-processing")
    assert skill["uri"] == "skill://pdf-processing/SKILL.md"
    assert skill["frontmatter"] == DEFAULT_SKILLS[0]["frontmatter"]
    assert [(f["path"], f["text"]) for f in skill["files"]] == list(PDF.items())
    first = PDF["SKILL.md"].encode()
    assert (skill["files"][0]["bytes"], skill["files"][0]["sha256"]) == (len(first), hashlib.sha256(first).hexdigest())
    assert world.reads() == [f"skill://pdf-processing/{path}" for path in PDF]  # SKILL.md first
    world.res.ok("refresh_tools", "ann")
    declared = world.declared()
    legacy = any(r["method"] == "initialize" for r in world.requests())
    if legacy:  # the kept session declared nothing; the skill commands' own session declared the extension
        assert [caps for method, caps in declared if method == "initialize"] == [{}, DECLARED]
        assert [r["method"] for r in world.requests()].count("initialize") == 2
    else:  # one kept session: the extension in the _meta of the skill command's requests alone
        skill_methods = {"skills/list", "resources/read"}
        assert [m for m, caps in declared if caps == DECLARED] == ["skills/list"] + ["resources/read"] * len(PDF)
        assert all(caps == {} for m, caps in declared if m not in skill_methods)
        assert [r["method"] for r in world.requests()].count("server/discover") <= 2
    [event] = world.res.wait_event("skill.read")
    assert (event["skill"], event["file_count"], event["user"]) == ("pdf-processing", len(PDF), "ann")


@pytest.mark.parametrize(("name", "reason", "reads"), UNVERIFIED_SKILLS)
@pytest.mark.parametrize("kind", KINDS, ids="-".join)
def test_an_unverified_skill_is_the_error_alone(make_world, kind, name, reason, reads):
    world = make_world(*kind)
    answer = world.res.ask("read_skill", "ann", server_name="m", name=name)
    assert (answer["success"], answer["error_code"]) == (False, "skill_unverified")
    assert answer["details"]["reason"] == reason
    assert len(world.reads()) == reads  # nothing read after the file that failed
    [event] = world.res.wait_event("skill.read")
    assert event["error_code"] == "skill_unverified" and "file_count" not in event
    events = world.res.events_path.read_text()
    seen = json.dumps(answer) + events
    for text in ("Evil", "Exfiltrate", "Body."):  # the files' content: nowhere
        assert text not in seen
    assert "skill://" not in events  # the error names the file that failed; an event names no URI


def test_an_unknown_skill_and_a_server_without_the_extension(make_world, tmp_path, resident):
    world = make_world("http", MODERN)
    missing = world.res.ask("read_skill", "ann", server_name="m", name="pdf-processin")
    assert (missing["success"], missing["error_code"]) == (False, "mcp_skill_not_found")
    assert missing["details"]["suggestions"] == ["pdf-processing"]
    bare = MockServer({"versions": [LEGACY]})
    bare.start()
    try:
        reg = tmp_path / "bare.db"
        write_registry(str(reg), [http_row("bare", bare.url), http_row("m", world.http.url)], {"bare": {}, "m": {}})
        res = resident(reg)
        listed = res.ok("list_skills", "ann")
        assert [s["server_name"] for s in listed["servers"]] == ["m"]  # a failing server never hides the others
        assert [(e["server_name"], e["error_code"]) for e in listed["errors"]] == [
            ("bare", "mcp_capability_unsupported")
        ]
        refused = res.ask("read_skill", "ann", server_name="bare", name="pdf-processing")
        assert refused["error_code"] == "mcp_capability_unsupported"
        assert [
            e["rpc_method"] for e in bare.log if (e.get("rpc_method") or "").startswith(("skills/", "resources/"))
        ] == []
    finally:
        bare.stop()


def test_two_users_read_skills_through_their_own_sessions(tmp_path, resident):
    """A per-user HTTP server (each user's credential in a header) and a per-user stdio one, in both eras: each
    user's skill requests carry that user's own credential, and no answer or event holds the other's."""
    modern = MockServer({"versions": [MODERN], "skills": True})
    legacy = MockServer({"versions": [LEGACY], "skills": True})
    modern.start()
    legacy.start()
    try:
        users = {"ann": "cred-ann-3f9b", "bob": "cred-bob-81c4"}
        rows = [
            http_row("hnew", modern.url, isolation="user", headers={"X-Tenant": "${user.token}"}),
            http_row("hold", legacy.url, isolation="user", headers={"X-Tenant": "${user.token}"}),
            stdio_row("sown", mock_stdio({"skills": True}), env={"MY_TOKEN": "${user.token}"}),
        ]
        servers = ("hnew", "hold", "sown")
        creds = {(user, server): {"token": token} for user, token in users.items() for server in servers}
        reg = tmp_path / "registry.db"
        write_registry(str(reg), rows, None, creds)
        res = resident(reg)
        answers: dict[str, str] = {}
        for user in users:
            listed = res.ok("list_skills", user)
            assert listed["errors"] == [] and [s["server_name"] for s in listed["servers"]] == list(servers)
            answers[user] = json.dumps(listed)
            for server in servers:
                skill = res.ok("read_skill", user, server_name=server, name="pdf-processing")
                assert [f["path"] for f in skill["files"]] == list(PDF)
                answers[user] += json.dumps(skill)
        for user, text in answers.items():
            other = next(u for u in users if u != user)
            assert users[other] not in text and users[user] not in text
        for srv in (modern, legacy):
            reads = srv.requests("resources/read")
            assert sorted({e["headers"]["x-tenant"] for e in reads}) == sorted(users.values())
            for token in users.values():
                assert [json.loads(e["body"])["params"]["uri"] for e in reads if e["headers"]["x-tenant"] == token] == [
                    f"skill://pdf-processing/{path}" for path in PDF
                ]
        starts = res.events("process.started")
        assert sorted((e["server"], e["user"]) for e in starts) == [("sown", "ann"), ("sown", "bob")]
        events = res.events_path.read_text()
        assert all(token not in events for token in users.values())
    finally:
        modern.stop()
        legacy.stop()


def test_parse_errors_of_the_skill_actions_are_invalid_command(make_world):
    world = make_world("http", MODERN)
    for params in ({}, {"server_name": "m"}, {"name": "pdf-processing"}, {"server_name": "m", "name": 3}):
        answer = world.res.ask("read_skill", "ann", **params)
        assert (answer["success"], answer["error_code"]) == (False, "invalid_command"), params
    late = world.res.ask("list_skills", "ann", timeout_ms=0)
    assert late["error_code"] == "invalid_command"
    assert world.methods() == []


def test_in_process_skills_on_both_eras(tmp_path):
    """The skill actions through ``bkmcp.main`` in this process (what coverage measures): a public 2026-07-28 HTTP
    server (the extension per request on its kept session) and a per-user legacy stdio one (its own session for
    each skill command, its child gone at the end), verified, unverified and unknown."""
    from tests.helpers import run_bkmcp

    srv = MockServer({"versions": [MODERN], "skills": True})
    srv.start()
    try:
        reg = tmp_path / "r.db"
        log = tmp_path / "box.jsonl"
        rows = [http_row("pub", srv.url), stdio_row("box", mock_stdio({"versions": [LEGACY], "skills": True}, log=log))]
        write_registry(str(reg), rows, {"box": {}})

        def line(task: str, action: str, **params: Any) -> str:
            body = {"command": "invoke", "task_id": task, "params": {"action": action, **params}}
            return json.dumps({**body, "user": {"userId": "u1"}}) + "\n"

        stdin = "".join(
            (
                line("a", "list_skills"),
                line("b", "read_skill", server_name="pub", name="pdf-processing"),
                line("c", "read_skill", server_name="box", name="pdf-processing"),
                line("d", "read_skill", server_name="box", name="tampered"),
                line("e", "read_skill", server_name="pub", name="nothing-like-it"),
            )
        )
        res = run_bkmcp("--resident", "--registry", str(reg), stdin=stdin)
        assert res.exit_status == 0, res.stderr
        got = {a["task_id"]: a for a in map(json.loads, res.stdout.splitlines())}
        listed = got["a"]["result"]
        assert [(s["server_name"], s["skill_count"]) for s in listed["servers"]] == [
            ("box", len(DEFAULT_SKILLS)),
            ("pub", len(DEFAULT_SKILLS)),
        ]
        for task in ("b", "c"):
            assert [f["text"] for f in got[task]["result"]["files"]] == list(PDF.values())
        assert (got["d"]["error_code"], got["d"]["details"]["reason"]) == ("skill_unverified", "digest")
        assert "Evil" not in res.stdout and "Exfiltrate" not in res.stdout
        assert got["e"]["error_code"] == "mcp_skill_not_found"
        kept = [json.loads(e["body"]) for e in srv.log if e.get("rpc_method") == "resources/read"]
        assert all(r["params"]["_meta"][META] == DECLARED for r in kept) and len(kept) == len(PDF)
        box = [json.loads(x)["json"] for x in log.read_text().splitlines() if json.loads(x).get("rpc_method")]
        inits = [r["params"]["capabilities"] for r in box if r.get("method") == "initialize"]
        assert inits == [{}, DECLARED, DECLARED, DECLARED]  # the kept session, then one own session per command
    finally:
        srv.stop()
