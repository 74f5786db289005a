"""A task that asks for input (docs/contract.md §5 "Tasks", "A server that asks"), against the mock's "job" tools
with ``x-mock-end: "input"``: the 2026-07-28 extension's questions come in ``tasks/get`` views (``inputRequests``)
and are answered with ``tasks/update`` (``inputResponses``, each key once however many polls show it); a
2025-11-25 task's come as ``elicitation/create`` on the ``tasks/result`` stream and are answered there. Headless,
with no answer at hand, nothing is made up and nothing is declined: the wait ends as ``input_required`` with the
questions and the task's handle, and a later command (``--task-result ID --wait --input …``) answers it. What the
server received is asserted: one ``tools/call``, the exact ``inputResponses`` keys once each, never ``decline``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, TASK_CAPABILITIES, MockServer, mock_tool
from tests.helpers import ROOT, http_server, run_bkmcp, write_mcp_json
from tests.integration.test_warm_inprocess import Place, serving  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration]

LEGACY, MODERN = "2025-11-25", "2026-07-28"
TEXT = {"text": {"type": "string"}}
OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
    "required": ["name", "size"],
}


def job(name: str, after_ms: int = 50, **options: object) -> dict:
    tool = mock_tool(name, "job", TEXT, poll_ms=40, end="input", after_ms=after_ms, **options)
    tool["execution"] = {"taskSupport": "optional"}
    return tool


# "twice": two rounds (confirm, then name+size), and after each answered round two polls still show it as it was
SAMPLING = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 8}}
TOOLS = [
    job("asking"),
    job("at_once", after_ms=0),
    job("twice", rounds=[{"confirm": OK}, {"name": PROFILE, "size": PROFILE}], lag_polls=2),
    job("forever", rounds=[{f"q{i}": OK} for i in range(11)]),  # eleven rounds: more than bkmcp answers
    job("sampling", rounds=[{"llm": SAMPLING}]),
    job("slow_after", then_ms=60000),  # answered, it works a minute more
]


def without_meta(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "_meta"}


class Cli:
    """bkmcp against one mock, with a private state directory (the task store)."""

    def __init__(self, tmp_path: Path, srv: MockServer, version: str) -> None:
        self.srv = srv
        entry = {"type": "http", "url": srv.url, "protocolVersion": version}
        self.config = write_mcp_json(tmp_path / "mcp.json", {"m": entry})
        self.state = tmp_path / "state"
        self.env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(self.state)}

    def __call__(self, *args: str):
        return run_bkmcp("--config", str(self.config), "m", *args, env=self.env)

    def process(self, *args: str) -> tuple[int, dict]:
        """A second process (not this interpreter): what a later command in a shell is."""
        env = {**self.env, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"}
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(self.config), "m", *args]
        done = subprocess.run(argv, capture_output=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
        return done.returncode, json.loads(done.stdout or b"null")

    def params(self, method: str) -> list[dict]:
        """What each ``method`` request carried, but its ``_meta`` (the era's own)."""
        return [without_meta(json.loads(e["body"])["params"]) for e in self.srv.requests(method)]

    def never_declined(self) -> None:
        bodies = [e["body"] for e in self.srv.requests()]
        assert not any('"decline"' in body for body in bodies)
        assert all(r.get("result", {}).get("action") != "decline" for r in self.srv.client_responses)


@pytest.fixture
def server(http_mock):
    return http_mock({"tools": TOOLS, "capabilities": TASK_CAPABILITIES})


@pytest.fixture
def modern(tmp_path, server):
    return Cli(tmp_path, server, MODERN)


@pytest.fixture
def legacy(tmp_path, server):
    return Cli(tmp_path, server, LEGACY)


def test_a_modern_task_asking_once_is_answered_with_tasks_update(modern):
    result = modern("-v", "asking", "--text", "x", "--task", "--input", "ok=true")
    assert result.exit_status == 0, result.stdout + result.stderr
    answer = {"action": "accept", "content": {"ok": True}}
    text = result.json["data"]["result"]["content"][0]["text"]
    assert text == 'job done: {"text":"x"} answers: ' + json.dumps({"confirm": answer}, separators=(",", ":"))
    assert len(modern.params("tools/call")) == 1
    (update,) = modern.srv.requests("tasks/update")
    params = json.loads(update["body"])["params"]
    assert params["inputResponses"] == {"confirm": answer}
    assert update["headers"]["mcp-name"] == params["taskId"]  # routed by the task id, as tasks/get is
    assert not modern.srv.requests("tasks/cancel") and not modern.srv.requests("tasks/result")
    modern.never_declined()


def test_keys_are_answered_once_across_polls_before_the_server_caught_up(modern):
    """Two rounds; after each tasks/update the server shows the answered round twice more (it has not caught up):
    each key is sent once, in the round that asked it, and the wait goes on to the result."""
    args = ("twice", "--text", "x", "--task", "--input", "ok=false", "--input", "name=Ada", "--input", "size=3")
    result = modern(*args)
    assert result.exit_status == 0, result.stdout + result.stderr
    sent = [p["inputResponses"] for p in modern.params("tasks/update")]
    assert sent == [
        {"confirm": {"action": "accept", "content": {"ok": False}}},
        {
            "name": {"action": "accept", "content": {"name": "Ada", "size": 3}},
            "size": {"action": "accept", "content": {"name": "Ada", "size": 3}},
        },
    ]
    assert len(modern.params("tasks/get")) >= 2 + 2 + 2  # the stale views were seen, and not answered again
    assert len(modern.params("tools/call")) == 1
    modern.never_declined()


def test_headless_a_modern_task_waits_with_its_questions_and_a_second_process_answers_it(modern):
    first = modern("asking", "--text", "x", "--task")
    assert (first.exit_status, first.error_code) == (2, "input_required"), first.stdout + first.stderr
    data = first.json["data"]
    task_id = data["task"]["mcp_task_id"]
    assert data["task"]["status"] == "input_required"
    assert data["input_requests"]["confirm"]["requested_schema"] == OK
    assert data["input_requests"]["confirm"]["message"] == "Question confirm?"
    assert data["commands"]["result"].endswith(f"--task-result {task_id} --wait")
    assert f"--task-result {task_id} --wait --input FIELD=VALUE" in first.json["error"]["hint"]
    assert not modern.srv.requests("tasks/update") and not modern.srv.requests("tasks/cancel")
    stored = json.loads((modern.state / "bkmcp" / "tasks.json").read_text())["tasks"]
    assert [(t["mcp_task_id"], t["status"]) for t in stored] == [(task_id, "input_required")]
    status, envelope = modern.process("--task-result", task_id, "--wait", "--input", "ok=true")
    assert status == 0, envelope
    assert envelope["data"]["task"]["status"] == "completed"
    assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"x"} answers:')
    (update,) = modern.params("tasks/update")
    assert update == {"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}}}
    assert len(modern.params("tools/call")) == 1  # the later command never calls again
    modern.never_declined()


def test_a_task_that_keeps_asking_is_answered_at_most_ten_rounds(modern):
    result = modern("forever", "--text", "x", "--task", "--input", "ok=true")
    assert (result.exit_status, result.error_code) == (2, "mcp_protocol_error"), result.stdout + result.stderr
    assert "asked for input 10 times and still asks" in result.json["error"]["message"]
    assert result.json["data"]["task"]["status"] == "input_required"
    assert [list(p["inputResponses"]) for p in modern.params("tasks/update")] == [[f"q{i}"] for i in range(10)]
    assert not modern.srv.requests("tasks/cancel")


def test_a_task_asking_for_sampling_gets_no_made_up_answer(modern):
    result = modern("sampling", "--text", "x", "--task", "--input", "ok=true")
    assert (result.exit_status, result.error_code) == (2, "mcp_capability_unsupported"), result.stdout + result.stderr
    assert result.json["error"]["capability"] == "sampling/createMessage"
    assert result.json["data"]["task"]["status"] == "input_required"
    assert not modern.srv.requests("tasks/update")


def test_a_result_asked_without_wait_answers_the_questions_and_says_it_still_runs(modern):
    task_id = modern("at_once", "--text", "x", "--detach").json["data"]["task"]["mcp_task_id"]
    asked = modern("--task-result", task_id)  # no answers at hand: the questions, nothing sent
    assert (asked.exit_status, asked.error_code) == (2, "input_required"), asked.stdout + asked.stderr
    assert list(asked.json["data"]["input_requests"]) == ["confirm"]
    assert not modern.srv.requests("tasks/update")
    early = modern("--task-result", task_id, "--inputs", '{"ok": true}')
    assert (early.exit_status, early.error_code) == (2, "mcp_task_running"), early.stdout + early.stderr
    assert "its questions were answered (tasks/update)" in early.json["error"]["message"]
    done = modern("--task-result", task_id, "--wait")  # answered: nothing more to give
    assert done.exit_status == 0, done.stdout + done.stderr
    assert [p["inputResponses"] for p in modern.params("tasks/update")] == [
        {"confirm": {"action": "accept", "content": {"ok": True}}}
    ]
    modern.never_declined()


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_answered_a_task_that_outlasts_timeout_detaches(tmp_path, server, version):
    """Answered, the task works on past ``--timeout``: a 2025-11-25 ``tasks/result`` (which blocks) and the
    2026-07-28 polls both end as ``mcp_task_running``, the task left running and nothing cancelled."""
    cli = Cli(tmp_path, server, version)
    result = cli("slow_after", "--text", "x", "--task", "--input", "ok=true", "--timeout", "1s")
    assert (result.exit_status, result.error_code) == (2, "mcp_task_running"), result.stdout + result.stderr
    task_id = result.json["data"]["task"]["mcp_task_id"]
    assert result.json["data"]["commands"]["result"].endswith(f"--task-result {task_id} --wait")
    assert not server.requests("tasks/cancel") and len(server.requests("tools/call")) == 1
    if version == LEGACY:
        assert len(server.requests("tasks/result")) == 1
        assert [r["result"] for r in server.client_responses] == [{"action": "accept", "content": {"ok": True}}]
    else:
        assert len(server.requests("tasks/update")) == 1


def test_answers_are_taken_by_task_result(tmp_path):
    """``--task-result ID --input …`` passes the usage checks (the server is then unreachable)."""
    config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    result = run_bkmcp("--config", str(config), "m", "--task-result", "t", "--wait", "--input", "ok=true",
                       env={"HOME": str(tmp_path)})  # fmt: skip
    assert result.error_code == "mcp_connection_error", result.stdout + result.stderr


def test_a_legacy_task_question_comes_on_tasks_result_and_is_answered_there(legacy):
    result = legacy("-v", "asking", "--text", "x", "--task", "--input", "ok=true")
    assert result.exit_status == 0, result.stdout + result.stderr
    assert result.json["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"x"} answers:')
    (call,) = legacy.params("tools/call")
    assert call["task"] == {}
    assert len(legacy.params("tasks/result")) == 1 and not legacy.srv.requests("tasks/update")
    (answered,) = legacy.srv.client_responses
    assert answered["result"] == {"action": "accept", "content": {"ok": True}}
    (init,) = legacy.params("initialize")
    assert init["capabilities"] == {"elicitation": {"form": {}}}  # answers at hand: elicitation declared
    legacy.never_declined()


def test_headless_a_legacy_task_question_is_answered_cancel_and_reported(legacy):
    result = legacy("asking", "--text", "x", "--task")
    assert (result.exit_status, result.error_code) == (2, "input_required"), result.stdout + result.stderr
    data = result.json["data"]
    assert data["input_requests"]["elicitation-1"]["requested_schema"] == OK
    assert data["task"]["status"] == "completed" and "result" in data  # the task went on with the cancel
    assert "commands" not in data  # nothing is left to answer: the same command again, with --input
    (answered,) = legacy.srv.client_responses
    assert answered["result"] == {"action": "cancel"}
    (init,) = legacy.params("initialize")
    assert init["capabilities"] == {}  # headless: nothing declared (the mock asks anyway)
    assert len(legacy.params("tools/call")) == 1
    legacy.never_declined()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--task-status", "x", "--input", "ok=true"), "--resume or --task-result"),
        (("--tasks", "--inputs", "{}"), "--resume or --task-result"),
        (("--task-cancel", "x", "--input-action", "cancel"), "--resume or --task-result"),
    ],
)
def test_answers_go_with_a_task_result_only(tmp_path, args, message):
    config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})
    result = run_bkmcp("--config", str(config), "m", *args, env={"HOME": str(tmp_path)})
    assert (result.exit_status, result.error_code) == (1, "usage_error"), result.stderr
    assert message in result.json["error"]["message"]


@pytest.fixture
def warm(serving):  # noqa: F811
    scenario = {"tools": [*DEFAULT_TOOLS, *TOOLS], "capabilities": TASK_CAPABILITIES}
    return lambda version: serving(scenario, protocolVersion=version)


def test_warm_a_modern_task_waits_headless_and_the_next_warm_command_answers_it(warm):
    place = warm(MODERN)
    status, out, err = place.main("m", "asking", "--text", "x", "--task", "--keep-alive")
    envelope = json.loads(out)
    assert (status, envelope["error"]["code"]) == (2, "input_required"), out + err
    task_id = envelope["data"]["task"]["mcp_task_id"]
    status, out, err = place.main("m", "--task-result", task_id, "--wait", "--input", "ok=true", "--keep-alive")
    assert status == 0, out + err
    sent = [without_meta(json.loads(e["body"])["params"]) for e in place.srv.requests("tasks/update")]
    assert sent == [{"taskId": task_id, "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}}}]
    assert len(place.srv.requests("tools/call")) == 1


def test_warm_a_legacy_task_is_answered_from_the_commands_answers(warm):
    place = warm(LEGACY)
    status, out, err = place.main("m", "asking", "--text", "x", "--task", "--input", "ok=true", "--keep-alive")
    assert status == 0, out + err
    assert json.loads(out)["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"x"} answers:')
    assert [r["result"] for r in place.srv.client_responses] == [{"action": "accept", "content": {"ok": True}}]
    assert len(place.srv.requests("tasks/result")) == 1 and len(place.srv.requests("tools/call")) == 1


class Counting(bkmcp.InputSource):
    """An answering source (a person, a resident's platform) that counts each time a question is put to it."""

    capabilities = {"elicitation": {"form": {}}}

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    def answer(self, key, request, several):
        self.asked.append(key)
        fields = request["params"]["requestedSchema"]["properties"]
        content = {name: {"ok": True, "name": "Ada", "size": 3}[name] for name in fields}
        return bkmcp.InputAnswer({"action": "accept", "content": content})


def _run_call(srv: MockServer, name: str, source: bkmcp.InputSource | None) -> dict:
    ctx = bkmcp.OpContext(bkmcp.Deadline(30), bkmcp.Log(io.StringIO()), input=source)
    server = http_server(srv.url, protocol_version=MODERN)
    choice = bkmcp.TaskChoice(wanted=True)
    return bkmcp.run_call(server, ctx, name, insecure=False, prepare=lambda _tool: {"text": "x"}, task=choice)


def test_a_question_is_put_once_however_many_polls_show_it(server):
    """Through the flow any front end uses (``run_call`` -> ``await_task``, answers from ``ctx.input``): the
    stale polls show answered keys again, and the source is asked each key once."""
    source = Counting()
    data = _run_call(server, "twice", source)
    assert data["result"]["content"][0]["text"].startswith('job done: {"text":"x"} answers:')
    assert source.asked == ["confirm", "name", "size"]
    assert len(server.requests("tasks/update")) == 2


def test_with_nobody_to_answer_the_wait_ends_input_required_and_nothing_is_sent(server):
    with pytest.raises(bkmcp.InputRequiredError) as caught:
        _run_call(server, "asking", None)
    assert caught.value.data["task"]["status"] == "input_required"
    assert list(caught.value.data["input_requests"]) == ["confirm"]
    assert not server.requests("tasks/update") and not server.requests("tasks/cancel")


def test_warm_stdio_tasks_ask_and_the_background_process_answers(tmp_path):
    """A stdio server's task lives in its process, which the background process keeps (``--keep-alive``): a legacy
    task's question on tasks/result is answered from the command's ``--input``; a 2026-07-28 task left waiting by a
    headless command is answered by the next command's ``--task-result ID --wait --input`` in the same process."""
    from tests.helpers import KeepAliveCommands, stdio_mock_entry, stdio_mock_log

    servers, logs = {}, {}
    for name, version in (("old", LEGACY), ("new", MODERN)):
        (tmp_path / name).mkdir()
        servers[name], logs[name] = stdio_mock_entry(
            tmp_path / name, {"tools": TOOLS, "capabilities": TASK_CAPABILITIES}, version
        )
    commands = KeepAliveCommands(tmp_path, write_mcp_json(tmp_path / "mcp.json", servers))

    def run(*args: str) -> tuple[int, dict]:
        done = commands.run(*args, stdin=subprocess.DEVNULL)
        return done.returncode, json.loads(done.stdout or b"null")

    try:
        status, envelope = run("old", "asking", "--text", "x", "--task", "--input", "ok=true", "--keep-alive")
        assert status == 0, envelope
        assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"x"} answers:')
        status, envelope = run("new", "asking", "--text", "y", "--task", "--keep-alive")
        assert (status, envelope["error"]["code"]) == (2, "input_required"), envelope
        task_id = envelope["data"]["task"]["mcp_task_id"]
        assert envelope["data"]["commands"]["result"].endswith(f"--task-result {task_id} --wait --keep-alive")
        status, envelope = run("new", "--task-result", task_id, "--wait", "--input", "ok=false", "--keep-alive")
        assert status == 0, envelope
        assert envelope["data"]["result"]["content"][0]["text"].startswith('job done: {"text":"y"} answers:')
    finally:
        commands.stop()
    old = stdio_mock_log(logs["old"])
    answered = [e["json"] for e in old if "result" in (e.get("json") or {}) and "method" not in e["json"]]
    assert [a["result"] for a in answered] == [{"action": "accept", "content": {"ok": True}}]
    new = stdio_mock_log(logs["new"])
    assert len([e for e in new if e.get("rpc_method") == "tools/call"]) == 1
    updates = [e["json"]["params"]["inputResponses"] for e in new if e.get("rpc_method") == "tasks/update"]
    assert updates == [{"confirm": {"action": "accept", "content": {"ok": False}}}]


def test_on_a_terminal_each_question_is_asked_once_though_polls_show_it_again(tmp_path, server):
    """A person on a terminal (a real pty) answers a 2026-07-28 task's two rounds; the polls that still show an
    answered round (the server not caught up) ask nothing: each question is on the terminal once, and the answers
    typed ahead are exactly enough (a second asking would wait for more)."""
    from tests.integration.test_input_required_interop import on_a_terminal

    cli = Cli(tmp_path, server, MODERN)
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(cli.config), "m", "twice", "--text", "x", "--task"]
    typed = b"true\ny\n" + b"Ada\n3\ny\n" * 2  # confirm's ok; then name's and size's forms (each: name, size)
    env = {**os.environ, **cli.env, "PYTHONDONTWRITEBYTECODE": "1"}
    status, out, terminal = on_a_terminal(argv, typed, env)
    shown = terminal.decode(errors="replace")
    assert status == 0, out + shown
    assert [shown.count(f"The server asks: Question {key}?") for key in ("confirm", "name", "size")] == [1, 1, 1]
    sent = [p["inputResponses"] for p in cli.params("tasks/update")]
    assert sent[0] == {"confirm": {"action": "accept", "content": {"ok": True}}}
    assert sent[1]["name"] == sent[1]["size"] == {"action": "accept", "content": {"name": "Ada", "size": 3}}
    assert len(sent) == 2 and len(cli.params("tools/call")) == 1
