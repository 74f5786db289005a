"""Warm sessions (``--keep-alive``, docs/contract.md §14), with real processes and real sockets.

Every command runs ``bkmcp.py`` in a fresh interpreter, the way a user meets it; the background process is the one
those clients start, in a private folder of the test's own (``XDG_RUNTIME_DIR``). Teardown stops it and fails the
test when it, or any server process it started, is still alive.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import ROOT, process_running, until, write_mcp_json

MOCK = ROOT / "mock_server" / "mcp_mock.py"
BIG = 30 * 1024 * 1024
TOOLS = [
    *DEFAULT_TOOLS,
    mock_tool("counter", "counter"),
    mock_tool("slow", "slow", ms=4000),
    mock_tool("fails", "is_error"),
    mock_tool("rpcerr", "rpc_error"),
    mock_tool("where", "environ"),
]
MODERN, LEGACY = "2026-07-28", "2025-06-18"


def _processes() -> dict[int, str]:
    """pid -> command line of every process of this machine."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = (
                    Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                )
            except OSError:
                continue
    return found


class World:
    """A private runtime folder, a config with stdio and HTTP mocks, and ``run`` for bkmcp commands."""

    def __init__(self, tmp: Path, bkmcp: Path = ROOT / "bkmcp.py") -> None:
        self.tmp = tmp
        self.bkmcp = bkmcp
        self.runtime = tmp / "run"
        self.runtime.mkdir(mode=0o700)
        self.place = self.runtime / "bkmcp"
        self.stdio_log = tmp / "stdio-log.jsonl"
        self.http = MockServer({"tools": TOOLS})
        self.http.start()
        self.paged = MockServer({"generate_tools": 9, "page_size": 2})
        self.paged.start()
        scenario = json.dumps({"tools": TOOLS})
        stdio = [sys.executable, str(MOCK), "--stdio", "--quiet", "--scenario-json", scenario]
        self.servers = {
            "st": {"type": "stdio", "command": stdio[0], "args": [*stdio[1:], "--log", str(self.stdio_log)]},
            "hm": {"type": "http", "url": self.http.url, "protocolVersion": MODERN},
            "hl": {"type": "http", "url": self.http.url, "protocolVersion": LEGACY},
            "hu": {"type": "http", "url": self.http.url},  # unpinned: the era probe
            "hs": {"type": "http", "url": self.http.url, "headers": {"X-Tok": "${WARM_TOKEN}"}},
            "pg": {"type": "http", "url": self.paged.url},
        }
        self.config = write_mcp_json(tmp / "mcp.json", self.servers)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp),
            "XDG_RUNTIME_DIR": str(self.runtime),
            "PYTHONDONTWRITEBYTECODE": "1",
            "WARM_TOKEN": "tok-one-5e1f",
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, str(self.bkmcp), "--config", str(self.config), *args]

    def run(self, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(*args),
            input=stdin,
            capture_output=True,
            env={**self.env, **(env or {})},
            cwd=self.tmp,
            timeout=120,
        )

    def start(self, *args: str) -> subprocess.Popen:
        """``bkmcp ARGS`` started in the background, stdout and stderr on pipes (``communicate`` reads them)."""
        return subprocess.Popen(
            self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, cwd=self.tmp
        )

    def sessions(self) -> dict[str, Any]:
        done = self.run("--sessions")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["data"]

    def sockets(self) -> list[Path]:
        return sorted(self.place.glob("warm*.sock"))

    def daemons(self) -> list[int]:
        marker = f"--keep-alive-daemon {self.place}"
        return [pid for pid, line in _processes().items() if marker in line]

    def children(self) -> list[int]:
        """Server processes of this world (the stdio mock, found by its log path)."""
        return [pid for pid, line in _processes().items() if str(self.stdio_log) in line and "mcp_mock" in line]

    def close(self) -> None:
        self.run("--sessions", "--stop")
        until(lambda: not self.daemons() and not self.children(), "the background process and its servers ended", 20)
        self.http.stop()
        self.paged.stop()


@pytest.fixture
def world(tmp_path: Path):
    made = World(tmp_path)
    try:
        yield made
    finally:
        made.close()


def _stdio_slow_calls(world: World) -> int:
    """How many ``tools/call`` of ``slow`` the stdio server received (its log is written as each line arrives)."""
    entries = [json.loads(line) for line in world.stdio_log.read_text().splitlines()]
    return sum(
        1 for e in entries if e.get("rpc_method") == "tools/call" and (e.get("json") or {})["params"]["name"] == "slow"
    )


def _same(one: subprocess.CompletedProcess, warm: subprocess.CompletedProcess, what: Any) -> None:
    assert warm.returncode == one.returncode, (what, one.stderr, warm.stderr)
    assert warm.stdout == one.stdout, what
    assert warm.stderr == one.stderr, what


def _corpus() -> list[tuple[tuple[str, ...], bytes]]:
    commands: list[tuple[tuple[str, ...], bytes]] = []
    for server in ("st", "hm", "hl", "hu"):
        commands += [
            ((server, "--tools"), b""),
            ((server, "--tools", "--jq", ".data.tools[].name"), b""),
            ((server, "--tools", "--brief"), b""),
            ((server, "echo", "--text", "hi"), b""),
            ((server, "echo", "--text", "hi", "--count", "3", "--loud=true", "--tags", '["a","b"]'), b""),
            ((server, "echo"), b""),  # a required argument missing: local validation, exit 1
            ((server, "echo", "--text", "x", "--jq", ".data.result.structuredContent"), b""),
            ((server, "nosuch"), b""),  # unknown tool
            ((server, "pick", "--color", "purple"), b""),  # outside the enum
            ((server, "echo", "--body", '{"text": "b", "count": 2}'), b""),
            ((server, "echo", "--body", "-"), b'{"text": "from stdin"}'),
            ((server, "fails"), b""),  # isError: exit 2
            ((server, "rpcerr"), b""),  # a JSON-RPC error
        ]
    commands += [(("pg", "--tools"), b""), (("pg", "--tools", "--jq", ".data.tool_count"), b"")]  # pagination
    commands += [
        (("hs", "echo", "--text", "tok"), b""),
        (("st", "where", "--jq", ".data.result.structuredContent.cwd"), b""),
    ]
    return commands


def _rss(pid: int, field: str = "VmRSS") -> int:
    """A process's resident set (or, with ``VmHWM``, its peak) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def test_the_warm_process_gives_back_the_memory_of_a_large_result(tmp_path):
    """Before: one large result left the background process near its peak RSS until its idle exit (the red team:
    24 -> 119 MB; here +60 MB after a result of 500 000 small objects, 30 MB of output). Now a command that left RSS
    well above the last trimmed level collects and returns the freed memory (gc + malloc_trim) before its exit
    status is sent, and once more when idle: RSS falls back near what it was after a small call."""
    count = 500_000
    srv = MockServer({"tools": [*TOOLS, mock_tool("many", "echo", {"items": {"type": "array"}})]})
    srv.start()
    world = World(tmp_path)
    try:
        world.servers["bg"] = {"type": "http", "url": srv.url}
        write_mcp_json(world.config, world.servers)
        small = world.run("bg", "echo", "--text", "x", "--keep-alive")
        assert small.returncode == 0, small.stderr
        (daemon,) = world.daemons()
        before = _rss(daemon)
        body = json.dumps({"items": [{"k": i, "v": "abcdefgh"} for i in range(count)]}).encode()
        big = world.run("bg", "many", "--body", "-", "--keep-alive", stdin=body)
        assert big.returncode == 0 and len(big.stdout) > len(body), big.stderr[-2000:]
        assert world.daemons() == [daemon]  # the same process served both
        assert _rss(daemon, "VmHWM") - before > 40 << 20  # the result did cost memory
        again = world.run("bg", "echo", "--text", "y", "--keep-alive")  # the session's next call: as a user goes on
        assert again.returncode == 0, again.stderr
        # RSS falls back near the baseline: at once, or on the next idle tick of the process (what the command's
        # threads let go of only after its answer); before, it stayed ~65 MB up until the idle exit
        # (without the trim: +64 to +72 MB here; with it +4 to +37 MB, the rest heap fragmentation; with large blocks
        # kept mapped, ``keep_large_blocks_mapped``: +2 to +4 MB)
        until(lambda: _rss(daemon) < before + (24 << 20), "the warm process gave the memory back", 20)
        calls = [json.loads(e["body"])["params"] for e in srv.requests(rpc_method="tools/call")]
        assert [len(p["arguments"]["items"]) for p in calls if p["name"] == "many"] == [count]
    finally:
        world.close()
        srv.stop()


_CONNECT_AS = (
    "import socket,sys\n"
    "for _ in range(int(sys.argv[2])):\n"
    " s=socket.socket(socket.AF_UNIX)\n"
    " s.connect(sys.argv[1])\n"
    " s.recv(10)\n"  # the process closes without an answer
    " s.close()\n"
    "print('done')\n"
)


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK), reason="needs root and /usr/bin/python3"
)
def test_refused_other_uid_connections_write_one_warm_log_line_a_minute(tmp_path):
    """Before: each refused connection of another uid wrote a line to warm.log (a flood fills it). Now one line per
    uid a minute; the next says how many were refused meanwhile (RefusalNotes, checked with a clock below)."""
    world = World(tmp_path)
    link = Path(f"/tmp/bkmcp-refusals-{os.getpid()}.sock")
    try:
        assert world.run("hm", "echo", "--text", "x", "--keep-alive").returncode == 0
        (sock,) = world.sockets()
        if os.stat("/tmp").st_dev != os.stat(world.place).st_dev:
            pytest.skip("the test's folder is on another file system than /tmp (no hard link to the socket)")
        os.link(sock, link)  # past the 0700 folder, where that uid may connect; the peer check still refuses
        link.chmod(0o777)
        done = subprocess.run(
            ["/usr/bin/python3", "-c", _CONNECT_AS, str(link), "25"],
            capture_output=True, text=True, timeout=60, user=65534, group=65534, extra_groups=[], cwd="/",
        )  # fmt: skip
        assert done.stdout.strip() == "done", done.stderr
        assert world.run("hm", "echo", "--text", "y", "--keep-alive").returncode == 0  # still serves its user
        log = (world.place / "warm.log").read_text()
        assert log.count("refused a connection from uid 65534") == 1, log
    finally:
        link.unlink(missing_ok=True)
        world.close()


def test_refusal_notes_count_what_they_suppress():
    from bkmcp import RefusalNotes

    notes = RefusalNotes(every=60.0)
    assert notes.line(1000, 0.0) == "refused a connection from uid 1000"
    assert [notes.line(1000, t) for t in (1.0, 30.0, 59.9)] == [None, None, None]
    assert notes.line(1001, 2.0) == "refused a connection from uid 1001"  # per uid
    assert notes.line(1000, 60.0) == "refused a connection from uid 1000 (3 more refused since the last such line)"
    assert notes.line(1000, 121.0) == "refused a connection from uid 1000"


def test_refusal_notes_are_bounded():
    from bkmcp import RefusalNotes

    notes = RefusalNotes()
    for uid in range(1030):  # bounded: the table starts over rather than grow
        assert notes.line(uid, 0.0) is not None
    assert len(notes._seen) <= 1024


def test_warm_answers_are_the_one_shot_answers_byte_for_byte(world):
    corpus = _corpus()
    assert len(corpus) >= 30
    for args, stdin in corpus:
        one = world.run(*args, stdin=stdin)
        warm = world.run(*args, "--keep-alive", stdin=stdin)
        _same(one, warm, args)
        assert b"Traceback" not in warm.stderr
    assert world.daemons(), "the warm commands ran in a background process"
    kept = {s["server"] for s in world.sessions()["sessions"]}
    assert {"st", "hm", "hl", "hu", "hs", "pg"} <= kept


def test_warm_resources_and_prompts_are_the_one_shot_answers_issue_38(world):
    """--resources, --read (a template too), --prompts and --prompt (issue 38 item 6) over stdio and both eras of
    HTTP: the warm answer is the one-shot answer byte for byte, failures included."""
    for server in ("st", "hm", "hl"):
        for args in (
            ("--resources",),
            ("--resources", "--brief"),
            ("--read", "mock://notes/readme"),
            ("--read", "mock://notes/readme", "-r"),
            ("--read", "mock://search{?q,lang}", "--q", "a b", "--lang", "en"),
            ("--read", "mock://nowhere"),
            ("--prompts",),
            ("--prompt", "greet", "--who", "Ann", "-r"),
            ("--prompt", "greet"),  # a required argument missing
        ):
            one = world.run(server, *args)
            warm = world.run(server, *args, "--keep-alive")
            _same(one, warm, (server, *args))
    assert world.daemons(), "the warm commands ran in a background process"


def test_a_30_mb_result_is_the_same_warm(tmp_path):
    world = World(tmp_path)
    try:
        big = [*TOOLS, mock_tool("big", "big", bytes=BIG)]
        world.servers["bg"] = {
            "type": "stdio",
            "command": sys.executable,
            "args": [
                str(MOCK),
                "--stdio",
                "--quiet",
                "--scenario-json",
                json.dumps({"tools": big}),
                "--log",
                str(world.stdio_log),
            ],
        }
        write_mcp_json(world.config, world.servers)
        one = world.run("bg", "big")
        warm = world.run("bg", "big", "--keep-alive")
        assert one.returncode == 0 and len(one.stdout) > BIG
        _same(one, warm, "30 MB")
    finally:
        world.close()


def test_a_warm_session_keeps_server_state_and_one_shot_does_not(world):
    def count(*extra: str) -> int:
        done = world.run("st", "counter", *extra)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["data"]["result"]["structuredContent"]["count"]

    assert [count("--keep-alive") for _ in range(4)] == [1, 2, 3, 4]
    assert [count() for _ in range(3)] == [1, 1, 1]
    assert count("--keep-alive") == 5
    env_count = world.run("st", "counter", env={"BKMCP_KEEP_ALIVE": "5m"})
    assert json.loads(env_count.stdout)["data"]["result"]["structuredContent"]["count"] == 6
    off = world.run("st", "counter", "--keep-alive=off", env={"BKMCP_KEEP_ALIVE": "5m"})
    assert json.loads(off.stdout)["data"]["result"]["structuredContent"]["count"] == 1
    # the one stdio server process served every warm call: initialize once
    initializes = [
        e
        for e in map(json.loads, world.stdio_log.read_text().splitlines())
        if e.get("rpc_method") in ("initialize", "server/discover")
    ]
    assert len([e for e in initializes]) >= 1


def test_simultaneous_first_calls_start_exactly_one_process(world):
    procs = [world.start("hm", "echo", "--text", f"first-{i}", "--keep-alive") for i in range(50)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs if err][:3]
    assert all(err == b"" for _, err in outputs)
    assert len(world.daemons()) == 1
    texts = sorted(json.loads(e["body"])["params"]["arguments"]["text"] for e in world.http.requests("tools/call"))
    assert texts == sorted(f"first-{i}" for i in range(50))


def test_concurrent_warm_calls_are_never_lost_or_repeated(world):
    assert world.run("hl", "echo", "--text", "warm-up", "--keep-alive").returncode == 0
    world.http.reset_log()
    failures: list[Any] = []

    def client(c: int) -> None:
        for i in range(10):
            done = world.run("hl", "echo", "--text", f"c{c}-{i}", "--keep-alive")
            if done.returncode != 0 or json.loads(done.stdout)["data"]["result"]["structuredContent"] != {
                "arguments": {"text": f"c{c}-{i}"}
            }:
                failures.append(done)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, failures[:2]
    texts = [json.loads(e["body"])["params"]["arguments"]["text"] for e in world.http.requests("tools/call")]
    assert sorted(texts) == sorted(f"c{c}-{i}" for c in range(20) for i in range(10))  # each exactly once
    assert not world.http.requests("initialize"), "the legacy session was reused, never opened again"


def test_an_edited_config_or_rotated_variable_opens_a_new_session(world):
    assert world.run("hs", "echo", "--text", "a", "--keep-alive").returncode == 0
    assert world.run("hs", "echo", "--text", "b", "--keep-alive", env={"WARM_TOKEN": "tok-two-77aa"}).returncode == 0
    sent = [e["headers"].get("x-tok") for e in world.http.requests("tools/call")]
    assert sent == ["tok-one-5e1f", "tok-two-77aa"]
    listing = world.sessions()
    assert [s["server"] for s in listing["sessions"]].count("hs") == 2
    assert "tok-one-5e1f" not in json.dumps(listing) and "tok-two-77aa" not in json.dumps(listing)
    world.servers["hs"]["headers"] = {"X-Tok": "${WARM_TOKEN}", "X-Extra": "edited"}
    write_mcp_json(world.config, world.servers)
    assert world.run("hs", "echo", "--text", "c", "--keep-alive").returncode == 0
    assert world.http.requests("tools/call")[-1]["headers"].get("x-extra") == "edited"
    assert [s["server"] for s in world.sessions()["sessions"]].count("hs") == 3


def test_sigkill_of_the_background_process_mid_call_is_reported_never_resent(world):
    assert world.run("st", "counter", "--keep-alive").returncode == 0
    daemon = world.daemons()[0]
    client = subprocess.Popen(
        world.argv("st", "slow", "--keep-alive"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=world.env
    )
    until(lambda: _stdio_slow_calls(world) == 1, "the slow call reached the server", 30)
    os.kill(daemon, signal.SIGKILL)
    out, _err = client.communicate(timeout=30)
    assert client.returncode == 2
    error = json.loads(out)["error"]
    assert error["code"] == "mcp_connection_error"
    assert error["outcome"] == "unknown" and error["stage"] == "call"
    until(lambda: not world.children(), "the server died with the background process (PDEATHSIG)", 20)
    assert _stdio_slow_calls(world) == 1  # never resent
    again = world.run("st", "counter", "--keep-alive")
    assert again.returncode == 0 and json.loads(again.stdout)["data"]["result"]["structuredContent"]["count"] == 1
    assert world.daemons() and world.daemons()[0] != daemon


def test_sigkill_of_the_background_process_leaves_no_process_of_a_server_tree(world):
    """Issue 29, item 3 (docs/contract.md §14): a stdio server that forks a descendant, both ignoring SIGHUP,
    SIGTERM and EOF on stdin; SIGKILL of the background process ends the whole tree, not only the direct child."""
    tree = world.tmp / "tree.txt"
    stubborn = ROOT / "tests" / "integration" / "stubborn_stdio.py"
    world.servers["tree"] = {"type": "stdio", "command": sys.executable, "args": [str(stubborn), "--tree", str(tree)]}
    write_mcp_json(world.config, world.servers)

    def pids() -> list[int]:
        return [int(x) for x in tree.read_text().split()] if tree.is_file() else []

    try:
        done = world.run("tree", "echo", "--text", "x", "--keep-alive")
        assert done.returncode == 0, done.stderr
        until(lambda: len(pids()) == 2, "the server and its descendant recorded their pids", 30)
        assert all(process_running(p) for p in pids())
        os.kill(world.daemons()[0], signal.SIGKILL)
        until(lambda: not any(process_running(p) for p in pids()), "every process of the server's tree ended", 30)
    finally:
        for pid in pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_idle_sessions_close_and_the_process_ends_by_itself(world):
    assert world.run("st", "counter", "--keep-alive=1s").returncode == 0
    assert world.daemons() and world.children()
    until(lambda: not world.children(), "the idle session closed", 30)
    until(lambda: not world.daemons(), "the idle process ended", 30)
    assert not world.sockets()


def test_two_builds_keep_their_own_process_and_server_state(world):
    """Issue 29, item 5: each build has its own socket and process; alternating calls never stop the other's, so
    a stateful server counts on in each; ``--sessions`` shows the other build and ``--sessions --stop`` ends both."""
    copy = world.tmp / "copy" / "bkmcp.py"
    copy.parent.mkdir()
    shutil.copy(ROOT / "bkmcp.py", copy)  # another path: another build
    other = World.__new__(World)
    other.__dict__.update(world.__dict__, bkmcp=copy)

    def count(who: World) -> int:
        done = who.run("st", "counter", "--keep-alive")
        assert done.returncode == 0 and done.stderr == b"", done.stderr
        return json.loads(done.stdout)["data"]["result"]["structuredContent"]["count"]

    assert [count(who) for _ in range(3) for who in (world, other)] == [1, 1, 2, 2, 3, 3]
    assert len(world.daemons()) == 2 and len(world.children()) == 2 and len(world.sockets()) == 2
    mine, theirs = world.sessions(), other.sessions()
    assert mine["build"] != theirs["build"] and mine["pid"] != theirs["pid"]
    assert [(o["pid"], [s["server"] for s in o["sessions"]]) for o in mine["other_builds"]] == [(theirs["pid"], ["st"])]
    assert [o["pid"] for o in theirs["other_builds"]] == [mine["pid"]]
    stopped = world.run("--sessions", "--stop")
    data = json.loads(stopped.stdout)["data"]
    assert data["stopped"] is True and data["closed"] == 1 and data["pid"] == mine["pid"]
    assert [(o["pid"], o["stopped"], o["closed"]) for o in data["other_builds"]] == [(theirs["pid"], True, 1)]
    until(lambda: not world.daemons() and not world.children(), "both processes and their servers ended", 20)


def test_a_folder_that_is_not_private_is_refused_and_the_command_runs_one_shot(world):
    world.place.mkdir(mode=0o700)
    world.place.chmod(0o755)
    one = world.run("hm", "echo", "--text", "x")
    warm = world.run("hm", "echo", "--text", "x", "--keep-alive")
    assert warm.returncode == 0 and warm.stdout == one.stdout
    assert warm.stderr.decode().count("warning") == 1 and "must be 0700" in warm.stderr.decode()
    assert not world.daemons()


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK), reason="needs root and /usr/bin/python3"
)
def test_another_uid_cannot_connect(world):
    assert world.run("hm", "echo", "--text", "x", "--keep-alive").returncode == 0
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1])\nexcept OSError as e:\n print('refused', e.errno); sys.exit(0)\n"
        "try:\n"
        " s.sendall(b'R'+(14).to_bytes(4,'big')+b'{\"op\":\"list\"}')\n"
        " print('answer', s.recv(10))\n"
        "except (ConnectionResetError, BrokenPipeError):\n"
        " print('answer', b'')\n"
    )

    def attempt(path: Path) -> str:
        done = subprocess.run(
            ["/usr/bin/python3", "-c", probe, str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            user=65534,
            group=65534,
            cwd="/",
        )
        return done.stdout.strip() + done.stderr

    (sock,) = world.sockets()
    assert attempt(sock).startswith("refused 13")  # the 0700 folder
    # past the folder: a hard link to the socket where that uid may go, and a socket mode that lets it connect;
    # the process's own peer-credential check still refuses (it closes without an answer)
    link = Path(f"/tmp/bkmcp-uid-test-{os.getpid()}.sock")
    if os.stat("/tmp").st_dev != os.stat(world.place).st_dev:
        pytest.skip("the test's folder is on another file system than /tmp (no hard link to the socket)")
    os.link(sock, link)
    try:
        link.chmod(0o777)
        assert attempt(link) == "answer b''"
    finally:
        link.unlink()
    assert "refused a connection from uid 65534" in (world.place / "warm.log").read_text()


@pytest.mark.parametrize("server", ["st", "hl", "hm"])
def test_ctrl_c_cancels_a_warm_call_on_the_wire_and_exits_130(world, server):
    assert world.run(server, "counter", "--keep-alive").returncode == 0
    client = subprocess.Popen(
        world.argv(server, "slow", "--keep-alive"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=world.env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def reached() -> bool:
        if server == "st":
            return _stdio_slow_calls(world) == 1
        return any(json.loads(e["body"])["params"]["name"] == "slow" for e in world.http.requests("tools/call"))

    until(reached, "the slow call reached the server", 30)
    client.send_signal(signal.SIGINT)
    out, _err = client.communicate(timeout=30)
    assert client.returncode == 130
    error = json.loads(out)["error"]
    assert error["code"] == "mcp_cancelled" and error["outcome"] == "unknown"
    if server == "st":
        until(lambda: "notifications/cancelled" in world.stdio_log.read_text(), "the cancellation reached stdio", 10)
    elif server == "hl":
        until(lambda: world.http.requests("notifications/cancelled"), "the cancellation reached the server", 10)
    else:  # modern HTTP: the call's stream was closed while the server still worked on it

        def slow_call() -> dict:
            calls = [e for e in world.http.requests("tools/call") if json.loads(e["body"])["params"]["name"] == "slow"]
            return calls[-1]

        until(lambda: slow_call()["done"], "the server finished with the call", 10)
        # it saw the client go away before it answered (never the answer after the full 4 s)
        assert slow_call()["fault"] in ("client_closed", "drop", "client_gone"), slow_call()
    assert world.run(server, "echo", "--text", "after", "--keep-alive").returncode == 0  # the session still works


def test_help_dry_run_and_check_never_use_the_background_process(world):
    for args in (
        ("hm", "--help"),
        ("hm", "echo", "--help"),
        ("hm", "echo", "--body", "{}", "--dry-run"),
        ("hm", "--check"),
        ("st", "--check"),
    ):
        one = world.run(*args)
        warm = world.run(*args, "--keep-alive")
        assert warm.returncode == one.returncode, args
        if "--check" in args:  # its elapsed_ms differs run to run
            one_data, warm_data = json.loads(one.stdout)["data"], json.loads(warm.stdout)["data"]
            one_data.pop("elapsed_ms"), warm_data.pop("elapsed_ms")
            assert warm_data == one_data, args
        else:
            assert warm.stdout == one.stdout, args
    assert not world.daemons() and not world.sockets()


def test_sessions_without_a_process_and_stop(world):
    assert world.sessions() == {"running": False, "sessions": [], "other_builds": []}
    assert not world.daemons()
    assert world.run("st", "counter", "--keep-alive").returncode == 0
    listing = world.sessions()
    assert listing["running"] is True and [s["transport"] for s in listing["sessions"]] == ["stdio"]
    assert world.children()
    stopped = world.run("--sessions", "--stop")
    assert json.loads(stopped.stdout)["data"]["stopped"] is True
    assert not world.children()  # the servers are gone before the answer
    until(lambda: not world.daemons(), "the process ended", 10)
    assert json.loads(world.run("--sessions", "--stop").stdout)["data"] == {
        "running": False,
        "sessions": [],
        "stopped": False,
        "other_builds": [],
    }


def test_bad_keep_alive_values(world):
    bad = world.run("hm", "echo", "--text", "x", "--keep-alive=soon")
    assert bad.returncode == 1 and json.loads(bad.stderr)["error"]["code"] == "usage_error"
    env_bad = world.run("hm", "echo", "--text", "x", env={"BKMCP_KEEP_ALIVE": "soon"})
    assert env_bad.returncode == 0 and b"BKMCP_KEEP_ALIVE" in env_bad.stderr
    assert not world.daemons()
    twice = world.run("hm", "echo", "--text", "x", "--keep-alive", "--keep-alive=1m")
    assert twice.returncode == 1
    stop_alone = world.run("--stop")
    assert stop_alone.returncode == 1 and b"--sessions" in stop_alone.stderr


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_terminating_signal_closes_every_session_and_ends_the_process(world, signame):
    assert world.run("st", "counter", "--keep-alive").returncode == 0
    assert world.run("hl", "echo", "--text", "x", "--keep-alive").returncode == 0
    assert world.children()
    os.kill(world.daemons()[0], getattr(signal, signame))
    until(lambda: not world.daemons() and not world.children(), "the process and its servers ended", 20)
    assert not world.sockets()
    until(lambda: world.http.requests(http_method="DELETE"), "the legacy session was ended (DELETE)", 10)
    again = world.run("st", "counter", "--keep-alive")
    assert json.loads(again.stdout)["data"]["result"]["structuredContent"]["count"] == 1


def test_a_client_that_dies_mid_call_has_its_call_cancelled(world):
    assert world.run("st", "counter", "--keep-alive").returncode == 0
    client = subprocess.Popen(world.argv("st", "slow", "--keep-alive"), stdout=subprocess.DEVNULL, env=world.env)
    until(lambda: _stdio_slow_calls(world) == 1, "the slow call reached the server", 30)
    client.kill()
    client.wait(10)
    until(lambda: "notifications/cancelled" in world.stdio_log.read_text(), "the cancellation reached stdio", 10)
    assert world.run("st", "counter", "--keep-alive").returncode == 0  # the session survived its client


def test_the_client_loads_neither_httpx_nor_jsonschema(world, tmp_path):
    from tests.helpers import run_bkmcp_modules

    assert world.run("hm", "echo", "--text", "x", "--keep-alive").returncode == 0  # the process runs
    code, modules, proc = run_bkmcp_modules(
        tmp_path, "--config", str(world.config), "hm", "echo", "--text", "y", "--keep-alive", env=world.env
    )
    assert code == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["result"]["structuredContent"] == {"arguments": {"text": "y"}}
    assert not {m for m in modules if m.split(".")[0] in ("httpx", "httpcore", "jsonschema", "jq")}


def test_a_kept_catalogue_is_listed_again_after_the_servers_list_changed(world):
    """The one freshness rule (docs/contract.md §11.5, §14) over a real stdio child: kept between calls until its
    notifications/tools/list_changed (sent here during each call), and listed again whenever the user asks."""
    scenario = {
        "tools": TOOLS,
        "capabilities": {"tools": {"listChanged": True}},
        "notifications_before_result": {"tools/call": [{"method": "notifications/tools/list_changed"}]},
    }
    log = world.tmp / "notify-log.jsonl"
    world.servers["nt"] = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(MOCK), "--stdio", "--quiet", "--scenario-json", json.dumps(scenario), "--log", str(log)],
    }
    write_mcp_json(world.config, world.servers)

    def lists() -> int:
        return sum(1 for line in log.read_text().splitlines() if json.loads(line).get("rpc_method") == "tools/list")

    first = world.run("nt", "--tools", "--keep-alive")
    assert first.stdout == world.run("nt", "--tools").stdout
    assert lists() == 2  # the warm session listed once, the one-shot run once
    assert world.run("nt", "--tools", "--keep-alive").stdout == first.stdout  # the user asks: listed again
    assert lists() == 3
    assert world.run("nt", "echo", "--text", "x", "--keep-alive").returncode == 0  # kept: no tools/list
    assert lists() == 3
    assert world.run("nt", "echo", "--text", "y", "--keep-alive").returncode == 0  # the call's list_changed: listed
    assert lists() == 4


def test_a_declined_server_request_is_warned_on_the_commands_own_stderr(world):
    srv = MockServer({"response_mode": "sse", "faults": {"server_request_on_call": "sampling/createMessage"}})
    srv.start()
    try:
        world.servers["sr"] = {"type": "http", "url": srv.url, "protocolVersion": "2025-06-18"}
        write_mcp_json(world.config, world.servers)
        one = world.run("sr", "echo", "--text", "x")
        warm = world.run("sr", "echo", "--text", "x", "--keep-alive")
        assert b"declined it (-32601)" in one.stderr
        assert warm.stderr == one.stderr and warm.returncode == one.returncode == 2
        # stdout differs only by the mock's own count of the requests it sent (its state: one server for both)
        assert json.loads(warm.stdout)["error"] == json.loads(one.stdout)["error"]
    finally:
        srv.stop()


def test_tool_flags_beside_body_are_warned_once_the_same_warm(world):
    """Issue 27 item 2: tool flags given with --body are not sent, and one warning names them, byte for byte the
    same through the background process (it relays the command's stderr) as one-shot."""
    for server in ("st", "hm"):
        args = (server, "echo", "--body", '{"text": "b"}', "--count", "3", "--loud=true")
        one = world.run(*args)
        warm = world.run(*args, "--keep-alive")
        _same(one, warm, args)
        assert one.returncode == 0 and one.stderr.decode().count("warning") == 1
        assert b"not sent: --count, --loud" in one.stderr
        assert json.loads(one.stdout)["data"]["result"]["structuredContent"]["arguments"] == {"text": "b"}


# The other user of issue 29: owns the (world-writable, not sticky) parent of DIR, listens in a folder of its own and
# swaps it with DIR (renameat2 RENAME_EXCHANGE) in a tight loop; it answers like a warm process with a forged result
# and records every connection's bytes. On its way out it swaps back if DIR is its folder at that moment.
_IMPOSTOR = r"""
import ctypes, os, socket, sys, threading, time
parent, name, record, stop = sys.argv[1:5]
os.chdir(parent)
os.mkdir("evil", 0o700)
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join("evil", name))
listener.listen(64)
print("ready", flush=True)

def frame(kind, payload=b""):
    return kind + len(payload).to_bytes(4, "big") + payload

def serve():
    while True:
        conn, _ = listener.accept()
        conn.settimeout(2)
        got = b""
        try:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += chunk
                if len(got) >= 5 and len(got) >= 5 + int.from_bytes(got[1:5], "big"):
                    break
            conn.sendall(frame(b"A") + frame(b"O", b'{"ok": true, "data": "forged"}\n') + frame(b"X", b'{"status": 0}'))
        except OSError:
            pass
        with open(record, "a") as out:
            out.write(got.hex() + "\n")
        conn.close()

threading.Thread(target=serve, daemon=True).start()
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
swaps, end = 0, time.monotonic() + 600
while not os.path.exists(stop) and time.monotonic() < end:
    for _ in range(200):
        swaps += renameat2(-100, b"bkmcp", -100, b"evil", 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
if os.stat("bkmcp").st_uid == os.getuid():
    renameat2(-100, b"bkmcp", -100, b"evil", 2)
print(swaps, flush=True)
"""


def _require_root_linux() -> None:
    """Skip where the test cannot run (fail instead under BKMCP_INTEROP_REQUIRED=1, as CI runs: it is root there)."""
    why = ""
    if not sys.platform.startswith("linux"):
        why = "needs Linux (renameat2, /proc/self/fd)"
    elif os.geteuid() != 0:
        why = "needs root (it runs the other user as uid 54321)"
    elif not os.access("/usr/bin/python3", os.X_OK):
        why = "needs /usr/bin/python3 (run by the other uid)"
    if why and os.environ.get("BKMCP_INTEROP_REQUIRED", "") not in ("", "0"):
        pytest.fail(f"{why}; BKMCP_INTEROP_REQUIRED is set, so this is a failure, not a skip")
    if why:
        pytest.skip(why)


def test_a_swapped_folder_never_reaches_another_users_listener(world):
    """Issue 29, item 1: the client uses DIR only through a descriptor checked after opening it (no symlink, ours,
    0700) and checks its peer's uid before a byte; another uid swapping DIR for its own folder gets no connection."""
    import tempfile

    _require_root_linux()
    other = 54321
    parent = Path(tempfile.mkdtemp(prefix="bkmcp-race-", dir="/tmp"))
    os.chown(parent, other, other)
    parent.chmod(0o777)  # world-writable, no sticky bit: the other uid may rename what is in it
    world.env["XDG_RUNTIME_DIR"] = str(parent)
    world.place = parent / "bkmcp"
    impostor = None
    try:
        assert world.run("hm", "echo", "--text", "warm-up", "--keep-alive").returncode == 0
        (sock,) = world.sockets()
        record, stop = parent / "record", parent / "stop"
        impostor = subprocess.Popen(
            ["/usr/bin/python3", "-c", _IMPOSTOR, str(parent), sock.name, str(record), str(stop)],
            stdout=subprocess.PIPE,
            user=other,
            group=other,
            cwd="/",
        )
        assert impostor.stdout is not None and impostor.stdout.readline() == b"ready\n"
        sentinel = "sentinel-secret-9b1d4c"
        world.http.reset_log()
        outputs = [
            world.run("hm", "echo", "--text", f"call-{i}", "--keep-alive", env={"RACE_TOKEN": sentinel})
            for i in range(20)
        ]
        stop.touch()
        out, _ = impostor.communicate(timeout=60)
        assert int(out) > 0, "the other uid swapped the folders"
        assert os.stat(world.place).st_uid == 0, "DIR is ours again"
        records = record.read_text().split() if record.exists() else []
        leaked = [r for r in records if sentinel.encode().hex() in r]
        assert not leaked, f"{len(leaked)} of 20 calls sent the secret to the other user's listener"
        assert records == [], f"{len(records)} of 20 calls reached the other user's listener"
        for i, done in enumerate(outputs):
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["data"]["result"]["structuredContent"] == {
                "arguments": {"text": f"call-{i}"}
            }
            assert done.stderr.decode().count("warning") <= 1  # a call that met the swap ran one-shot, said once
        texts = [json.loads(e["body"])["params"]["arguments"]["text"] for e in world.http.requests("tools/call")]
        assert sorted(texts) == sorted(f"call-{i}" for i in range(20))  # the real server got each call, once
    finally:
        if impostor is not None and impostor.poll() is None:
            impostor.kill()
            impostor.wait(10)
        world.run("--sessions", "--stop")
        until(lambda: not world.daemons(), "the background process ended", 20)
        shutil.rmtree(parent, ignore_errors=True)


def test_the_background_process_holds_no_variable_of_any_client(world):
    """Issue 29, item 4: it starts with the interpreter's few variables only; each command's environment travels in
    that command's request (the token below reaches its server, never the process's own environment)."""
    first, second = "env-sentinel-first-4f2a", "env-sentinel-second-77c0"
    for token in (first, second):
        done = world.run("hs", "echo", "--text", token, "--keep-alive", env={"WARM_TOKEN": token, "OTHER": token})
        assert done.returncode == 0, done.stderr
    assert [e["headers"].get("x-tok") for e in world.http.requests("tools/call")] == [first, second]
    (daemon,) = world.daemons()
    environ = Path(f"/proc/{daemon}/environ").read_bytes()
    names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
    assert first.encode() not in environ and second.encode() not in environ
    assert "WARM_TOKEN" not in names and "OTHER" not in names and "XDG_RUNTIME_DIR" not in names
    assert names <= {
        "PATH",
        "HOME",
        "PYTHONDONTWRITEBYTECODE",
        "LC_CTYPE",
    }  # of the test's client environment, the allowed ones


def test_never_more_than_32_warm_sessions_while_many_open_together(world):
    """Issue 29, item 6: 40 distinct stdio servers called at once; when the calls end at most 32 sessions are
    kept, and at most 32 of the servers still run (the server side's count)."""
    barrier = world.tmp / "barrier"
    barrier.mkdir()
    # each server waits (bounded) until all 40 have started: every session is opening at the same time
    wait_all = (
        f'touch {barrier}/$$; n=0; while [ "$(ls {barrier} | wc -l)" -lt 40 ] && [ $n -lt 1200 ]; do '
        'sleep 0.05; n=$((n+1)); done; exec "$0" "$@"'
    )
    st = world.servers["st"]
    for i in range(40):  # another name: another session key
        world.servers[f"s{i}"] = {
            "type": "stdio",
            "command": "/bin/sh",
            "args": ["-c", wait_all, st["command"], *st["args"]],
        }
    write_mcp_json(world.config, world.servers)
    procs = [world.start(f"s{i}", "echo", "--text", f"s{i}", "--keep-alive") for i in range(40)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs if err][:3]
    for i, (out, _err) in enumerate(outputs):
        assert json.loads(out)["data"]["result"]["structuredContent"] == {"arguments": {"text": f"s{i}"}}
    assert len(list(barrier.iterdir())) == 40  # all opened at once
    until(lambda: len(world.children()) <= 32, "the servers beyond the limit ended with their calls", 30)
    listing = world.sessions()["sessions"]
    assert 0 < len(listing) <= 32 and len(world.children()) <= 32
    assert len(world.children()) == len(listing)  # every running server is a kept session's


def test_sessions_takes_jq_and_raw_like_every_envelope(world):
    """Issue 28 point 10: `--sessions --jq …` was a usage error; it projects the listing like any envelope."""
    assert world.run("hm", "echo", "--text", "x", "--keep-alive").returncode == 0
    listed = world.run("--sessions", "--jq", ".data.sessions[].server", "-r")
    assert (listed.returncode, listed.stdout) == (0, b"hm\n"), listed.stderr
    quoted = world.run("--sessions", "--jq", ".data.running")
    assert (quoted.returncode, quoted.stdout) == (0, b"true\n"), quoted.stderr
    bad = world.run("--sessions", "--jq", ".data[")  # compiled before anything is asked
    assert bad.returncode == 1 and json.loads(bad.stderr.splitlines()[-1])["error"]["code"] == "invalid_jq_expression"
    assert world.run("--sessions", "--raw").returncode == 1  # no text to print without --jq
    assert len(world.daemons()) == 1


def _fds_naming(pid: int, target: str) -> list[str]:
    """The descriptors of process ``pid`` that name ``target`` (a path, or ``pipe:[N]``)."""
    found = []
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in entries:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                found.append(fd)
        except OSError:
            continue
    return found


@pytest.mark.skipif(shutil.which("flock") is None or shutil.which("sh") is None, reason="needs flock(1) and sh")
def test_a_lock_the_first_client_held_is_free_once_it_exits(world):
    """Issue 36, item 4: ``( flock -n 9 …; bkmcp … --keep-alive ) 9>lock``: the background process (and the
    watchdog of its stdio server) starts without the client's descriptor 9, so the lock is free as soon as the
    client exits, while the background process and its server live on."""
    lock = world.tmp / "lock"
    argv = " ".join(f"'{a}'" for a in world.argv("st", "counter", "--keep-alive"))
    script = f'( flock -n 9 || exit 99; exec {argv} >/dev/null ) 9>"{lock}"'
    done = subprocess.run(["sh", "-c", script], env=world.env, cwd=world.tmp, timeout=120, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert world.daemons() and world.children()
    holders = [pid for pid in _processes() if _fds_naming(pid, str(lock))]
    assert holders == []
    free = subprocess.run(["flock", "-n", str(lock), "true"], timeout=30)
    assert free.returncode == 0  # on the old code: 1, held by the background process for its life


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_a_pipe_the_first_client_held_ends_when_the_client_does(world):
    """Issue 36, item 4: ``{ bkmcp … --keep-alive 5>&1 >/dev/null; } | cat`` ends when the client does, not at
    the background process's idle timeout: the process never holds the client's descriptor 5 (the pipe to cat)."""
    argv = " ".join(f"'{a}'" for a in world.argv("st", "counter", "--keep-alive"))
    script = f"{{ {argv} 5>&1 >/dev/null; }} | cat"
    done = subprocess.run(["sh", "-c", script], env=world.env, cwd=world.tmp, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr  # on the old code: TimeoutExpired (cat waits for the idle timeout)
    assert world.daemons()  # it ended although the background process lives on
