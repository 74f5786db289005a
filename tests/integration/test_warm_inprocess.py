"""The warm client and its background process in one interpreter (docs/contract.md §14): ``WarmServer`` serves
from a thread on a private socket, ``main(..., "--keep-alive")`` is its client. The same paths the subprocess
tests of test_warm_sessions.py drive, where coverage sees them, plus the session pool's own rules."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import bkmcp
from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import ROOT, until, write_mcp_json

TOOLS = [*DEFAULT_TOOLS, mock_tool("counter", "counter")]


def _listening(place, name) -> bool:
    """The warm server accepts connections (its socket file exists from bind on, before it listens)."""
    sock = bkmcp._warm_try_connect(place, name)
    if sock is None:
        return False
    sock.close()
    return True


class Place:
    def __init__(self, tmp: Path) -> None:
        self.runtime = tmp / "run"
        self.runtime.mkdir(mode=0o700)
        self.place = self.runtime / "bkmcp"
        self.place.mkdir(mode=0o700)
        self.log = io.StringIO()
        held, problem = bkmcp.open_private_dir(str(self.place))
        assert held is not None, problem
        self.held = held
        self.server = bkmcp.WarmServer(held, str(ROOT / "bkmcp.py"), bkmcp.Log(self.log))
        self.socket = self.place / self.server.name
        self.thread = threading.Thread(target=self.server.serve, daemon=True)
        self.thread.start()
        until(lambda: _listening(held, self.server.name), "the warm server listens", 10)
        self.srv = MockServer({"tools": TOOLS})
        self.srv.start()
        self.config = write_mcp_json(tmp / "mcp.json", {"m": {"type": "http", "url": self.srv.url}})
        self.env = {"HOME": str(tmp), "PATH": os.environ.get("PATH", ""), "XDG_RUNTIME_DIR": str(self.runtime)}

    def main(self, *args: str, stdin: str = "") -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        status = bkmcp.main(
            ["--config", str(self.config), *args],
            stdin=io.StringIO(stdin),
            stdout=out,
            stderr=err,
            env=self.env,
            cwd=str(self.runtime),
        )
        return status, out.getvalue(), err.getvalue()

    def serve(self, scenario: dict[str, Any], **entry: Any) -> Place:
        """The mock replaced by one that plays ``scenario``; server ``m`` of the config is it (``entry``: more of
        its config entry, e.g. ``protocolVersion``)."""
        self.srv.stop()
        self.srv = MockServer(scenario)
        self.srv.start()
        self.config = write_mcp_json(self.config, {"m": {"type": "http", "url": self.srv.url, **entry}})
        return self

    def close(self) -> None:
        self.server.stopping = True
        self.thread.join(10)
        self.srv.stop()
        self.held.close()
        assert not self.thread.is_alive()


@pytest.fixture
def place(tmp_path: Path):
    made = Place(tmp_path)
    yield made
    made.close()


@pytest.fixture
def serving(tmp_path: Path):
    """``Place.serve`` of a place whose state (``XDG_STATE_HOME``) is in the test's folder."""
    made = Place(tmp_path)
    made.env["XDG_STATE_HOME"] = str(tmp_path / "state")
    yield made.serve
    made.close()


def test_a_warm_command_prints_what_the_one_shot_prints(place):
    for args, stdin in [
        (("m", "echo", "--text", "hi"), ""),
        (("m", "--tools"), ""),
        (("m", "echo", "--body", "-"), '{"text": "piped"}'),
        (("m", "nosuch"), ""),
        (("m", "echo", "--text", "x", "--jq", ".data.result.content[0].text"), ""),
    ]:
        one = place.main(*args, stdin=stdin)
        warm = place.main(*args, "--keep-alive", stdin=stdin)
        assert warm == one, args
    assert len(place.srv.requests("tools/call")) == 6
    listing = bkmcp.WarmSessions.listing(place.server.sessions)
    assert [s["server"] for s in listing] == ["m"] and listing[0]["calls"] == 5  # every warm command that used it


def test_a_warm_raw_command_prints_what_the_one_shot_prints(place):
    for args in [
        ("m", "echo", "--text", "hi", "--raw"),
        ("m", "fail", "-r"),
        ("m", "--tools", "--jq", ".data.tools[].name", "-r"),
    ]:
        one = place.main(*args)
        warm = place.main(*args, "--keep-alive")
        assert warm == one, args
        assert ('"ok"' in one[1]) == (args[1] == "fail"), one
    assert len(place.srv.requests("tools/call")) == 4


def test_the_session_is_kept_and_its_state_with_it(place):
    counts = []
    for _ in range(3):
        status, out, _err = place.main("m", "counter", "--keep-alive")
        counts.append(json.loads(out)["data"]["result"]["structuredContent"]["count"])
    assert counts == [1, 2, 3]  # one HTTP mock: the counter is the server process's, sessions come and go alike
    assert len(place.srv.requests("server/discover")) + len(place.srv.requests("initialize")) <= 2


def test_sessions_listing_and_stop_in_process(place):
    assert place.main("m", "echo", "--text", "a", "--keep-alive")[0] == 0
    status, out, _ = place.main("--sessions")
    data = json.loads(out)["data"]
    assert status == 0 and data["running"] is True and data["sessions"][0]["transport"] == "http"
    status, out, _ = place.main("--sessions", "--stop")
    stopped = json.loads(out)["data"]
    assert stopped == {
        "running": True,
        "stopped": True,
        "closed": 1,
        "pid": os.getpid(),
        "build": place.server.build,
        "other_builds": [],
    }
    place.thread.join(10)
    assert not place.thread.is_alive() and not place.socket.exists()


def test_reap_closes_idle_sessions_and_the_limit_closes_the_oldest(place):
    warm = bkmcp.WarmSessions(bkmcp.Log(io.StringIO()), limit=2)
    log = bkmcp.Log(io.StringIO())
    for url_suffix in ("a", "b", "c"):
        server = bkmcp.resolve_server(bkmcp.load_config(str(place.config)).servers["m"], {}, cwd=str(place.runtime))
        server.headers["X-Which"] = url_suffix  # three keys
        source = warm.for_command(str(place.runtime), 60.0)
        ctx = bkmcp.OpContext(bkmcp.Deadline(10), log)
        session = source.start(server, ctx, insecure=False)
        source.ready(session, ctx)
        source.done(session, ctx)
    assert len(warm.listing()) == 2  # the least recently used idle one was closed
    assert warm.reap() == 2
    assert warm.reap(now=bkmcp.time.monotonic() + 61) == 0
    assert warm.listing() == []


def test_a_bad_folder_runs_one_shot_with_one_warning(place):
    place.place.chmod(0o755)
    try:
        status, out, err = place.main("m", "echo", "--text", "hi", "--keep-alive")
    finally:
        place.place.chmod(0o700)
    assert status == 0 and json.loads(out)["ok"] is True
    assert err.count("warning") == 1 and "mode 0755" in err


def test_a_listener_of_another_uid_is_never_sent_a_byte(place, monkeypatch):
    """Issue 29, item 1: the peer's uid is checked after connect, before the request; else one-shot, one warning."""
    monkeypatch.setattr(bkmcp, "peer_uid", lambda sock: 54321)
    status, out, err = place.main("m", "echo", "--text", "hi", "--keep-alive")
    assert status == 0 and json.loads(out)["data"]["result"]["structuredContent"] == {"arguments": {"text": "hi"}}
    assert err.count("warning") == 1 and "is uid 54321, not you" in err
    assert place.server.sessions.listing() == []  # the process never got the command
    with pytest.raises(bkmcp.ConnectionFailedError, match="uid 54321"):
        bkmcp.sessions_data(bkmcp.parse_argv(["--sessions"]), _envr(place))


def test_two_builds_whose_socket_names_collide_never_run_a_command_together(place, monkeypatch):
    """The build travels in the request: a process of another build answers "other build" and keeps serving its
    own; the client runs one-shot with one warning (docs/contract.md §14)."""
    monkeypatch.setattr(bkmcp, "warm_build", lambda artifact: "another build")
    monkeypatch.setattr(bkmcp, "warm_socket_name", lambda build: place.server.name)
    status, out, err = place.main("m", "echo", "--text", "hi", "--keep-alive")
    assert status == 0 and json.loads(out)["data"]["result"]["structuredContent"] == {"arguments": {"text": "hi"}}
    assert err.count("warning") == 1 and "another build" in err
    assert not place.server.retiring and place.socket.exists()


def _envr(place: Place) -> bkmcp.Environment:
    return bkmcp.Environment(stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(), env=place.env, cwd="/")


def test_a_symlinked_folder_is_refused_as_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    assert bkmcp.open_private_dir(str(tmp_path / "link")) == (
        None,
        f"{tmp_path / 'link'} is a symlink; it must be a directory of yours",
    )
    (tmp_path / "file").write_text("")
    assert bkmcp.open_private_dir(str(tmp_path / "file")) == (None, f"{tmp_path / 'file'} is not a directory")
    assert bkmcp.open_private_dir(str(tmp_path / "none"))[1].startswith("cannot open")
    assert bkmcp.open_private_dir("/x", fd=987654)[1].startswith("cannot read /x")


def test_a_folder_path_longer_than_a_unix_socket_address_still_works(tmp_path):
    """The socket is reached as /proc/self/fd/N/NAME: a runtime folder deeper than AF_UNIX's 108 bytes is fine."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    held, problem = bkmcp.warm_dir({"XDG_RUNTIME_DIR": str(deep)})
    assert held is not None and len(os.path.join(held.path, "warm-00000000.sock")) > 108, problem
    server = bkmcp.WarmServer(held, str(ROOT / "bkmcp.py"), bkmcp.Log(io.StringIO()))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        until(lambda: _listening(held, server.name), "the warm server listens", 10)
        envr = bkmcp.Environment(
            stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(), env={"XDG_RUNTIME_DIR": str(deep)}, cwd="/"
        )
        assert bkmcp.sessions_data(bkmcp.parse_argv(["--sessions"]), envr)["pid"] == os.getpid()
    finally:
        server.stopping = True
        thread.join(10)
        held.close()


def test_the_background_process_runs_only_in_the_folder_it_was_handed(tmp_path, capsys):
    assert bkmcp.serve_warm_process(["--keep-alive-daemon", str(tmp_path)]) == bkmcp.EXIT_LOCAL
    assert bkmcp.serve_warm_process(["--keep-alive-daemon", str(tmp_path), "notanfd"]) == bkmcp.EXIT_LOCAL
    assert "started by bkmcp itself" in capsys.readouterr().err


def test_keep_alive_values():
    inv = bkmcp.parse_argv(["s", "t", "--keep-alive"])
    log = bkmcp.Log(io.StringIO())
    assert bkmcp.keep_alive_seconds(inv, {}, log) == bkmcp.KEEP_ALIVE_DEFAULT
    assert bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t", "--keep-alive=90s"]), {}, log) == 90
    assert (
        bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t", "--keep-alive=off"]), {"BKMCP_KEEP_ALIVE": "5m"}, log)
        is None
    )
    assert bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t"]), {"BKMCP_KEEP_ALIVE": "5m"}, log) == 300
    assert bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t"]), {"BKMCP_KEEP_ALIVE": "0"}, log) is None
    assert bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t"]), {}, log) is None
    with pytest.raises(bkmcp.UsageError):
        bkmcp.keep_alive_seconds(bkmcp.parse_argv(["s", "t", "--keep-alive=soon"]), {}, log)
    with pytest.raises(bkmcp.UsageError):
        bkmcp.parse_argv(["s", "t", "--keep-alive="])
    assert "keep-alive" in bkmcp.RESERVED_OPTION_NAMES
    # a tool's own --keep-alive-like flag value: `--keep-alive` after a tool option is bkmcp's, never its value
    parsed = bkmcp.parse_argv(["s", "t", "--text", "--keep-alive"])
    assert parsed.keep_alive == "" and parsed.tool_tokens[0].value is None


def test_uses_warm_session_only_for_tools_and_calls():
    def uses(*argv: str) -> bool:
        return bkmcp.uses_warm_session(bkmcp.parse_argv(list(argv)))

    assert uses("s", "--tools") and uses("s", "t")
    assert not uses("s", "--check") and not uses("s") and not uses("s", "t", "--help")
    assert not uses("s", "t", "--body", "{}", "--dry-run")


def test_frames_round_trip():
    import socket

    a, b = socket.socketpair()
    with a, b:
        bkmcp.send_frame(a, b"O", b"x" * 70_000)
        kind, payload = bkmcp.recv_frame(b)
        assert kind == b"O" and payload == ("x" * 70_000).encode()
        a.close()
        assert bkmcp.recv_frame(b) is None


class _Recorder:
    """A socket stand-in that keeps every object ``sendall`` is given."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(data)


def test_a_large_output_goes_out_in_bounded_frames_with_the_same_bytes():
    """Issue 29 point 7 (the warm process's peak after a large result): its stdout is sent in frames of at most
    ``_FRAME_CHUNK`` characters, each encoded on its own, so no second whole copy of a 30 MB result is held; the
    client receives exactly the bytes of the whole text (a multi-byte character and a lone surrogate on the
    boundaries), and a large frame's payload is handed to the socket as it is, not copied behind its header."""
    import threading

    chunk = bkmcp._FRAME_CHUNK
    text = "a" * (chunk - 1) + "\u00e9" + "\udcff" + "b" * (chunk - 1) + "\U0001f600" * 3 + "\n"
    recorder = _Recorder()
    stream = bkmcp._FrameStream(recorder, b"O", False, threading.Lock())
    assert stream.write(text) == len(text) and stream.write("") == 0
    wire, frames = b"".join(recorder.sent), []
    while wire:
        size = int.from_bytes(wire[1:5], "big")
        frames.append((wire[:1], wire[5 : 5 + size]))
        wire = wire[5 + size :]
    assert len(frames) == 3 and all(kind == b"O" for kind, _ in frames)
    assert all(len(payload.decode("utf-8", "surrogatepass")) <= chunk for _, payload in frames)
    assert b"".join(payload for _, payload in frames) == text.encode("utf-8", "surrogatepass")

    big = b"x" * (chunk + 1)
    recorder.sent.clear()
    bkmcp.send_frame(recorder, b"O", big)
    assert recorder.sent[0] == b"O" + len(big).to_bytes(4, "big") and recorder.sent[1] is big


@pytest.mark.parametrize(("stages", "outcome"), [([b"negotiate", b"call"], "unknown"), ([b"discover"], "not_sent")])
def test_a_process_that_dies_mid_command_is_reported_with_its_outcome(stages, outcome):
    import socket

    ours, theirs = socket.socketpair()
    for stage in stages:
        bkmcp.send_frame(theirs, b"S", stage)
    bkmcp.send_frame(theirs, b"E", b"bkmcp: warning: something\n")
    theirs.close()  # died: no X frame
    out, err = io.StringIO(), io.StringIO()
    envr = bkmcp.Environment(stdin=io.StringIO(), stdout=out, stderr=err, env={}, cwd="/")
    inv = bkmcp.parse_argv(["srv", "tool", "--keep-alive"])
    status = bkmcp._warm_relay(ours, inv, envr, bkmcp.Log(err))
    error = json.loads(out.getvalue())["error"]
    assert status == 2 and error["code"] == "mcp_connection_error" and error["outcome"] == outcome
    assert error["stage"] == stages[-1].decode()
    assert err.getvalue().startswith("bkmcp: warning: something")  # what it printed before it died is kept
    assert json.loads(out.getvalue())["data"] == {"server": "srv", "tool": "tool"}


@pytest.mark.parametrize(("stages", "outcome"), [([b"negotiate", b"call"], "unknown"), ([b"discover"], "not_sent")])
def test_a_live_process_that_stays_silent_is_a_timeout_never_ended(stages, outcome):
    """Issue 36 item 1: a background process that is alive and busy (its socket open, no frame past the client's
    wait) is reported ``mcp_timeout`` with the call's outcome, and is sent a cancel; "ended" is only said of a
    process whose socket closed (above)."""
    import socket

    ours, theirs = socket.socketpair()
    try:
        for stage in stages:
            bkmcp.send_frame(theirs, b"S", stage)
        ours.settimeout(0.3)  # the client's wait: --timeout plus its slack
        out, err = io.StringIO(), io.StringIO()
        envr = bkmcp.Environment(stdin=io.StringIO(), stdout=out, stderr=err, env={}, cwd="/")
        inv = bkmcp.parse_argv(["srv", "tool", "--keep-alive"])
        status = bkmcp._warm_relay(ours, inv, envr, bkmcp.Log(err))
        error = json.loads(out.getvalue())["error"]
        assert status == 2 and error["code"] == "mcp_timeout" and error["outcome"] == outcome, error
        assert "still running" in error["message"] and "ended" not in error["message"]
        theirs.settimeout(5)
        assert bkmcp.recv_frame(theirs) == (b"C", b"")  # the busy command is cancelled there
    finally:
        theirs.close()


MOCK = ROOT / "mock_server" / "mcp_mock.py"


def _stdio_entry(scenario: dict) -> dict:
    args = [str(MOCK), "--stdio", "--quiet", "--scenario-json", json.dumps(scenario)]
    return {"type": "stdio", "command": sys.executable, "args": args}


def test_a_warm_commands_stderr_tail_is_the_one_shot_runs(place):
    """The start-up lines and the command's own, never those of earlier commands (docs/contract.md §14)."""
    tools = [mock_tool("first", "echo", stderr="first call was here"), mock_tool("dies", "drop", stderr="dying now")]
    scenario = {"tools": tools, "stderr_lines": ["starting up", "ready"]}
    write_mcp_json(place.config, {"st": _stdio_entry(scenario)})
    status, out, _ = place.main("st", "dies")
    one = json.loads(out)["error"]
    assert status == 2 and one["server_stderr"] == ["starting up", "ready", "dying now"]
    assert place.main("st", "first", "--keep-alive")[0] == 0  # opens the session: its lines are its own
    status, out, _ = place.main("st", "dies", "--keep-alive")
    warm = json.loads(out)["error"]
    assert status == 2 and warm == one  # the whole error (its message names no session-counted request id)
    status, out, _ = place.main("st", "dies", "--keep-alive")  # the session died with its server: a new one opens
    assert status == 2 and json.loads(out)["error"] == one


def test_a_warm_session_skips_stdout_noise_and_its_errors_tell_the_one_shot_runs_lines(place):
    """A server that prints a banner and logs on stdout works warm as one-shot (docs/contract.md §9); a failure's
    details.server_stdout holds what the one-shot run would hold: the start-up lines and the command's own, never
    those of earlier commands (§14)."""
    tools = [mock_tool("first", "echo", stdout="first call was here"), mock_tool("dies", "drop", stdout="dying now")]
    scenario = {"tools": tools, "stdout_lines": ["Starting Time MCP server...", "ready"]}
    write_mcp_json(place.config, {"st": _stdio_entry(scenario)})
    one_call = place.main("st", "first")
    assert one_call[0] == 0 and place.main("st", "first", "--keep-alive") == one_call  # opens the kept session
    status, out, _ = place.main("st", "dies")
    one = json.loads(out)["error"]
    assert status == 2 and one["server_stdout"] == ["Starting Time MCP server...", "ready", "dying now"]
    assert one["server_stdout_skipped"] == 3
    assert place.main("st", "first", "--keep-alive")[0] == 0  # the kept session's server logs once more
    status, out, _ = place.main("st", "dies", "--keep-alive")
    assert status == 2 and json.loads(out)["error"] == one
    quiet = {"tools": [tools[0], mock_tool("dies", "drop")]}  # no start-up lines, a death without a word
    write_mcp_json(place.config, {"st": _stdio_entry(quiet)})
    status, out, _ = place.main("st", "dies")
    one = json.loads(out)["error"]
    assert status == 2 and "server_stdout" not in one and "server_stdout_skipped" not in one
    assert place.main("st", "first", "--keep-alive")[0] == 0
    status, out, _ = place.main("st", "dies", "--keep-alive")  # only an earlier command's line was skipped
    assert status == 2 and json.loads(out)["error"] == one


@pytest.mark.parametrize("ttl", [60000, 0, None, [60000, 0], [60000, 30000]])
def test_a_warm_catalogue_is_kept_by_the_one_freshness_rule(place, ttl):
    """docs/contract.md §11.5/§14: kept until a positive ttlMs passes, a list_changed, or the user asks
    (``--tools``, ``--check``); without a positive ttlMs (0, none, a page with 0) there is no end of its own."""
    srv = MockServer({"ttl_ms": ttl, "page_size": 3})  # the 5 default tools on 2 pages
    srv.start()
    try:
        write_mcp_json(place.config, {"t": {"type": "http", "url": srv.url}})
        one = place.main("t", "--tools")
        srv.reset_log()
        assert place.main("t", "--tools", "--keep-alive") == one
        assert len(srv.requests("tools/list")) == 2  # listed (two pages)
        for text in ("hi", "again"):
            assert place.main("t", "echo", "--text", text, "--keep-alive")[0] == 0
        assert len(srv.requests("tools/list")) == 2  # kept for the calls
        assert place.main("t", "--tools", "--keep-alive") == one  # the user asks: listed again
        assert len(srv.requests("tools/list")) == 4
        assert len(srv.requests("tools/call")) == 2
    finally:
        srv.stop()


def test_a_warm_catalogue_past_its_ttl_or_changed_is_listed_again(place):
    notify = {"tools/call": [{"method": "notifications/tools/list_changed"}]}
    short, changing = MockServer({"ttl_ms": 1}), MockServer({"ttl_ms": 60000, "notifications_before_result": notify})
    short.start()
    changing.start()
    try:
        servers = {"s": {"type": "http", "url": short.url}, "c": {"type": "http", "url": changing.url}}
        write_mcp_json(place.config, servers)
        for _ in range(2):
            assert place.main("s", "echo", "--text", "x", "--keep-alive")[0] == 0
            bkmcp.time.sleep(0.05)  # well past 1 ms
        assert len(short.requests("tools/list")) == 2
        assert place.main("c", "echo", "--text", "x", "--keep-alive")[0] == 0  # its stream says the list changed
        assert place.main("c", "echo", "--text", "y", "--keep-alive")[0] == 0  # so it is listed again, ttlMs or not
        assert len(changing.requests("tools/list")) == 2
    finally:
        short.stop()
        changing.stop()


def test_a_one_shot_command_always_lists_whatever_the_ttl(place):
    srv = MockServer({"ttl_ms": 60000})
    srv.start()
    try:
        write_mcp_json(place.config, {"t": {"type": "http", "url": srv.url}})
        for _ in range(2):
            assert place.main("t", "--tools")[0] == 0
        assert len(srv.requests("tools/list")) == 2
    finally:
        srv.stop()


# A stdio server that records its pid, then waits (bounded) for the test's "go" before it serves: every command of
# the test arrives while the first one is still opening. With FAIL_FIRST the first process started exits instead.
GATED = """
import os, runpy, sys, time
where, fail_first, argv = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
with open(os.path.join(where, "pids"), "a") as pids:
    pids.write(f"{os.getpid()}\\n")
try:
    os.close(os.open(os.path.join(where, "first"), os.O_CREAT | os.O_EXCL))
    first = True
except FileExistsError:
    first = False
end = time.monotonic() + 60
while not os.path.exists(os.path.join(where, "go")) and time.monotonic() < end:
    time.sleep(0.02)
if first and fail_first:
    sys.exit(1)
sys.argv = argv
runpy.run_path(argv[0], run_name="__main__")
"""


def _gated_first_calls(place, tmp: Path, count: int, fail_first: bool) -> tuple[list[tuple[int, str, str]], list[str]]:
    """``count`` simultaneous first calls of ``echo`` with one key; (their results, the pids of servers started)."""
    gate = tmp / "gate"
    gate.mkdir()
    mock = [str(MOCK), "--stdio", "--quiet", "--log", str(gate / "log.jsonl")]
    args = ["-c", GATED, str(gate), "1" if fail_first else "0", *mock]
    entry = {"type": "stdio", "command": sys.executable, "args": args}
    if fail_first:  # pinned: no era probe, which would start a server that exits during it once more
        entry["protocolVersion"] = "2025-06-18"
    write_mcp_json(place.config, {"st": entry})
    results: list[tuple[int, str, str]] = []

    def call(i: int) -> None:
        results.append(place.main("--timeout", "60s", "st", "echo", "--text", f"c{i}", "--keep-alive"))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()

    def pids() -> list[str]:
        return (gate / "pids").read_text().split() if (gate / "pids").exists() else []

    def all_arrived() -> bool:
        entries = list(place.server.sessions._entries.values())
        return bool(entries) and entries[0].lent == count and len(pids()) == 1

    until(lambda: all_arrived() or len(pids()) > 1, "every command reached the key's session, or a second server")
    (gate / "go").touch()
    for thread in threads:
        thread.join(120)
    calls = (
        [
            json.loads(line)["json"]["params"]["arguments"]["text"]
            for line in (gate / "log.jsonl").read_text().splitlines()
            if '"tools/call"' in line
        ]
        if (gate / "log.jsonl").exists()
        else []
    )
    assert sorted(calls) == sorted(
        json.loads(out)["data"]["result"]["structuredContent"]["arguments"]["text"]
        for status, out, _ in results
        if status == 0
    )
    return results, pids()


def test_simultaneous_first_calls_with_one_key_reach_one_server_process(place, tmp_path):
    """Issue 28 item 10 (docs/contract.md §14): 20 commands that find their key's session still opening wait for it
    instead of opening their own: one server process served all 20 calls."""
    results, pids = _gated_first_calls(place, tmp_path, 20, fail_first=False)
    assert [status for status, _, _ in results] == [0] * 20, [err for _, _, err in results if err][:2]
    assert len(pids) == 1, f"{len(pids)} server processes for one key"
    assert all(s["calls"] == 20 for s in place.server.sessions.listing())


def test_a_failed_opening_is_never_shared_half_open(place, tmp_path):
    """The opening of the key's session fails (its server exits before answering): that command gets the failure;
    each waiter opens afresh (one of them the new server, the others wait for it), never a half-open session."""
    results, pids = _gated_first_calls(place, tmp_path, 5, fail_first=True)
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [0, 0, 0, 0, 2], [out for status, out, _ in results if status]
    failed = next(json.loads(out)["error"] for status, out, _ in results if status == 2)
    assert failed["code"] == "mcp_connection_error"
    assert len(pids) == 2  # the one that failed and the one every other call used


def test_a_command_waits_for_an_opening_within_its_own_budget_only(place):
    """A command that finds its key's session opening waits within its own budget: spent, it is that command's
    mcp_timeout, and the entry is no longer lent to it (the opener's session is untouched)."""
    warm = bkmcp.WarmSessions(bkmcp.Log(io.StringIO()))
    log = bkmcp.Log(io.StringIO())
    server = bkmcp.resolve_server(bkmcp.load_config(str(place.config)).servers["m"], {}, cwd=str(place.runtime))
    opener, opener_ctx = warm.for_command(str(place.runtime), 60.0), bkmcp.OpContext(bkmcp.Deadline(10), log)
    session = opener.start(server, opener_ctx, insecure=False)  # opening: its lock held
    with pytest.raises(bkmcp.McpTimeoutError):
        warm.for_command(str(place.runtime), 60.0).start(
            server, bkmcp.OpContext(bkmcp.Deadline(0.1), log), insecure=False
        )
    (entry,) = warm._entries.values()
    assert entry.lent == 1 and entry.session is session
    opener.ready(session, opener_ctx)
    opener.done(session, opener_ctx)
    assert [s["calls"] for s in warm.listing()] == [1] and not place.srv.requests("tools/call")
    warm.close_all()


def test_the_limit_holds_while_sessions_open_together(place):
    """Issue 29, item 6: the count is checked and the entry made under one lock; a command finding every kept
    session in use (here: all still opening) runs on a session of its own, closed at its end."""
    warm = bkmcp.WarmSessions(bkmcp.Log(io.StringIO()), limit=2)
    log = bkmcp.Log(io.StringIO())
    opened = []
    for which in ("a", "b", "c", "d"):
        server = bkmcp.resolve_server(bkmcp.load_config(str(place.config)).servers["m"], {}, cwd=str(place.runtime))
        server.headers["X-Which"] = which
        source = warm.for_command(str(place.runtime), 60.0)
        ctx = bkmcp.OpContext(bkmcp.Deadline(10), log)
        opened.append((source, source.start(server, ctx, insecure=False), ctx))  # none ready yet: all opening
        assert len(warm._entries) <= 2
    for source, session, ctx in opened:
        source.ready(session, ctx)
        source.done(session, ctx)
    assert len(warm.listing()) == 2 and all(s["alive"] for s in warm.listing())
    assert not opened[2][1].alive and not opened[3][1].alive  # the extra ones closed with their command
    warm.close_all()


def test_the_client_starts_a_process_with_the_few_variables_it_needs(tmp_path, monkeypatch):
    """``_warm_connect`` in this interpreter: under the lock it starts the background process (the folder's
    descriptor handed over, a log over 1 MiB truncated through its descriptor) with a minimal environment."""
    monkeypatch.setenv("WARM_SECRET_TOKEN", "inprocess-sentinel-31c9")
    assert "WARM_SECRET_TOKEN" not in bkmcp.build_warm_process_env(os.environ)
    assert bkmcp.build_warm_process_env({"HOME": "/h", "TOKEN": "x", "LANG": "C"}) == {"HOME": "/h", "LANG": "C"}
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    held, _ = bkmcp.warm_dir({"XDG_RUNTIME_DIR": str(runtime)})
    assert held is not None
    (runtime / "bkmcp" / "warm.log").write_bytes(b"x" * (bkmcp._WARM_LOG_LIMIT + 1))
    artifact = str(ROOT / "bkmcp.py")
    sock = bkmcp._warm_connect(held, artifact, bkmcp.warm_socket_name(bkmcp.warm_build(artifact)))
    sock.close()
    held.close()
    assert (runtime / "bkmcp" / "warm.log").stat().st_size < bkmcp._WARM_LOG_LIMIT
    envr = bkmcp.Environment(
        stdin=io.StringIO(), stdout=io.StringIO(), stderr=io.StringIO(), env={"XDG_RUNTIME_DIR": str(runtime)}, cwd="/"
    )
    pid = bkmcp.sessions_data(bkmcp.parse_argv(["--sessions", "--stop"]), envr)["pid"]
    assert pid != os.getpid()
    until(lambda: _ended(pid), "the background process ended", 20)


def _ended(pid: int) -> bool:
    try:  # a zombie has ended too (under a subreaper nobody may wait for it soon)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def test_a_folder_of_another_uid_or_not_a_directory_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (chown to another uid)")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 54321, 54321)
    assert bkmcp.open_private_dir(str(theirs))[1] == f"{theirs} belongs to uid 54321, not to you (uid 0)"
    fd = os.open(tmp_path / "file", os.O_CREAT | os.O_RDONLY, 0o600)
    assert bkmcp.open_private_dir("f", fd=fd) == (None, "f is not a directory")  # the descriptor is closed


def test_the_warm_process_gets_the_timeout_value_not_the_text(place, monkeypatch):
    """Issue 31 item 2: the client parses ``--timeout`` once and sends the value; the background process runs the
    command with that value and never parses the text again (one interpreter here: one count for both sides)."""
    parsed: list[str] = []
    real = bkmcp.parse_duration
    monkeypatch.setattr(bkmcp, "parse_duration", lambda text, **kw: parsed.append(text) or real(text, **kw))
    received: list[dict] = []
    served = bkmcp.WarmServer._run

    def spy(self, conn, request, **options):
        received.append(request)
        return served(self, conn, request, **options)

    monkeypatch.setattr(bkmcp.WarmServer, "_run", spy)
    used: list[float] = []
    budget = bkmcp.Runner.jq_deadline
    monkeypatch.setattr(bkmcp.Runner, "jq_deadline", lambda self: used.append(self.inv.timeout_seconds) or budget(self))
    status, out, err = place.main("m", "echo", "--text", "t", "--timeout", "7s", "--jq", ".ok", "--keep-alive")
    assert (status, out) == (0, "true\n"), err
    assert [r["timeout"] for r in received] == [7.0] and "--timeout" in received[0]["argv"]
    assert parsed.count("7s") == 1 and used == [7.0]
    assert place.srv.requests("tools/call")[-1]["json"]["params"]["arguments"] == {"text": "t"}


def test_a_completion_is_answered_by_the_kept_session_and_opens_none(place):
    """Issue 28 item 6 (contract §2, §14): ``--completion tools|flags`` asks the background process first; with no
    kept session of the server it opens none (the client then connects once itself), with one it is answered
    from that session: no new negotiation reaches the server."""

    def negotiations() -> int:
        return len(place.srv.requests("server/discover")) + len(place.srv.requests("initialize"))

    names = "".join(f"{t['name']}\n" for t in TOOLS)
    assert place.main("--completion", "tools", "m") == (0, names, "")
    assert place.server.sessions.listing() == []  # the peek kept nothing, and opened nothing to keep
    assert negotiations() == 1  # the client's own bounded connect
    assert place.main("m", "--tools", "--keep-alive")[0] == 0
    before, lists = negotiations(), len(place.srv.requests("tools/list"))
    assert place.main("--completion", "flags", "m", "add") == (0, "--a\n--b\n", "")
    assert place.main("--completion", "tools", "m") == (0, names, "")
    assert place.main("--completion", "flags", "m", "nope") == (0, "", "")
    assert negotiations() == before  # the kept session answered
    assert len(place.srv.requests("tools/list")) - lists <= 3
    assert place.server.sessions.listing()[0]["server"] == "m"
    assert place.main("--sessions", "--stop")[0] == 0
    place.thread.join(10)
    assert place.main("--completion", "tools", "m") == (0, names, "")  # no process: the one bounded connect
    assert negotiations() == before + 1


def test_a_completion_never_trusts_a_folder_a_listener_or_a_build_it_should_not(place, monkeypatch):
    """Issue 28 item 6: a bad private folder, a listener of another uid, a process of another build or one that
    hangs up: the completion asks nothing of it and answers from its own bounded connect, silently."""
    names = "".join(f"{t['name']}\n" for t in TOOLS)
    assert place.main("m", "--tools", "--keep-alive")[0] == 0
    negotiations = len(place.srv.requests("server/discover")) + len(place.srv.requests("initialize"))
    place.place.chmod(0o755)
    try:
        assert place.main("--completion", "tools", "m") == (0, names, "")
    finally:
        place.place.chmod(0o700)
    with monkeypatch.context() as patched:
        patched.setattr(bkmcp, "peer_uid", lambda sock: 54321)
        assert place.main("--completion", "tools", "m") == (0, names, "")
    with monkeypatch.context() as patched:
        patched.setattr(bkmcp, "warm_build", lambda artifact: "another build")
        patched.setattr(bkmcp, "warm_socket_name", lambda build: place.server.name)
        assert place.main("--completion", "tools", "m") == (0, names, "")
    with monkeypatch.context() as patched:
        patched.setattr(bkmcp, "recv_frame", lambda sock: (_ for _ in ()).throw(OSError("reset")))
        assert place.main("--completion", "tools", "m") == (0, names, "")
    after = len(place.srv.requests("server/discover")) + len(place.srv.requests("initialize"))
    assert after == negotiations + 4  # each of the four connected on its own
    assert not place.server.retiring and place.socket.exists()


def test_a_completion_creates_no_private_folder(tmp_path):
    """Without a background process a completion leaves no trace: not even the private folder is made."""
    srv = MockServer({"tools": TOOLS})
    srv.start()
    try:
        config = write_mcp_json(tmp_path / "mcp.json", {"m": {"type": "http", "url": srv.url}})
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        out = io.StringIO()
        env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", ""), "XDG_RUNTIME_DIR": str(runtime)}
        argv = ["--config", str(config), "--completion", "flags", "m", "add"]
        assert bkmcp.main(argv, stdout=out, stderr=out, env=env, cwd=str(tmp_path)) == 0
        assert out.getvalue() == "--a\n--b\n" and list(runtime.iterdir()) == []
        assert len(srv.requests("tools/list")) == 1
    finally:
        srv.stop()
