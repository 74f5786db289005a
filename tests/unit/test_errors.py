"""Section 1: the error tree, its stable codes and exit statuses (docs/contract.md §7), and their documentation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import bkmcp
from tests.helpers import run_bkmcp

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"

SPEC_LOCAL = {
    "usage_error",
    "invalid_mcp_config",
    "mcp_config_not_found",
    "mcp_server_not_found",
    "missing_environment_variable",
    "mcp_auth_conflict",
    "invalid_mcp_arguments",
    "unsupported_option",
    "mcp_tool_not_found",
    "invalid_jq_expression",
    "jq_unavailable",
    "mcp_prompt_not_found",
    "mcp_skill_not_found",
    "blob_write_error",
    "out_needs_one_blob",
}
SPEC_REMOTE = {
    "mcp_auth_required",
    "mcp_permission_denied",
    "mcp_connection_error",
    "mcp_timeout",
    "mcp_protocol_error",
    "mcp_discovery_incomplete",
    "mcp_tool_error",
    "mcp_capability_unsupported",
    "mcp_task_failed",
    "mcp_task_cancelled",
    "mcp_task_running",
    "mcp_task_expired",
    "mcp_resource_not_found",
    "input_required",  # docs/contract.md §5: a question no answer was given for (issue 39)
    "jq_error",
    "blob_too_large",
    "skill_unverified",
}
# docs/contract.md §7: Ctrl-C once a request was sent (issue 17 item 2): exit 130, the envelope on stdout
SPEC_INTERRUPTED = {"mcp_cancelled"}
# docs/contract.md §11.2: the resident mode's codes besides the CLI's (resource_limit happens remotely: a child start)
RESIDENT_LOCAL = {
    "invalid_command",
    "unknown_action",
    "input_resume_invalid",
    "input_pending_limit",
    "mcp_task_unknown",
    "duplicate_task_id",
    "mcp_credentials_missing",
    "mcp_server_disabled",
    "registry_error",
}
RESIDENT_REMOTE = {"resource_limit"}


def _doc_rows() -> dict[str, str]:
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*`([a-z_]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} documented twice"
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_code_is_unique():
    codes = [cls.code for cls in bkmcp.error_classes()]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)


def test_every_spec_code_has_a_class_with_the_right_exit_status():
    by_code = {cls.code: cls for cls in bkmcp.error_classes()}
    for code in SPEC_LOCAL:
        assert by_code[code].exit_status == 1, code
        assert not issubclass(by_code[code], bkmcp.RemoteError), code
    for code in SPEC_REMOTE:
        assert by_code[code].exit_status == 2, code
        assert issubclass(by_code[code], bkmcp.RemoteError), code
    for code in SPEC_INTERRUPTED:
        assert by_code[code].exit_status == 130, code
        assert issubclass(by_code[code], bkmcp.RemoteError), code
    for code in RESIDENT_LOCAL:
        assert by_code[code].exit_status == 1, code
    for code in RESIDENT_REMOTE:
        assert issubclass(by_code[code], bkmcp.RemoteError), code
    assert set(by_code) == (
        SPEC_LOCAL | SPEC_REMOTE | SPEC_INTERRUPTED | RESIDENT_LOCAL | RESIDENT_REMOTE | {"internal_error"}
    )


def test_every_code_is_documented_with_its_exit_status():
    rows = _doc_rows()
    for cls in bkmcp.error_classes():
        assert cls.code in rows, f"{cls.code} missing from docs/errors.md"
        if cls.code == "internal_error":
            assert rows[cls.code] == "1 or 2"
        else:
            assert rows[cls.code] == str(cls.exit_status), cls.code
    assert set(rows) == {cls.code for cls in bkmcp.error_classes()}, "docs/errors.md documents unknown codes"


def test_module_docstring_draws_every_class():
    for cls in bkmcp.error_classes():
        assert cls.__name__ in bkmcp.__doc__, cls.__name__
        assert cls.code in bkmcp.__doc__, cls.code


def test_subclasses_only_set_attributes():
    for cls in bkmcp.error_classes():
        own = {k for k in vars(cls) if not k.startswith("__")}
        assert own <= {"code", "exit_status"}, (cls.__name__, own)


def test_error_object_has_code_message_hint_and_details():
    err = bkmcp.MissingEnvironmentVariableError("msg", hint="do x", details={"variable": "X"})
    assert err.error_object() == {
        "code": "missing_environment_variable",
        "message": "msg",
        "hint": "do x",
        "variable": "X",
    }
    assert bkmcp.UsageError("m").error_object() == {"code": "usage_error", "message": "m"}


def test_an_error_is_a_value_with_declared_fields_and_copy_changes_a_new_one():
    fields = {"remedy", "notes", "what", "budget", "cause", "request_sent", "http_status", "http_message"}
    fields |= {"session_lost", "hint", "data", "details"}
    plain = bkmcp.ProtocolError("m")
    assert fields <= set(vars(plain)) and set(bkmcp.BkmcpError._FIELDS) == fields  # declared, with defaults
    assert (plain.request_sent, plain.http_status, plain.session_lost, plain.remedy) == (None, None, False, None)
    try:
        raise bkmcp.ProtocolError("m", details={"a": 1}, http_status=500, request_sent=True)
    except bkmcp.ProtocolError as exc:
        raised = exc
    copy = raised.copy(details={**raised.details, "outcome": "unknown"}, notes=("check first",))
    assert type(copy) is bkmcp.ProtocolError and copy is not raised and copy.__traceback__ is None
    assert (copy.http_status, copy.request_sent, copy.details) == (500, True, {"a": 1, "outcome": "unknown"})
    assert copy.error_object()["hint"] == "check first"
    assert raised.details == {"a": 1} and raised.notes == ()  # the raised one is never changed
    assert copy.copy().details is not copy.details


def test_request_was_sent_counts_not_known_as_sent():
    assert bkmcp.request_was_sent(bkmcp.ConnectionFailedError("m"))
    assert bkmcp.request_was_sent(bkmcp.ConnectionFailedError("m", request_sent=True))
    assert not bkmcp.request_was_sent(bkmcp.ConnectionFailedError("m", request_sent=False))
    assert bkmcp.request_was_sent(ValueError("x"))


def test_a_quoted_cause_is_worded_by_each_front_end_from_its_fields():
    page = bkmcp.budget_error("no answer from http://h/mcp", 2.0)
    error = bkmcp.DiscoveryIncompleteError("discovery failed at page 2: {cause} (after 1 page)", cause=page)
    assert error.message == "discovery failed at page 2: no answer from http://h/mcp within 2s (after 1 page)"
    assert error.details["cause"]["message"] == page.message
    cli = bkmcp.word_for_cli(error, "s")
    assert cli.message == "discovery failed at page 2: no answer from http://h/mcp within --timeout 2s (after 1 page)"
    assert cli.details["cause"]["message"] == "no answer from http://h/mcp within --timeout 2s"
    assert cli.cause is not None and cli.cause.hint.startswith("raise --timeout")
    assert error.message.endswith("within 2s (after 1 page)")  # worded copies: the library error stays neutral


def test_the_cli_words_remedies_and_the_platform_drops_them():
    tls = bkmcp.ConnectionFailedError("TLS failed", hint="check the certificate", remedy="tls", notes=("n",))
    worded = bkmcp.word_for_cli(tls, "s")
    assert worded.error_object()["hint"] == (
        "check the certificate; --insecure skips verification (only for servers you trust); n"
    )
    assert worded.remedy is None and bkmcp.word_for_cli(worded, "s").error_object() == worded.error_object()
    late = bkmcp.budget_error("no answer from x", 1.5, request_sent=True, details={"outcome": "unknown"})
    platform = bkmcp.platform_error(late, server="pub", timeout=1.5)
    assert platform.message == "no answer on server 'pub' within 1500 ms; the call was sent and its outcome is unknown"
    assert platform.full_hint is None and "hint" not in platform.error_object()
    assert late.message == "no answer from x within 1.5s" and late.hint is not None


@pytest.mark.parametrize("cls", bkmcp.error_classes(), ids=lambda c: c.code)
def test_each_error_reaches_the_right_stream_and_exit_status(cls, monkeypatch, write_config, tmp_path):
    """contract §7: local failures on stderr (exit 1), remote ones on stdout (exit 2, or 130 for mcp_cancelled);
    one envelope, no traceback."""
    path = write_config({"mcpServers": {"s": {"type": "http", "url": "https://example.invalid/mcp"}}})

    def boom(*a, **k):
        raise cls("it broke", hint="a hint", data={"stage": "x"} if cls.exit_status != 1 else None)

    monkeypatch.setattr(bkmcp, "run_tools", boom)
    res = run_bkmcp("--config", str(path), "s", "--tools")
    assert res.exit_status == cls.exit_status
    assert "Traceback" not in res.stdout + res.stderr
    if cls.exit_status != 1:
        env = bkmcp.parse_json(res.stdout)
        assert env["ok"] is False and env["error"]["code"] == cls.code and env["data"] == {"stage": "x"}
        assert res.stderr == ""
    else:
        assert res.stdout == ""
        assert res.error_code == cls.code
        assert res.json["error"]["hint"] == "a hint"


def test_small_dataclass_matches_the_stdlib_semantics_bkmcp_relies_on() -> None:
    """Section 2's ``dataclass`` (start-up: no inspect import): init, defaults, factories, eq, repr, frozen."""
    token = bkmcp.ToolToken("n", "v", True, "--n=v")
    assert token == bkmcp.ToolToken(name="n", value="v", has_equals=True, raw="--n=v")
    assert token != bkmcp.ToolToken("n", "w", True, "--n=w")
    assert hash(token) == hash(bkmcp.ToolToken("n", "v", True, "--n=v"))
    assert repr(token) == "ToolToken(name='n', value='v', has_equals=True, raw='--n=v')"
    with pytest.raises(AttributeError):
        token.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        bkmcp.ToolToken("n")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        bkmcp.ToolToken("n", "v", True, "--n=v", extra=1)  # type: ignore[call-arg]
    first, second = bkmcp.Invocation(), bkmcp.Invocation()
    assert first.tool_tokens == [] and first.tool_tokens is not second.tool_tokens  # default_factory per instance
    first.server = "s"  # non-frozen classes are mutable
    assert first != second
    with pytest.raises(TypeError):
        hash(first)


def _records() -> tuple[type, type]:
    """Fresh classes through section 2's ``dataclass`` (its real, non-TYPE_CHECKING definition)."""

    @bkmcp.dataclass(slots=True)
    class Slotted:
        name: str
        kind: str = "string"
        notes: list = bkmcp.field(default_factory=list)

        @property
        def option(self) -> str:
            return f"--{self.name}"

    @bkmcp.dataclass(frozen=True)
    class Frozen:
        a: int
        b: int = 2

    return Slotted, Frozen


def test_small_dataclass_compiles_its_init_after_a_few_instances_with_the_same_semantics() -> None:
    """The generic ``__init__`` (free at import) and the compiled one a busy class gets behave the same:
    positional and keyword arguments, defaults, a fresh ``default_factory`` value per instance, TypeErrors,
    frozen stays read-only, slots leave no ``__dict__``."""
    slotted, frozen = _records()
    generic_init = slotted.__init__
    made = [slotted("a"), slotted("b", "integer"), slotted(name="c", notes=[1])]
    for _ in range(10):
        made.append(slotted("x", kind="boolean"))
    assert slotted.__init__ is not generic_init  # compiled by now
    after = [slotted("a"), slotted("b", "integer"), slotted(name="c", notes=[1])]
    assert made[:3] == after and made[3] == slotted("x", "boolean")
    assert repr(after[1]).endswith(".Slotted(name='b', kind='integer', notes=[])")
    assert after[0].notes == [] and after[0].notes is not slotted("z").notes
    assert (
        after[0].option == "--a"
        and not hasattr(after[0], "__dict__")
        and slotted.__slots__ == ("name", "kind", "notes")
    )
    with pytest.raises(AttributeError):
        after[0].other = 1
    for args, kwargs in [
        ((), {}),
        (("a", "b", [], "extra"), {}),
        (("a",), {"unknown": 1}),
        (("a",), {"name": "again"}),
    ]:
        with pytest.raises(TypeError):
            slotted(*args, **kwargs)
    frozen_made = [frozen(i) for i in range(12)]
    assert frozen_made[11] == frozen(11, 2) and hash(frozen(1)) == hash(frozen(a=1, b=2))
    with pytest.raises(AttributeError):
        frozen_made[11].a = 5
