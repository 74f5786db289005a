"""Issue 28 item 6: completion that knows the server, in a real interactive bash, zsh and fish under tmux.

The test types into the shell (``tmux send-keys``) and reads the screen (``capture-pane``): after ``bkmcp <server>``
the tool names, after ``bkmcp <server> <tool>`` that tool's flags and only the options valid there, never a file
name in those positions. The names come from the server: the mock's request log shows the ``tools/list`` each
completion sent, or, with a warm session alive (``--keep-alive``), that the kept server process answered and no
other one started. Every process a completion started is gone when it ends; teardown stops the warm process, the
tmux server and fails when any server process of the test is left.

Issue 36 items 2 and 3: server names a shell would expand run nothing and are not offered (bash, zsh, fish); Tab
starts no stdio server of a config named on the line, and one of the user's own config only in its ``cwd`` or
``$HOME``, never a relative command or the files of the shell's directory (marker files show what ran, and where).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, process_running, until, write_mcp_json
from tests.integration.test_warm_sessions import World

REQUIRED = os.environ.get("BKMCP_INTEROP_REQUIRED") == "1"  # CI (.ci/run installs tmux, zsh, fish): never skipped


def _need(program: str) -> None:
    if shutil.which(program) is None:
        if REQUIRED:
            pytest.fail(f"{program} is not installed (.ci/run installs it)")
        pytest.skip(f"{program} is not installed")


class Shell:
    """An interactive shell in a detached tmux session on a socket of the test's own."""

    def __init__(self, tmp: Path, kind: str, env: dict[str, str]) -> None:
        self.socket = str(tmp / "tmux.sock")
        self.count = 0  # commands run: each waits for its own end marker
        self.product = "(math 6 x 7)" if kind == "fish" else "$((6*7))"  # 42 only once the shell ran the line
        fish_init = "function fish_prompt; echo '$ '; end; set -g fish_greeting; set -g fish_autosuggestion_enabled 0"
        argv = {
            "bash": ["bash", "--norc", "--noprofile", "-i"],
            "zsh": ["zsh", "-f", "-i"],
            "fish": ["fish", "--no-config", "-i", "-C", fish_init],
        }[kind]
        self.run("new-session", "-d", "-x", "200", "-y", "60", "-c", str(tmp), *argv, env=env)
        self.pids = [int(pid) for pid in self.run("display-message", "-p", "-t", "0", "#{pid} #{pane_pid}").split()]

    def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "0", *keys)

    def type(self, text: str) -> None:
        self.run("send-keys", "-t", "0", "-l", text)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "0")

    def command(self, line: str) -> None:
        """Run ``line`` and wait until it printed its own end marker (the screen is cleared first)."""
        self.count += 1
        self.keys("C-u")
        self.type(f"clear; {line}; echo done-{self.product}-{self.count}")
        self.keys("Enter")
        until(lambda: f"done-42-{self.count}" in self.screen(), f"the shell ran {line!r}", 60)

    def complete(self, line: str, expect: str, tabs: int = 1) -> str:
        """Type ``line``, press Tab ``tabs`` times and return the screen once ``expect`` is on it."""
        self.command("true")
        self.keys("C-u")
        self.type(line)
        for _ in range(tabs):
            self.keys("Tab")
        until(lambda: expect in self.screen(), f"{expect!r} after {line!r}<Tab>", 60)
        screen = self.screen()
        self.keys("C-u")  # not C-c: the shell's SIGINT handling flushes keys typed next (the next line lost its c)
        return screen

    def tab(self, line: str) -> None:
        """Type ``line``, press Tab, and return once the completion has ended (the shell then ran the next line)."""
        self.command("true")
        self.keys("C-u")
        self.type(line)
        self.keys("Tab")
        self.keys("C-u")
        self.count += 1
        self.type(f"clear; echo tabbed-{self.product}-{self.count}")
        self.keys("Enter")
        until(lambda: f"tabbed-42-{self.count}" in self.screen(), f"the Tab after {line!r} returned", 60)

    def close(self) -> None:
        """Stop the tmux server; its shell and it are gone before this returns."""
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=60, check=False)
        until(lambda: not any(process_running(pid) for pid in self.pids), "tmux and its shell ended", 30)


def _count(log: Path, method: str) -> int:
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if json.loads(line).get("rpc_method") == method)


def _open_shell_world(kind: str, tmp_path: Path):
    _need("tmux")
    _need(kind)
    world = World(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bkmcp").write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "bkmcp.py"} "$@"\n')
    (bindir / "bkmcp").chmod(0o755)
    (tmp_path / "ecfile").write_text("")  # a file that would be offered where a tool name goes
    (tmp_path / "--tefile").write_text("")
    script = tmp_path / f"complete.{kind}"
    done = world.run("--completion", kind)
    assert done.returncode == 0, done.stderr
    script.write_bytes(done.stdout)
    env = {
        **world.env,
        "PATH": f"{bindir}:{world.env['PATH']}",
        "BK_CLI_CONFIG_DIR": str(tmp_path),
        "PS1": "$ ",
        "PROMPT": "$ ",
        "TERM": "xterm",
    }
    shell = Shell(tmp_path, kind, env)
    try:
        until(lambda: "$" in shell.screen(), "the shell's prompt", 60)
        if kind == "bash":  # one Tab lists the candidates, all of them, no pager
            shell.command("bind 'set show-all-if-ambiguous on'; bind 'set completion-query-items 0'")
            shell.command("bind 'set page-completions off'; bind 'set bell-style none'")
        elif kind == "zsh":
            shell.command("autoload -U compinit && compinit -u; setopt nolistbeep nobeep")
        shell.command(f"source {script}")
        yield kind, shell, world
    finally:
        shell.close()
        world.close()  # stops the warm process and fails when a server process of the test is left


@pytest.fixture(params=["bash", "zsh", "fish"])
def shell_world(request, tmp_path):
    """The three shells bkmcp prints a script for."""
    yield from _open_shell_world(request.param, tmp_path)


def test_completion_offers_the_servers_tools_then_the_tools_flags(shell_world):
    """Issue 28 item 6: tool names after the server, the tool's flags (and the call options) after the tool, from
    a tools/list the server received on each completion; never a file name there."""
    _kind, shell, world = shell_world
    lists = len(world.http.requests("tools/list"))
    screen = shell.complete("bkmcp hm ", "noop")
    for name in ("echo", "pick", "add", "fail", "counter", "slow"):
        assert name in screen, screen
    assert "ecfile" not in screen and "mcp.json" not in screen
    assert len(world.http.requests("tools/list")) > lists  # the names came from the server

    screen = shell.complete("bkmcp hm ec", "bkmcp hm echo")  # unique: the file ecfile is not a candidate
    assert "ecfile" not in screen

    screen = shell.complete("bkmcp hm echo --", "--count")
    for flag in ("--text", "--ratio", "--loud", "--tags", "--options", "--body", "--dry-run", "--jq", "--raw"):
        assert flag in screen, screen
    for wrong in ("--check", "--tools", "--resident", "--registry", "--sessions", "--completion", "--tefile"):
        assert wrong not in screen, screen

    screen = shell.complete("bkmcp hm echo --te", "--text")
    assert "--tefile" not in screen

    screen = shell.complete("bkmcp --timeout 5s hm add --", "--a")  # global options before the server: skipped
    assert "--b" in screen and "--text" not in screen

    screen = shell.complete("bkmcp hm --", "--tools")  # after the server: the options valid there
    assert "--check" in screen and "--brief" in screen and "--body" not in screen and "--resident" not in screen


def test_a_warm_session_answers_the_completion_and_a_cold_one_leaves_nothing_running(shell_world):
    """Issue 28 item 6 / contract §14: with the server's session kept warm, the completion asks the kept process
    (no second server process starts); without one, one bounded connect whose server is gone at the end."""
    _kind, shell, world = shell_world
    shell.command("bkmcp st --tools --keep-alive >/dev/null")
    assert _count(world.stdio_log, "server/discover") == 1 and len(world.children()) == 1
    warm_pid = world.children()
    screen = shell.complete("bkmcp st ", "noop")
    assert "counter" in screen and "ecfile" not in screen
    screen = shell.complete("bkmcp st echo --", "--count")
    assert _count(world.stdio_log, "server/discover") == 1  # served by the kept session: no server started
    assert world.children() == warm_pid
    assert world.sessions()["sessions"][0]["server"] == "st"

    shell.command("bkmcp --sessions --stop >/dev/null")
    until(lambda: not world.children(), "the warm server ended", 30)
    lists = _count(world.stdio_log, "tools/list")
    screen = shell.complete("bkmcp st ", "noop")
    assert "counter" in screen
    assert _count(world.stdio_log, "server/discover") == 2 and _count(world.stdio_log, "tools/list") == lists + 1
    until(lambda: not world.children(), "the completion's server ended", 30)  # the completion has returned
    assert not world.daemons()  # a cold completion starts no background process


def test_completion_prints_nothing_when_the_server_cannot_answer(shell_world, tmp_path):
    """A server that does not exist, or that fails to start: no candidates (no file names either), no output."""
    _kind, shell, world = shell_world
    world.servers["gone"] = {"type": "http", "url": "http://127.0.0.1:9/mcp"}
    world.servers["bad"] = {"type": "stdio", "command": str(tmp_path / "no-such-program")}
    world.config.write_text(json.dumps({"mcpServers": world.servers}))
    for server in ("gone", "bad", "unknown"):
        shell.command("true")
        shell.keys("C-u")
        shell.type(f"bkmcp {server} ecf")
        shell.keys("Tab")  # whatever it completed stays on the line, which then runs
        shell.type(f"; echo ran-{shell.product}-{server}")
        shell.keys("Enter")
        until(lambda marker=f"ran-42-{server}": marker in shell.screen(), "the line ran", 60)
        screen = shell.screen()
        assert f"bkmcp {server} ecf; echo" in screen and "ecfile" not in screen, screen


def _marker_script(path: Path, marker: Path, then: str = "") -> Path:
    """An executable that leaves ``marker`` (holding its working directory) when it starts, then runs ``then``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\npwd >> "{marker}"\n{then}\n')
    path.chmod(0o755)
    return path


def test_hostile_server_names_are_never_expanded_or_offered(shell_world, tmp_path):
    """Issue 36 item 2: a config named on the line (a project's .mcp.json) with server names that a shell would
    expand — command substitution, backticks, ``${…}``, ``~user``, a glob — runs nothing on Tab in bash, zsh or
    fish, and only the safe names are offered; listing the names starts none of the servers."""
    kind, shell, _world = shell_world
    markers = tmp_path / "markers"
    markers.mkdir()
    started = _marker_script(tmp_path / "bin" / "started", markers / "started")
    hostile = [
        f"$(touch${{IFS}}{markers}/dollar)",
        f"`touch${{IFS}}{markers}/backtick`",
        f"${{x:-$(touch${{IFS}}{markers}/brace)}}",
        f"$(id>{markers}/redirect)",
        "~root",
        "*",
    ]
    project = tmp_path / "project"
    project.mkdir()
    servers = {name: {"command": str(started)} for name in [*hostile, "docs", "dev"]}
    config = write_mcp_json(project / ".mcp.json", servers)
    for line in (f"bkmcp --config {config} ", f"bkmcp --config {config} d", f"bkmcp --config={config} "):
        shell.tab(line)
    screen = shell.complete(f"bkmcp --config {config} d", "docs")
    assert "dev" in screen, screen
    screen = shell.complete(f"bkmcp --config {config} ", "docs", tabs=2 if kind == "zsh" else 1)  # zsh: `d`, list
    assert sorted(p.name for p in markers.iterdir()) == []  # nothing ran, no server started
    for word in ("touch", "markers", "/root", "~root", "ecfile", "project", "complete."):
        assert word not in screen.split("$ bkmcp")[-1].split("\n", 1)[-1], screen  # among the offered words


def test_tab_after_a_config_named_on_the_line_starts_no_stdio_server(shell_world, tmp_path):
    """Issue 36 item 3 / contract §2: after ``--config FILE SERVER`` Tab starts none of that file's stdio servers
    (their names come only from a live warm session); an HTTP server of the file still answers."""
    _kind, shell, world = shell_world
    markers = tmp_path / "markers"
    markers.mkdir()
    stdio = [world.servers["st"]["command"], *world.servers["st"]["args"]]
    server = _marker_script(tmp_path / "bin" / "server", markers / "started", "exec " + shlex.join(stdio))
    project = write_mcp_json(tmp_path / "project.json", {"srv": {"command": str(server)}, "hm": world.servers["hm"]})
    for line in (
        f"bkmcp --config {project} srv ",
        f"bkmcp --config={project} srv echo --",
        f"bkmcp --config {world.config} st ",
    ):
        shell.tab(line)
    assert not (markers / "started").exists()
    assert _count(world.stdio_log, "server/discover") == 0  # `st` of a named config: not started either
    screen = shell.complete(f"bkmcp --config {project} hm ", "noop")  # HTTP: asked as before
    assert "counter" in screen
    screen = shell.complete("bkmcp srv ", "srv")  # the default config has no `srv`: nothing started
    assert not (markers / "started").exists()


def test_tab_starts_a_default_config_server_in_its_cwd_or_home_never_the_shells_directory(shell_world, tmp_path):
    """Issue 36 item 3 / contract §2: Tab pressed inside a cloned repository starts a stdio server of the user's own
    config in the entry's ``cwd``, else in ``$HOME`` (the tool names still come from it)."""
    _kind, shell, world = shell_world
    markers = tmp_path / "markers"
    markers.mkdir()
    home, repo, elsewhere = Path(world.env["HOME"]), tmp_path / "repo", tmp_path / "elsewhere"
    repo.mkdir()
    elsewhere.mkdir()
    stdio = "exec " + shlex.join([world.servers["st"]["command"], *world.servers["st"]["args"]])
    wrapper = _marker_script(tmp_path / "bin" / "wrapper", markers / "wrapper", stdio)
    world.servers.update({"wd": {"command": str(wrapper)}, "wc": {"command": str(wrapper), "cwd": str(elsewhere)}})
    world.config.write_text(json.dumps({"mcpServers": world.servers}))
    shell.command(f"cd {repo}")
    screen = shell.complete("bkmcp wd ", "noop")
    assert "counter" in screen
    screen = shell.complete("bkmcp wc ", "noop")
    assert "counter" in screen
    assert (markers / "wrapper").read_text().splitlines() == [str(home), str(elsewhere)]
    until(lambda: not world.children(), "the completions' servers ended", 30)


def test_tab_never_starts_a_relative_command_or_the_repositorys_files(shell_world, tmp_path):
    """Issue 36 item 3 / contract §2: from the user's own config, Tab never starts a relative ``command``
    (``./server`` even with a ``cwd``, ``bin/x``), nor a bare name found through a relative PATH entry; and
    ``python3 server.py`` (python3 from PATH) runs in ``$HOME``, so the repository's ``server.py`` never runs."""
    _kind, shell, world = shell_world
    markers = tmp_path / "markers"
    markers.mkdir()
    repo, elsewhere = tmp_path / "repo", tmp_path / "elsewhere"
    _marker_script(elsewhere / "server", markers / "relative-with-cwd")
    _marker_script(repo / "bin" / "x", markers / "relative")
    _marker_script(repo / "tool", markers / "dot-path")
    (repo / "server.py").write_text(f"open({str(markers / 'python-arg')!r}, 'w').close()\n")
    world.servers.update(
        {
            "rel": {"command": "./server", "cwd": str(elsewhere)},
            "rel2": {"command": "bin/x"},
            "dot": {"command": "tool", "env": {"PATH": f".:{os.path.dirname(shutil.which('sh') or '/bin/sh')}"}},
            "py": {"command": "python3", "args": ["server.py"]},
        }
    )
    world.config.write_text(json.dumps({"mcpServers": world.servers}))
    shell.command(f"cd {repo}")
    for server in ("rel", "rel2", "dot", "py"):
        shell.tab(f"bkmcp {server} ")
    assert sorted(p.name for p in markers.iterdir()) == []
