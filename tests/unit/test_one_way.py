"""Data that travels one way (issue 31 item 2): ``--timeout`` is parsed once into the value the invocation carries,
the time left is asked of ``Deadline.left`` (the injected clock), and a redactor shares its secrets through
``Redactor.learn``, never through its private list; a resident slot's resolution is a record, and a user's credential
is chosen once per command, through the command (issue 37 item 3)."""

from __future__ import annotations

import io
import re

import pytest

import bkmcp
from tests.helpers import ROOT

SOURCE = (ROOT / "bkmcp.py").read_text(encoding="utf-8")


def _outside(cls: type) -> str:
    """bkmcp.py without the class ``cls``'s own body (up to the next line that is not indented)."""
    start = SOURCE.index(f"\nclass {cls.__name__}") + 1
    end = re.compile(r"\n(?=\S)").search(SOURCE, start).start()
    assert f"def {'remaining' if cls is bkmcp.Deadline else 'scrub'}(" in SOURCE[start:end]
    return SOURCE[:start] + SOURCE[end:]


# -- Deadline.left ------------------------------------------------------------------------------------------------


def test_deadline_left_uses_the_injected_clock_and_never_raises():
    now = [50.0]
    deadline = bkmcp.Deadline(3.0, clock=lambda: now[0])
    assert deadline.left() == 3.0
    now[0] = 52.5
    assert deadline.left() == pytest.approx(0.5)
    now[0] = 60.0
    assert deadline.left() == pytest.approx(-7.0)  # spent: negative, and no error (remaining() raises)
    with pytest.raises(bkmcp.McpTimeoutError):
        deadline.remaining()


def test_nothing_outside_deadline_computes_the_time_left_itself():
    """``git grep 'deadline.end - '`` outside ``Deadline`` finds nothing: one clock, the injected one."""
    rest = _outside(bkmcp.Deadline)
    assert re.findall(r"deadline\.end\s*-", rest) == []
    assert re.findall(r"\.end\s*-\s*(?:time\.monotonic|self\._clock)\(\)", rest) == []


def test_jq_budget_is_what_the_deadline_left_by_its_clock():
    now = [10.0]
    cli = bkmcp.Runner(bkmcp.Invocation(timeout_seconds=30.0), None, bkmcp.Log(io.StringIO()))  # type: ignore[arg-type]
    assert cli.jq_deadline().seconds == 30.0  # nothing remote ran: the whole --timeout
    cli.deadline = bkmcp.Deadline(30.0, clock=lambda: now[0])
    now[0] = 22.0
    assert cli.jq_deadline().seconds == pytest.approx(18.0)
    now[0] = 45.0  # spent: jq still gets its minimum to project the timed-out envelope
    assert cli.jq_deadline().seconds == bkmcp.JQ_MIN_BUDGET


# -- Redactor.learn -----------------------------------------------------------------------------------------------


def test_redactor_learn_takes_the_others_own_secrets_whole_and_not_its_base():
    base = bkmcp.Redactor()
    base.add("base-secret")
    server = bkmcp.Redactor(base=base)
    server.add("ab")  # short, yet whole: learned whole too
    server.add("server-token")
    learner = bkmcp.Redactor()
    learner.learn(server)
    assert learner.secrets() == ["server-token", "ab"]
    assert learner.scrub("ab server-token base-secret") == "*** *** base-secret"


def test_no_code_outside_the_redactor_reads_its_private_secrets():
    assert "._secrets" not in _outside(bkmcp.Redactor)


# -- --timeout parsed once ----------------------------------------------------------------------------------------


def test_check_invocation_parses_timeout_into_the_invocation():
    inv = bkmcp.parse_argv(["srv", "--check", "--timeout", "1500ms"])
    assert inv.timeout == "1500ms" and inv.timeout_seconds == bkmcp.DEFAULT_TIMEOUT  # not yet checked
    bkmcp.check_invocation(inv)
    assert inv.timeout_seconds == 1.5
    default = bkmcp.parse_argv(["srv", "--check"])
    bkmcp.check_invocation(default)
    assert default.timeout_seconds == bkmcp.DEFAULT_TIMEOUT
    given = bkmcp.parse_argv(["srv", "--check", "--timeout", "1500ms"])
    bkmcp.check_invocation(given, 4.25)  # a warm client's value wins over the text
    assert given.timeout_seconds == 4.25
    with pytest.raises(bkmcp.UsageError):
        bkmcp.check_invocation(bkmcp.parse_argv(["srv", "--check", "--timeout", "soon"]))


def test_timeout_text_is_parsed_in_one_function():
    # parse_duration's default option is --timeout: every call without another option= parses --timeout
    calls = [args for args in re.findall(r"parse_duration\(([^)]*)\)", SOURCE) if "option" not in args]
    assert calls == ["inv.timeout"], calls
    assert "def cli_timeout" not in SOURCE


def test_a_call_parses_timeout_once(monkeypatch, write_config, no_network):
    """One-shot: the text is parsed once, by ``check_invocation``, and the budget every step used is its value."""
    from tests.helpers import run_bkmcp

    parsed: list[str] = []
    real = bkmcp.parse_duration

    def counting(text, *args, **kwargs):
        parsed.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(bkmcp, "parse_duration", counting)
    config = write_config({"mcpServers": {"s": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}})
    result = run_bkmcp("--config", str(config), "s", "t", "--body", "{}", "--dry-run", "--timeout", "7s")
    assert result.exit_status == 0, result.stderr
    assert parsed.count("7s") == 1


# -- one identity for a resolved server ---------------------------------------------------------------------------


def _server(**changes):
    base = {
        "name": "s",
        "type": "http",
        "config_file": "/c/mcp.json",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": "Bearer t"},
        "command": None,
        "args": [],
        "env": {},
        "cwd": None,
        "protocol_version": None,
        "auth_source": "server_headers",
    }
    return bkmcp.ResolvedServer(**{**base, **changes})


def test_warm_key_and_resident_fingerprint_are_one_identity_with_their_own_extras():
    server = _server()
    slot = bkmcp.Slot.__new__(bkmcp.Slot)
    slot.resolved = None
    assert bkmcp.slot_fingerprint(slot, server) == server.identity()
    extras = (server.name, server.config_file, [], server.auth_source, True, False)
    assert bkmcp.warm_session_key(server, False) == server.identity(*extras)
    # what a connection is made of changes both
    for change in ({"headers": {"Authorization": "Bearer u"}}, {"url": "http://127.0.0.1:9/other"}, {"cwd": "/x"}):
        other = _server(**change)
        assert bkmcp.slot_fingerprint(slot, other) != bkmcp.slot_fingerprint(slot, server), change
        assert bkmcp.warm_session_key(other, False) != bkmcp.warm_session_key(server, False), change
    # what only the warm process's commands differ by changes the warm key alone (a resident slot is one row)
    for change in ({"name": "t"}, {"inherited_env": {"LANG": "C"}}, {"child_output_in_errors": False}):
        other = _server(**change)
        assert bkmcp.slot_fingerprint(slot, other) == bkmcp.slot_fingerprint(slot, server), change
        assert bkmcp.warm_session_key(other, False) != bkmcp.warm_session_key(server, False), change
    assert bkmcp.warm_session_key(server, True) != bkmcp.warm_session_key(server, False)
    # a value from a non-UTF-8 environment (surrogate escapes) is hashed, not a crash
    assert bkmcp.warm_session_key(_server(env={"X": "\udcff"}), False) != bkmcp.warm_session_key(server, False)


def test_no_second_hash_of_a_resolved_server():
    """Only ``ResolvedServer.identity`` lists a server's fields into a hash."""
    assert re.findall(r"sorted\(\w+\.headers\.items\(\)\)", SOURCE) == ["sorted(self.headers.items())"]
    assert "def _fingerprint" not in SOURCE


# -- a resident slot's resolution, and a user's credential chosen once per command (issue 37 item 3) ---------------


def test_a_slots_resolution_is_a_record_with_named_fields():
    server = _server()
    slot = bkmcp.Slot.__new__(bkmcp.Slot)
    slot.resolved = bkmcp.SlotResolution(row=None, credential={}, server=server, fingerprint="kept")  # type: ignore[arg-type]
    assert bkmcp.slot_fingerprint(slot, server) == "kept"  # the kept fingerprint of this very server
    assert bkmcp.slot_fingerprint(slot, _server()) == server.identity()  # another object: computed
    assert re.findall(r"\bresolved\[\d\]|\bkept\[[23]\]", SOURCE) == []  # no positional reading of it anywhere


def test_every_resident_action_chooses_a_credential_through_the_commands_choice(tmp_path, monkeypatch):
    """``list_servers`` included: the resident resolves a row only with the credential its command chose
    (``SessionPool.choose_credential``, kept in the command's ``chosen``), never letting ``resolve_registry_server``
    choose one of its own."""
    import json as json_module

    from tests.helpers import run_bkmcp
    from tests.integration.resident_harness import http_row, write_registry

    chosen_by_the_library = []
    real = bkmcp.resolve_registry_server

    def resolve(row, **kw):
        if kw.get("credential") is None:
            chosen_by_the_library.append(row.name)
        return real(row, **kw)

    monkeypatch.setattr(bkmcp, "resolve_registry_server", resolve)
    reg = tmp_path / "r.db"
    write_registry(
        str(reg), [http_row("pub", "http://127.0.0.1:9/mcp", headers={"X-K": "${user.k}"})], {"pub": {"k": "v"}}
    )
    lines = [
        {"command": "invoke", "task_id": "a", "params": {"action": "list_servers"}},
        {"command": "invoke", "task_id": "b", "params": {"action": "list_servers"}, "user": {"userId": "u1"}},
    ]
    res = run_bkmcp("--resident", "--registry", str(reg), stdin="".join(json_module.dumps(x) + "\n" for x in lines))
    answers = [json_module.loads(x) for x in res.stdout.splitlines()]
    assert [a["task_id"] for a in answers if a.get("success")] == ["a", "b"], res.stdout + res.stderr
    assert [s["status"] for s in answers[0]["result"]["servers"]] == ["disconnected"]  # resolved, not failed
    assert chosen_by_the_library == []


# -- a Deadline and an OpContext built whole (issue 37 item 3) ----------------------------------------------------


def test_deadline_and_opcontext_are_built_whole():
    """The warm client's interrupt is given to the ``Deadline`` and the warm hooks to the ``OpContext`` when they
    are made; nothing attaches them afterwards."""
    interrupt = bkmcp.Interrupt()
    deadline = bkmcp.Deadline(5.0, interrupt=interrupt)
    assert deadline.interrupt is interrupt and bkmcp.Deadline(5.0).interrupt is None
    interrupt.fire()
    with pytest.raises(KeyboardInterrupt):
        deadline.remaining()
    assert re.findall(r"\w+\.interrupt\s*=(?!=)", SOURCE) == ["self.interrupt ="]  # in Deadline.__init__ only
    assert re.findall(r"\bctx\.(?:sessions|on_request)\s*=(?!=)", SOURCE) == []


# -- a resident command's one Deadline (issue 37 item 3) ----------------------------------------------------------


def test_a_resident_command_gets_one_deadline_when_it_is_parsed_and_every_step_asks_it():
    params = b'"params":{"action":"call_tool","name":"x","timeout_ms":1500}'
    call = b'{"task_id":"t","command":"invoke","user":{"userId":"u"},' + params + b"}"
    command = bkmcp.parse_command(call, 60.0)
    assert command.deadline.seconds == 1.5 and 0 < command.deadline.left() <= 1.5
    listing = bkmcp.parse_command(b'{"task_id":"u","command":"invoke","params":{"action":"list_servers"}}', 7.0)
    assert listing.deadline.seconds == 7.0  # no timeout_ms: the resident's --timeout
    assert "def time_left" not in SOURCE and "_time_left" not in SOURCE
    assert re.findall(r"time\.monotonic\(\)\s*-\s*\w+\.(?:received|start)\b", SOURCE) == []
    assert re.findall(r"\bDeadline\(time_left", SOURCE) == []


# -- the Transport seam -------------------------------------------------------------------------------------------

SEAM = {"kind", "has_sessions", "shared_stream", "responses", "stdio", "alive", "attach", "send", "failure"}
SEAM |= {"timeout_error", "stop_requests", "close_idle_connections", "end_session", "close", "listen"}
STDIO_ONLY = {"pid", "exit_status", "restart_if_exited", "stderr_tail", "stderr_position", "mark_started"}
STDIO_ONLY |= {"stdout_skipped", "stdout_position", "unread_input", "probe_begins", "probe_ends", "start"}


def _members(cls: type) -> set[str]:
    return {name for name in [*vars(cls), *vars(cls).get("__annotations__", {})] if not name.startswith("__")}


def test_the_transport_seam_answers_only_what_every_transport_can():
    """Issue 37 item 3: the seam holds what every transport answers; what only a child process can (its pid, its
    stderr and skipped stdout, the probe window, a restart) is the stdio part, ``Transport.stdio``, which HTTP does
    not have (None) — before, HTTP answered those eleven questions with "nothing"."""
    assert _members(bkmcp.Transport) == SEAM
    assert _members(bkmcp.StdioPart) == STDIO_ONLY
    assert [name for name in sorted(STDIO_ONLY) if hasattr(bkmcp.HttpTransport, name)] == []
    assert bkmcp.HttpTransport.stdio is None
    server = bkmcp.ResolvedServer(
        name="s", type="stdio", config_file="/c", url=None, headers={}, command="x", args=[], env={}, cwd=None,
        protocol_version=None, auth_source="none",
    )  # fmt: skip
    transport = bkmcp.StdioTransport(server, insecure=False, log=bkmcp.Log(io.StringIO()))
    try:
        assert transport.stdio is transport and all(hasattr(transport, name) for name in STDIO_ONLY)
        assert transport.pid is None and transport.stderr_tail() == [] and not transport.restart_if_exited()
    finally:
        transport.close()
