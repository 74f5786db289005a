"""Answers to a server's questions, the pure parts (docs/contract.md §2, §5): the ``--input``/``--inputs``/
``--input-action``/``--resume`` options, an input_required round read, answers typed by the requested schema with
SEP-1034 defaults and SEP-1330 choices, what is declared, and the session core handing ``elicitation/create`` over.

Seed row R04.
"""

from __future__ import annotations

import io

import pytest

import bkmcp
from bkmcp import (
    ELICITATION_FORM,
    ELICITATION_FORM_AND_URL,
    Asked,
    ClientSession,
    CommandLineInput,
    InputRound,
    Message,
    ProtocolError,
    TerminalQuestions,
    UsageError,
    check_invocation,
    choices_of,
    era_rules,
    parse_argv,
    parse_input_round,
)

FORM = {
    "method": "elicitation/create",
    "params": {
        "message": "Who?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            },
            "required": ["age"],
        },
    },
}


def test_input_options_are_read_anywhere_and_repeatable_R04():
    inv = parse_argv(["--input", "age=3", "srv", "tool", "--flag", "x", "--input=name=Bo", "--inputs", "{}"])
    assert inv.input == [("age", "3"), ("name", "Bo")] and inv.inputs == "{}" and inv.tool == "tool"
    assert [t.name for t in inv.tool_tokens] == ["flag"]
    resume = parse_argv(["srv", "--resume", "A" * 24, "--input-action", "cancel"])
    check_invocation(resume)
    assert resume.resume == "A" * 24 and resume.input_action == "cancel"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["srv", "tool", "--input", "age"], "FIELD=VALUE"),
        (["srv", "tool", "--input", "=3"], "FIELD=VALUE"),
        (["srv", "tool", "--input-action", "accept"], "decline or cancel"),
        (["srv", "tool", "--input-action", "cancel", "--input", "a=1"], "answer, or refuse"),
        (["srv", "--tools", "--inputs", "{}"], "go with a tool call"),
        (["srv", "tool", "--inputs", "-", "--body", "-"], "cannot both read stdin"),
        (["srv", "--resume", "x" * 20, "--body", "{}"], "takes only the answers"),
        (["srv", "tool", "--resume", "x" * 20], "cannot be combined"),
    ],
)
def test_input_option_misuse_is_a_usage_error_R04(argv, said):
    with pytest.raises(UsageError, match=said):
        check_invocation(parse_argv(argv))


def test_input_option_names_are_reserved_R04():
    assert {"input", "inputs", "input-action", "resume"} <= bkmcp.RESERVED_OPTION_NAMES


@pytest.mark.parametrize(
    ("result", "said"),
    [
        ({"resultType": "input_required"}, "neither"),
        ({"resultType": "input_required", "requestState": 5}, "requestState is not a string"),
        ({"resultType": "input_required", "inputRequests": []}, "not an object"),
        ({"resultType": "input_required", "inputRequests": {"k": {"params": {}}}}, "with a method"),
        (
            {"resultType": "input_required", "inputRequests": {str(i): {"method": "x"} for i in range(33)}},
            "at most 32",
        ),
    ],
)
def test_malformed_input_round_is_a_protocol_error_R04(result, said):
    with pytest.raises(ProtocolError, match=said):
        parse_input_round("tools/call", result)


def test_input_round_keeps_the_state_string_as_received_R04():
    state = '{"b": 1,  "a": "é"}'
    got = parse_input_round("tools/call", {"resultType": "input_required", "requestState": state})
    assert got == InputRound({}, state) and got.state is state


def test_answers_typed_by_schema_with_defaults_and_capabilities_R04():
    source = CommandLineInput([("age", "41"), ("tags", '["a"]')])
    assert source.capabilities == ELICITATION_FORM
    answer = source.answer("who", FORM, False)
    assert answer.result == {"action": "accept", "content": {"age": 41, "tags": ["a"], "name": "Ada"}}
    wrong = CommandLineInput([("age", "old")]).answer("who", FORM, False)
    assert wrong.result is None and "integer" in wrong.problems[0]["message"]
    missing = CommandLineInput(inputs={}).answer("who", FORM, False)  # defaults only: age is required
    assert missing.result is None and missing.problems[0]["path"] == "$.age"
    assert CommandLineInput().capabilities == {} and CommandLineInput().answer("who", FORM, False).result is None
    assert CommandLineInput(resuming=True).capabilities == ELICITATION_FORM
    refused = CommandLineInput(action="decline").answer("who", FORM, False)
    assert refused.result == {"action": "decline"}
    sampling = CommandLineInput(inputs={}).answer("s", {"method": "sampling/createMessage"}, False)
    assert sampling.unsupported == "sampling/createMessage"


def test_inputs_keyed_by_question_when_a_round_asks_several_R04():
    source = CommandLineInput(inputs={"who": {"age": 2}, "age": 9})
    assert source.answer("who", FORM, True).result == {"action": "accept", "content": {"age": 2, "name": "Ada"}}
    assert source.answer("other", FORM, True).result == {"action": "accept", "content": {"age": 9, "name": "Ada"}}


def test_choices_of_enum_titles_one_of_and_multi_select_SEP1330():
    assert choices_of({"enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"]}) == [("p1", "Cats"), ("p2", "Dogs")]
    assert choices_of({"oneOf": [{"const": "h1", "title": "Superman"}]}) == [("h1", "Superman")]
    multi = {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}]}}
    assert choices_of(multi) == [("f1", "Tuna")] and choices_of({"type": "string"}) == []


def test_terminal_form_takes_choices_defaults_and_review_R04():
    schema = {
        "type": "object",
        "properties": {
            "pet": {"type": "string", "title": "Pet\x1b[31m", "enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"]},
            "n": {"type": "integer", "default": 3},
            "note": {"type": "string"},
        },
    }
    out = io.StringIO()
    ask = TerminalQuestions(io.StringIO("2\n\n\nd\n"), out)
    assert ask.ask_form({"message": "Hi\x07", "requestedSchema": schema}).result == {"action": "decline"}
    shown = out.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "2) Dogs" in shown and "[3]" in shown
    accepted = TerminalQuestions(io.StringIO("1\n7\nhello\ny\n"), io.StringIO()).ask_form({"requestedSchema": schema})
    assert accepted.result == {"action": "accept", "content": {"pet": "p1", "n": 7, "note": "hello"}}
    ended = TerminalQuestions(io.StringIO(""), io.StringIO()).ask_form({"requestedSchema": schema})
    assert ended.result is None  # end of input: no answer (a legacy server is then told cancel)
    url = TerminalQuestions(io.StringIO("\n"), io.StringIO()).ask_url({"url": "https://h.example/x"})
    assert url.result == {"action": "cancel"}
    assert CommandLineInput(terminal=ask).capabilities == ELICITATION_FORM_AND_URL


def test_session_core_hands_elicitation_over_and_declares_capabilities_R04():
    core = ClientSession()
    core.client_capabilities = dict(ELICITATION_FORM)
    request = core.start_request("tools/call", {"name": "t"}, era_rules("2026-07-28"))
    assert request["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == ELICITATION_FORM
    other = core.start_request("tools/call", {"name": "t"}, era_rules("2026-07-28"), {})
    assert other["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] == {}
    asked = Message("request", id="s1", method="elicitation/create", params={"message": "?"})
    assert core.receive(asked) == [Asked(asked)]
    core.ids_from(500)
    assert core.start_request("ping", None, era_rules("2025-11-25"))["id"] == 500
    assert bkmcp.build_initialize_params("2025-11-25", ELICITATION_FORM)["capabilities"] == ELICITATION_FORM


def test_terminal_form_edges_R04():
    schema = {
        "type": "object",
        "properties": {"age": {"type": "integer", "description": "in years"}},
        "required": ["age"],
    }
    out = io.StringIO()
    no = TerminalQuestions(io.StringIO("\n5\nn\n"), out).ask_form({"requestedSchema": schema})
    assert (
        no.result == {"action": "cancel"} and "an answer is required" in out.getvalue() and "in years" in out.getvalue()
    )
    wrong = TerminalQuestions(io.StringIO("x\ny\nz\n"), io.StringIO()).ask_form({"requestedSchema": schema})
    assert wrong.result is None  # three wrong values: no answer
    bounded = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}
    out = io.StringIO()
    unfit = TerminalQuestions(io.StringIO("9\n"), out).ask_form({"requestedSchema": bounded})
    assert unfit.result is None and unfit.problems and "do not fit" in out.getvalue()
    assert TerminalQuestions(io.StringIO("y\n"), io.StringIO()).ask_url({"url": "http://[x"}).result == {
        "action": "accept"
    }
    assert TerminalQuestions(io.StringIO("n\n"), io.StringIO()).ask_url({"url": "https://h"}).result == {
        "action": "decline"
    }


def test_base_input_source_answers_nothing_and_keeps_nothing_R04():
    source = bkmcp.InputSource()
    assert source.capabilities == {} and source.answer("k", FORM, False).result is None
    assert source.answer("k", {"method": "roots/list"}, False).unsupported == "roots/list"
    assert source.park("tools/call", {}, InputRound({}, "s"), "modern") == {}
    with pytest.raises(ValueError, match="cannot be typed"):
        bkmcp.type_answer({"type": "object", "properties": {"x": False}}, "x", "1")


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["srv", "tool", "--input"], "needs FIELD=VALUE"), (["srv", "tool", "--input", "--dry-run"], "needs FIELD=VALUE")],
)
def test_input_without_a_value_R04(argv, said):
    with pytest.raises(UsageError, match=said):
        parse_argv(argv)


# -- the budget stands still while a person answers (Deadline.paused) ---------------------------------------------


class _Person(io.StringIO):
    """A person who takes ``seconds`` (on the test's clock) for every line typed."""

    def __init__(self, typed: str, now: list[float], seconds: float) -> None:
        super().__init__(typed)
        self.now, self.seconds = now, seconds

    def readline(self, *args) -> str:
        self.now[0] += self.seconds
        return super().readline(*args)


def test_the_budget_stands_still_while_a_person_answers_on_the_terminal_R04():
    now = [100.0]
    deadline = bkmcp.Deadline(1.0, clock=lambda: now[0])
    person = TerminalQuestions(_Person("\n7\n\ny\n", now, 30.0), io.StringIO(), deadline)
    answer = CommandLineInput(terminal=person).answer(None, FORM, False)
    assert answer.result == {"action": "accept", "content": {"name": "Ada", "age": 7}}
    assert now[0] == 220.0 and deadline.left() == 1.0 and deadline.remaining() == 1.0  # 2 minutes, none counted
    now[0] += 0.5  # the budget runs again once the person answered
    assert deadline.left() == 0.5
    given = CommandLineInput([("age", "7")]).answer(None, FORM, False)  # answers on the command line: no person
    assert given.result is not None and deadline.left() == 0.5


def test_a_paused_deadline_waits_on_and_counts_again_after_the_pause_R04():
    now = [0.0]
    deadline = bkmcp.Deadline(1.0, clock=lambda: now[0])
    waits: list[float] = []

    class Event:
        def wait(self, timeout: float) -> bool:  # time passes as the wait asks; the person answers at the 3rd look
            waits.append(timeout)
            now[0] += timeout
            if len(waits) == 3:
                deadline.resume()
            return False

    now[0] = 0.9
    deadline.pause()
    deadline.pause()  # two questions at once share one pause
    deadline.resume()
    assert deadline.wait(Event()) is False  # spent in the end, but only after the pause and the 0.1 s left
    assert waits[:3] == [pytest.approx(0.25), pytest.approx(0.25), pytest.approx(0.25)]  # looks again while paused
    assert waits[3] == pytest.approx(0.1) and now[0] == pytest.approx(1.75)
    with pytest.raises(bkmcp.McpTimeoutError):
        deadline.remaining()


def test_a_wait_that_ran_out_waits_again_only_while_the_budget_is_paused_or_was_moved_R04():
    """``Deadline.next_wait``, which an HTTP read that timed out asks (``ReadBudget``): the time left, at least
    ``PAUSED_POLL`` while paused, ``<= 0`` once spent (paused or not)."""
    now = [0.0]
    deadline = bkmcp.Deadline(1.0, clock=lambda: now[0])
    now[0] = 0.95
    assert deadline.next_wait() == pytest.approx(0.05)
    with deadline.paused():
        now[0] = 30.0  # a person answering: the time left stands still, a wait looks again every PAUSED_POLL
        assert deadline.next_wait() == deadline.PAUSED_POLL
    assert deadline.next_wait() == pytest.approx(0.05)  # the end moved by the pause
    now[0] = 31.0
    assert deadline.next_wait() <= 0
    with deadline.paused():
        assert deadline.next_wait() <= 0  # spent before the pause: nothing to wait for
    budget = bkmcp.ReadBudget(0.75, deadline)
    assert budget == 0.75 and budget.deadline is deadline and isinstance(budget, float)


def test_a_relayed_question_is_the_clients_answer_with_the_budget_paused_R04():
    now = [0.0]
    deadline = bkmcp.Deadline(1.0, clock=lambda: now[0])
    asked: list[dict] = []

    def relay(params):  # the warm client: its person takes 5 s, then accepts
        asked.append(dict(params))
        now[0] += 5.0
        return {"result": {"action": "accept", "content": {"age": 3}}, "problems": []}

    source = CommandLineInput(terminal=bkmcp.RelayedQuestions(relay, deadline))
    assert source.relayed and source.capabilities == ELICITATION_FORM_AND_URL
    assert source.answer(None, FORM, False).result == {"action": "accept", "content": {"age": 3}}
    assert asked == [FORM["params"]] and deadline.left() == 1.0
    url = {"method": "elicitation/create", "params": {"mode": "url", "url": "https://h.example/x", "message": "Go"}}
    assert source.answer(None, url, False).result == {"action": "accept", "content": {"age": 3}}  # as relayed
    assert asked[-1] == url["params"]
    unfit = bkmcp.RelayedQuestions(lambda p: {"result": None, "problems": [{"message": "no"}, "junk"]})
    assert unfit.question(FORM["params"]) == bkmcp.InputAnswer(None, ({"message": "no"},))
    assert bkmcp.RelayedQuestions(lambda p: "junk").question({"mode": "url"}) == bkmcp.InputAnswer(None)
    shown = bkmcp.build_relayed_answer(bkmcp.InputAnswer(None, ({"message": "no"},)))
    assert shown == {"result": None, "problems": [{"message": "no"}]}
