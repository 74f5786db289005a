"""Section 2 helpers: JSON with number fidelity (P02/P04), redaction (A05), durations, deadlines, logging."""

from __future__ import annotations

import decimal
import io

import pytest

import bkmcp
from bkmcp import JsonInputError, JsonNumber, dump_json, parse_json

# -- number fidelity --------------------------------------------------------------------------------------

FIDELITY = [
    "123456789012345678901234567890",
    "-98765432109876543210",
    "1e400",
    "-1e400",
    "0.1",
    "12345678901234567890.5",
    "-0.0",
    "1E+2",
    "1.50",
    "1.0",
    "5e-324",
    "3.141592653589793238462643383279",
    "9007199254740993",
    "0",
    "-0",
    "-5",
]


@pytest.mark.parametrize("text", FIDELITY)
def test_numbers_round_trip_byte_for_byte(text):
    """P04/§6: big ints, 1e400, 0.1, 12345678901234567890.5, -0.0, 1E+2 survive unchanged."""
    doc = f'{{"a":{text},"b":[{text}],"c":{{"d":{text}}}}}'
    assert dump_json(parse_json(doc)) == doc


def test_integers_are_int_and_others_are_exact_decimals():
    value = parse_json('{"i": 12345678901234567890123, "f": 0.1, "e": 1e400}')
    assert type(value["i"]) is int and value["i"] == 12345678901234567890123
    assert isinstance(value["f"], JsonNumber) and value["f"] == decimal.Decimal("0.1")
    assert value["e"].text == "1e400" and repr(value["e"]) == "JsonNumber('1e400')"


def test_huge_integer_beyond_the_str_limit_stays_exact():
    digits = "9" * 5000
    assert dump_json(parse_json(f"[{digits}]")) == f"[{digits}]"


def test_json_number_pickles_and_copies():
    import copy
    import pickle

    n = JsonNumber("1E+2")
    assert pickle.loads(pickle.dumps(n)).text == "1E+2"
    assert copy.deepcopy({"n": n})["n"].text == "1E+2"


def test_plain_decimals_and_tuples_serialise():
    assert dump_json({"d": decimal.Decimal("2.50"), "t": (1, 2)}) == '{"d":2.50,"t":[1,2]}'
    with pytest.raises(TypeError):
        dump_json({"n": decimal.Decimal("NaN")})
    with pytest.raises(TypeError):
        dump_json({"o": object()})


def test_marker_like_strings_are_not_replaced():
    """A real string that looks like the raw-number marker is data, not a number slot."""
    evil = bkmcp._RAW_MARK + "0000-0\ue001"
    doc = {"s": evil, "n": JsonNumber("1e400")}
    assert parse_json(dump_json(doc))["s"] == evil


def test_dump_is_compact_unicode_and_indentable():
    assert dump_json({"k": '中文 "q" \\ $(x) `y`\n'}) == '{"k":"中文 \\"q\\" \\\\ $(x) `y`\\n"}'
    assert dump_json({"a": [1]}, indent=2) == '{\n  "a": [\n    1\n  ]\n}'
    assert dump_json({"b": 1, "a": 2}, sort_keys=True) == '{"a":2,"b":1}'


def test_unicode_line_separators_are_escaped():
    """U+0085, U+2028, U+2029 split lines for str.splitlines() and JavaScript: an envelope must stay one line."""
    value = {"s": "a\u0085b\u2028c\u2029d", "k\u2028": 1}
    out = dump_json(value)
    assert len(out.splitlines()) == 1 and "\\u2028" in out
    assert parse_json(out) == value


def test_lone_surrogates_are_written_as_escapes():
    """A lone surrogate (valid JSON escape, invalid Unicode) must not break a UTF-8 stdout later."""
    value = parse_json('{"s": "a\\udcffb", "\\ud800": 1}')
    out = dump_json(value)
    out.encode("utf-8")  # must not raise
    assert parse_json(out) == value


# -- strictness ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1} // c',
        '/* c */ {"a": 1}',
        '{"a": 1,}',
        "[1, 2,]",
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": -Infinity}',
        "{'a': 1}",
        '{"a": 01}',
        '{"a": .5}',
        '{"a": 1',
        "",
        "   ",
        '{"a": 1} x',
    ],
)
def test_invalid_json_is_rejected(text):
    with pytest.raises(JsonInputError):
        parse_json(text)


@pytest.mark.parametrize(
    "text",
    ['{"a": 1, "a": 2}', '{"x": {"a": 1, "a": 1}}', '[{"k": [], "k": []}]', '{"a": {"b": {"c": {"d": 1, "d": 2}}}}'],
)
def test_duplicate_keys_rejected_at_every_level(text):
    with pytest.raises(JsonInputError, match="duplicate key"):
        parse_json(text)
    parse_json(text, strict_keys=False)  # only strictness differs


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ('{"a": 1, "a": 2}', 1, 10),
        ('{\n  "x": {\n    "a": 1,\n    "a": 1\n  }\n}', 4, 5),
        ('[{"k": [], "k": []}]', 1, 12),
        ('{"a": {"b": 1, "b": 2}, "a": 3}', 1, 16),  # the object that closes first is the one reported
        ('{"s": "x\\"a\\"", "t": {"u": 1, "u": 2}}', 1, 31),
        ('{"é中": 1, "é中": 2}', 1, 11),
    ],
)
def test_duplicate_key_names_its_line_and_column(text, line, column):
    """Issue 17 item 7: a duplicate key is reported with the line and column of its second occurrence, as other
    JSON errors are (columns count characters, 1-based, like json.JSONDecodeError)."""
    with pytest.raises(JsonInputError) as info:
        parse_json(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert str(info.value).endswith(f" at line {line} column {column}") and "duplicate key" in str(info.value)


def test_errors_never_echo_the_input():
    secret = "s3cr3t-VALUE-xyz"
    for text in (f'{{"token": "{secret}",}}', f'{{"token": "{secret}"', f"{secret}"):
        with pytest.raises(JsonInputError) as info:
            parse_json(text)
        assert secret not in str(info.value)


def test_error_positions_and_special_inputs():
    with pytest.raises(JsonInputError) as info:
        parse_json('{\n  "a": 1,\n}')
    assert info.value.line in (2, 3)  # 3.13 points at the comma, older Pythons at the brace
    with pytest.raises(JsonInputError, match="empty input"):
        parse_json("")
    with pytest.raises(JsonInputError, match="UTF-8"):
        parse_json(b'{"a": "\xff"}')
    with pytest.raises(JsonInputError, match="nesting too deep"):
        parse_json("[" * 100000 + "]" * 100000)


def test_bom_is_ignored_for_text_and_bytes():
    assert parse_json('\ufeff{"a": 1}') == {"a": 1}
    assert parse_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


# -- redaction (A05) -------------------------------------------------------------------------------------

SECRET_NAMES = [
    "Authorization",
    "authorization",
    "X-Bkapi-Authorization",
    "x-bkapi-authorization",
    "Proxy-Authorization",
    "Cookie",
    "Set-Cookie",
    "X-API-Key",
    "x-api-key",
    "X-Auth-Token",
    "X-My-Secret",
    "Api-Key",
    "X-Password",
    "X-Ticket",
    "bk_ticket",
    "PASSWORD",
    "X-TOKEN",
    "Private-KEY",
    "X-AUTH",
]
PLAIN_NAMES = ["X-Request-Id", "User-Agent", "Accept-Language", "X-Trace", "X-Tenant"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_header_names_are_redacted(name):
    """A05: values of credential headers print as *** whatever the case."""
    assert bkmcp.is_secret_name(name)
    assert bkmcp.redact_headers({name: "v4lue", "X-Trace": "t"}) == {name: "***", "X-Trace": "t"}
    assert bkmcp.redact_headers([(name, "v4lue")]) == {name: "***"}


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_header_names_pass_through(name):
    assert not bkmcp.is_secret_name(name)
    assert bkmcp.redact_headers({name: "v"}) == {name: "v"}


def test_redactor_scrubs_whole_values_and_long_fragments_longest_first():
    r = bkmcp.Redactor()
    r.add("abc")  # whole values are scrubbed whatever their length
    r.add("xy", whole=False)  # short fragments are not (they would mangle unrelated text)
    r.add("abcdef-long")
    r.add("")
    assert r.scrub("token abcdef-long and abc and xy") == "token *** and *** and xy"
    assert r.scrub_value({"a": ["abc", 1, {"b": "xabcx"}], "n": None}) == {"a": ["***", 1, {"b": "x***x"}], "n": None}


def test_bounded_redactor_keeps_the_most_recent_secrets_and_a_base_adds_its_own():
    """The resident mode's process-wide redactor is bounded (issue 16 item 10); a session's adds its own secrets
    to it, longest first across both (a shorter secret inside a longer one never leaves part of the longer)."""
    system = bkmcp.Redactor(limit=3)
    for secret in ("sys-one", "sys-two", "sys-three"):
        system.add(secret)
    system.add("sys-one")  # seen again: the last to go
    system.add("sys-four")
    assert sorted(system.secrets()) == ["sys-four", "sys-one", "sys-three"]
    for i in range(10_000):
        system.add(f"rotated-{i}")
    assert len(system.secrets()) == 3
    session = bkmcp.Redactor(base=system)
    session.add("rotated")  # a fragment of the system's longer secrets
    assert session.scrub("rotated-9999 and rotated") == "*** and ***"
    system.add("later-secret")  # the base changed after the session redactor was built
    assert session.scrub("later-secret") == "***" and "later-secret" not in session._secrets
    scoped = bkmcp.Log(io.StringIO()).scoped(session)
    scoped.warn("rotated-9999")
    assert scoped.stream.getvalue() == "bkmcp: warning: ***\n"


def test_log_scrubs_every_line_and_warns_once():
    stream = io.StringIO()
    log = bkmcp.Log(stream, verbose=False)
    log.redactor.add("hunter2")
    log.debug("not shown")
    log.warn("password hunter2 leaked", once_key="k")
    log.warn("again", once_key="k")
    log.warn("no key")
    log.progress("not a tty")
    assert stream.getvalue() == "bkmcp: warning: password *** leaked\nbkmcp: warning: no key\n"
    verbose = bkmcp.Log(io.StringIO(), verbose=True)
    verbose.debug("d")
    verbose.progress("p")
    assert verbose.stream.getvalue() == "bkmcp: d\nbkmcp: p\n"


def test_log_survives_a_closed_stream():
    stream = io.StringIO()
    stream.close()
    bkmcp.Log(stream).warn("x")  # no exception
    assert bkmcp.Log(stream).is_tty is False


# -- durations and deadlines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1.5", 1.5),
        ("60", 60.0),
        (".5s", 0.5),
        ("168h", 604800.0),
    ],
)
def test_valid_durations(text, seconds):
    assert bkmcp.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0", "0s", "0ms", "-1", "abc", "1d", "", "1.", "s", "1 s", "1e3", "169h", "٣"])
def test_invalid_durations(text):
    with pytest.raises(bkmcp.UsageError):
        bkmcp.parse_duration(text)


def test_format_duration():
    assert bkmcp.format_duration(0.5) == "500ms"
    assert bkmcp.format_duration(30) == "30s"


def test_deadline_bounds_the_whole_operation():
    now = [100.0]
    deadline = bkmcp.Deadline(2.0, clock=lambda: now[0])
    assert deadline.remaining() == 2.0
    now[0] = 101.5
    assert deadline.remaining() == pytest.approx(0.5)
    assert deadline.elapsed_ms() == 1500
    now[0] = 102.0
    with pytest.raises(bkmcp.McpTimeoutError) as info:
        deadline.remaining()
    assert "2s" in info.value.message and info.value.exit_status == 2


def test_closest_names():
    assert bkmcp.closest_names("report-prd", ["report-prod", "public-docs"]) == ["report-prod"]
    assert bkmcp.closest_names("REPORT", ["report", "x"])[0] == "report"
    assert bkmcp.closest_names("zzz", ["report"]) == []


# -- the fast path is the plain json module, errors included (issue 11 item 1) -----------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers import FUZZ_EXAMPLES, JSON_SYNTAX_TYPOS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TYPOS = [
    *JSON_SYNTAX_TYPOS,
    '{"a": 1} x',
    "",
    " \n",
    '{"a": tru}',
    '{"a": -}',
    '{"a": 1.}',
    '{"a": 01}',
    "[",
    "]",
    '{"a": "\x01"}',
    '{"a": "\\x"}',
    '{"a": "\\ud800"}',
    '{"a": NaN}',
    '{"a": 1, "a": 2}',
    "\u00a0{}",
    "{}\u00a0",
    '"\\u12"',
    "[" * 5000,
    '{"a": [1, 2}',
]
JSON_CHARS = st.sampled_from(list('{}[]":,.-+eE0123456789 \n\tabcdefnrstulN\\\x00\u00e9\ud800\u2028'))
MUTATED = st.one_of(
    st.sampled_from(TYPOS),
    st.text(JSON_CHARS, max_size=40),
    st.tuples(
        st.sampled_from(['{"a": [1, 2.5, "x"], "b": {"c": null}}', "[1e400, -0, true]", '"s"']),
        st.integers(0, 40),
        st.integers(0, 3),
        st.text(JSON_CHARS, max_size=3),
    ).map(lambda t: t[0][: t[1]] + t[3] + t[0][t[1] + t[2] :]),
)


def _outcome(parse, text: str, strict: bool):
    try:
        return "ok", dump_json(parse(text, strict_keys=strict))
    except JsonInputError as exc:
        return "error", str(exc), exc.line, exc.column


@pytest.mark.parametrize("text", TYPOS)
def test_fast_path_equals_the_plain_json_module_on_typos(text):
    for strict in (True, False):
        assert _outcome(parse_json, text, strict) == _outcome(bkmcp.parse_json_plain, text, strict)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(MUTATED, st.booleans())
def test_fast_path_equals_the_plain_json_module(text, strict):
    """contract.md §13: the start-up trick is proven equal to the plain code: same value, same error, same position."""
    assert _outcome(parse_json, text, strict) == _outcome(bkmcp.parse_json_plain, text, strict)


_FRESH = r"""
import sys
sys.path.insert(0, sys.argv[1])
import bkmcp
assert "json" not in sys.modules, "json preloaded"
for text in sys.argv[2:]:
    try:
        bkmcp.parse_json(text)
    except bkmcp.JsonInputError as exc:
        print("error", exc)
    else:
        print("ok")
"""


def test_errors_in_a_fresh_interpreter_without_json_loaded():
    """Issue 11: on 3.10/3.11 the C scanner raised SystemError when json.decoder was not imported yet (pytest
    always has it, so only a fresh interpreter shows it)."""
    texts = ["{bad", '{"a": 1,}', '{"a": "x', '{"a": 1e}', "[1]"]
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _FRESH, str(ROOT), *texts],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "ok"
    assert [line.split(" at line")[0] for line in lines[:-1]] == [
        "error " + str(_outcome(bkmcp.parse_json_plain, t, True)[1]).split(" at line")[0] for t in texts[:-1]
    ]
    assert all(" at line 1 column " in line for line in lines[:-1])


_RACE = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import bkmcp
made = []
define = bkmcp._define_json_number
def slow_define():
    made.append(1)
    time.sleep(0.05)  # widen the window between the check and the creation
    return define()
bkmcp._define_json_number = slow_define
start = threading.Barrier(8)
classes = []
def worker():
    start.wait()
    classes.append(type(bkmcp.parse_json("[0.5]")[0]))
threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(made), len(set(classes)), classes[0] is bkmcp.JsonNumber)
"""


def test_json_number_is_created_once_under_concurrent_first_use():
    proc = subprocess.run(
        [sys.executable, "-S", "-c", _RACE, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "1", "True"]


def test_records_work_with_the_dataclasses_module():
    """Issue 11 item 7: the small `dataclass` of section 2 made dataclasses.replace/asdict fail at run time while
    the type checker accepted them."""
    import dataclasses

    server = bkmcp.ServerConfig(name="a", type="http", config_file="/f", url="https://x/", headers=(("H", "v"),))
    assert dataclasses.is_dataclass(server) and dataclasses.is_dataclass(bkmcp.ServerConfig)
    moved = dataclasses.replace(server, name="b")
    assert moved == bkmcp.ServerConfig(name="b", type="http", config_file="/f", url="https://x/", headers=(("H", "v"),))
    assert dataclasses.asdict(server)["headers"] == (("H", "v"),) and dataclasses.astuple(server)[0] == "a"
    conf = bkmcp.ConfigFile("/f", {"a": server})
    assert dataclasses.asdict(conf)["servers"]["a"]["url"] == "https://x/"
    assert [f.name for f in dataclasses.fields(conf)] == [
        "path",
        "servers",
        "readable_by_others",
        "invalid_names",
        "unusable",
    ]
    inv = dataclasses.replace(bkmcp.Invocation(), server="s")  # a default_factory field
    assert inv.server == "s" and inv.tool_tokens == [] and inv.tool_tokens is not bkmcp.Invocation().tool_tokens
    token = bkmcp.ToolToken("n", "v", True, "--n=v")  # a slots class
    assert dataclasses.replace(token, value="w").value == "w" and dataclasses.asdict(token)["raw"] == "--n=v"
    with pytest.raises(AttributeError):
        moved.name = "c"  # type: ignore[misc]
