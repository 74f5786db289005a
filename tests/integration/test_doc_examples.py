"""Every example marked ```` ```sh mock ```` in README.md, README_zh.md, docs/user-guide.md,
docs/resident-registry.md and docs/resident.md runs through ``python bkmcp.py`` against the bundled mock servers
(on 127.0.0.1, started by ``mock_env``: what ``make examples`` starts) and exits with the status its ``# exit N``
comment states, and its output is checked (issue 17 item 7): an output block right after it (```` ```json ```` or a
bare fence) must be what the commands really printed, line by line in order (``...`` skips lines, ``…`` skips text
inside a line; ports, the temporary folder and timings are normalised); without one, each command's output must be
the envelope its exit status promises (``ok: true`` on stdout for 0, a failure on stdout for 2 and on stderr for
1), and a resident session's answers must all be ``success: true`` without ``errors``. The checks of the
documentation that need no server are in tests/unit/test_docs.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mock_server.examples import DEMO_TOKEN, start_examples
from tests.helpers import README_EN, README_ZH, RESIDENT, RESIDENT_REGISTRY, ROOT, USER_GUIDE

pytestmark = [pytest.mark.integration]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


_BLOCK = re.compile(r"^```sh mock\n(.*?)^```", re.M | re.S)
_BLOCK_AND_OUTPUT = re.compile(r"^```sh mock\n(.*?)^```\n\n?(?:^```(?:json|text)?\n(.*?)^```\n)?", re.M | re.S)
_EXIT = re.compile(r"\s+# exit (\d+)\s*$")


def _examples(path: Path) -> list[tuple[str, int]]:
    """(command line, documented exit status) of every line of every ```sh mock block."""
    found = []
    for block in _BLOCK.findall(_read(path)):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            match = _EXIT.search(line)
            assert match, f"{path.name}: a mock example lacks its '# exit N' comment: {line!r}"
            found.append((line[: match.start()].strip(), int(match.group(1))))
    return found


def _blocks(path: Path) -> list[tuple[list[tuple[str, int]], str | None]]:
    """Each mock block: its (command, exit status) lines and the output block right after it, if any."""
    found = []
    for match in _BLOCK_AND_OUTPUT.finditer(_read(path)):
        commands = []
        for line in match.group(1).splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                exit_comment = _EXIT.search(line)
                assert exit_comment, f"{path.name}: a mock example lacks its '# exit N' comment: {line!r}"
                commands.append((line[: exit_comment.start()].strip(), int(exit_comment.group(1))))
        found.append((commands, match.group(2)))
    return found


def _normalise(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "/tmp/docs")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r'"(elapsed_ms|ms|fetched_at)":[0-9.]+', r'"\1":N', text)
    return re.sub(r"\(\d+ ms\)", "(N ms)", text)


def _line_pattern(line: str) -> re.Pattern[str]:
    parts = re.split(r"\s*…\s*", line)  # "…" (and the spaces around it) stands for any text
    return re.compile(".*".join(re.escape(part) for part in parts) + r"\s*")


def check_shown_output(shown: str, printed: str, tmp: Path) -> str | None:
    """None when every line of ``shown`` (a doc's output block) is, in order, a line the commands printed."""
    actual = _normalise(printed, tmp).splitlines()
    position = 0
    for line in _normalise(shown, tmp).splitlines():
        if line.strip() in ("...", "…") or not line.strip():
            continue
        pattern = _line_pattern(line.rstrip())
        while position < len(actual) and not pattern.fullmatch(actual[position]):
            position += 1
        if position == len(actual):
            return f"the documented line {line!r} is not in the output (in this order)"
        position += 1
    return None


def check_envelope(command: str, status: int, done: subprocess.CompletedProcess[str]) -> str | None:
    """Without an output block: the output is what the exit status promises (contract §7, §11.1)."""
    stream = done.stderr if status == 1 else done.stdout
    lines = [line for line in stream.splitlines() if line.startswith("{")]
    if "--resident" in command:
        answers = [json.loads(line) for line in lines]
        if not answers or not all(a.get("success") is True for a in answers):
            return f"a resident answer failed or none came: {done.stdout[-1000:]}"
        if any((a.get("result") or {}).get("errors") for a in answers):  # list_tools reports a server's failure
            return f"a resident answer reports errors: {done.stdout[-1000:]}"
        return None
    if not lines:
        return None if status == 0 and done.stdout.strip() else f"no envelope (status {status}): {stream[-500:]}"
    envelope = json.loads(lines[-1])
    if isinstance(envelope, dict) and "ok" in envelope and envelope["ok"] is not (status == 0):
        return f"exit {status} with an envelope saying ok={envelope['ok']}"
    return None


def _example_files() -> list[Path]:
    return [README_EN, README_ZH, USER_GUIDE, RESIDENT_REGISTRY] + ([RESIDENT] if RESIDENT.exists() else [])


@pytest.fixture(scope="module")
def mock_env(tmp_path_factory: pytest.TempPathFactory):
    """The servers the examples name (docs/user-guide.md, "Trying the examples"): ``demo`` (HTTP, Bearer token),
    ``demo-stdio``, ``lab`` (tools that fail in instructive ways), ``pages`` (a pagination cycle), ``locked`` (401
    for this token), ``denied`` (403), ``offline`` (nothing listens), ``needs-var`` (an unset variable),
    ``conflict`` (two identity headers): what ``make examples`` starts (mock_server/examples.py), in a fresh folder."""
    tmp = tmp_path_factory.mktemp("docs-examples")
    mocks, exports = start_examples(tmp, [sys.executable, str(ROOT / "bkmcp.py")])
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        **exports,
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    try:
        yield tmp, env
    finally:
        for server in mocks:
            server.stop()


def run_example(command: str, tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run one documented command line: ``bkmcp ARGS``, optionally fed by ``echo 'TEXT' |``."""
    tokens = shlex.split(command)
    stdin = ""
    if "|" in tokens:
        left, tokens = tokens[: tokens.index("|")], tokens[tokens.index("|") + 1 :]
        if left[:1] == ["echo"] and len(left) == 2:
            stdin = left[1] + "\n"
        elif left[:2] == ["printf", "%s\\n"]:  # printf '%s\n' 'LINE' 'LINE' …: one line per argument
            stdin = "".join(line + "\n" for line in left[2:])
        else:
            pytest.fail(f"only `echo 'TEXT' |` and `printf '%s\\n' 'LINE'… |` pipes are supported: {command}")
    assert tokens[:1] == ["bkmcp"], f"a mock example must run bkmcp: {command}"
    return subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), *tokens[1:]],
        input=stdin,
        text=True,
        capture_output=True,
        cwd=tmp,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("path", _example_files(), ids=lambda p: p.name)
def test_documented_mock_examples_run_and_exit_as_documented(path: Path, mock_env) -> None:
    tmp, env = mock_env
    examples = _examples(path)
    least = {"README.md": 5, "README_zh.md": 5, "user-guide.md": 20}.get(path.name, 1)
    assert len(examples) >= least, f"{path.name}: {len(examples)} mock example(s), expected at least {least}"
    for commands, shown in _blocks(path):
        printed = ""
        for command, status in commands:
            done = run_example(command, tmp, env)
            assert done.returncode == status, (
                f"{path.name}: `{command}` exited {done.returncode}, documented "
                f"{status}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            )
            assert "Traceback" not in done.stderr, done.stderr
            assert DEMO_TOKEN not in done.stdout + done.stderr, f"`{command}` printed the token"
            printed += done.stdout + done.stderr
            if shown is None:
                problem = check_envelope(command, status, done)
                assert problem is None, f"{path.name}: `{command}`: {problem}"
        if shown is not None:
            problem = check_shown_output(shown, printed, tmp)
            assert problem is None, f"{path.name}: {[c for c, _ in commands]}: {problem}\nprinted:\n{printed[-3000:]}"


def test_output_check_reads_wildcards_and_refuses_what_was_not_printed(tmp_path: Path) -> None:
    printed = (
        f'{{"ok":true,"data":{{"config_file":"{tmp_path}/mcp.json","elapsed_ms":17}}}}\nbkmcp demo echo\n  a\n  b\n'
    )
    assert (
        check_shown_output(
            '{"ok":true,"data":{"config_file":"/tmp/docs/mcp.json","elapsed_ms":110}}', printed, tmp_path
        )
        is None
    )
    assert check_shown_output("bkmcp demo …\n...\n  b", printed, tmp_path) is None
    assert check_shown_output("  b\n  a", printed, tmp_path) is not None  # order matters
    assert check_shown_output('{"ok":false}', printed, tmp_path) is not None
    done = subprocess.CompletedProcess([], 0, '{"task_id":"t1","success":false}\n', "")
    assert check_envelope("bkmcp --resident --registry r.db", 0, done) is not None
    cancelled = '{"task_id":"t2","success":true,"result":{"tools":[],"errors":[{"server_name":"demo"}]}}\n'
    done = subprocess.CompletedProcess([], 0, cancelled, "")
    assert check_envelope("bkmcp --resident --registry r.db", 0, done) is not None  # docs/resident.md "Try it" was so


def test_example_parser_reads_exit_comments(tmp_path: Path) -> None:
    """The harness itself: a block's lines and exit statuses are read; a line without `# exit N` is refused."""
    doc = tmp_path / "x.md"
    doc.write_text(
        "```sh mock\n# a comment\nbkmcp demo --check   # exit 0\n\nbkmcp nope --check  # exit 1\n```\n"
        "```sh\nbkmcp not-run\n```\n",
        encoding="utf-8",
    )
    assert _examples(doc) == [("bkmcp demo --check", 0), ("bkmcp nope --check", 1)]
    doc.write_text("```sh mock\nbkmcp demo --check\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="exit N"):
        _examples(doc)


def test_example_runner_feeds_stdin_from_echo_and_printf(mock_env) -> None:
    """The runner's pipes reach bkmcp's stdin (so `--body -` and resident sessions in the docs are real)."""
    tmp, env = mock_env
    for command in (
        """echo '{"text": "piped"}' | bkmcp demo echo --body - --dry-run""",
        """printf '%s\\n' '{"text": "piped"}' | bkmcp demo echo --body - --dry-run""",
    ):
        done = run_example(command, tmp, env)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["data"]["arguments"] == {"text": "piped"}
    assert (tmp / "registry.db").is_file()


def _resident_actions() -> list[tuple[str, str | None]]:
    """docs/resident.md, "Actions, one example each": every command line of its ```json blocks, in order, each with
    the answer the doc shows for its task_id (None when it shows none). An answer wrapped over several lines
    continues on lines that start with a space."""
    text = _read(RESIDENT)
    section = text[text.index("## Actions, one example each") :]
    section = section[: section.index("\n## ", 1)]
    commands: list[tuple[str, str | None]] = []
    for block in re.findall(r"^```json\n(.*?)^```", section, re.M | re.S):
        lines: list[str] = []
        for line in block.splitlines():
            if line.startswith(" ") and lines:
                lines[-1] += line[1:]
            elif line.strip():
                lines.append(line)
        answers = {json.loads(re.sub(r"…", "", a.split(",", 1)[0] + "}"))["task_id"]: a for a in lines[1:]}
        for line in lines:
            if line.startswith('{"command"'):
                commands.append((line, answers.get(json.loads(line)["task_id"])))
    return commands


def test_resident_action_examples_answer_as_documented(mock_env) -> None:
    """Issue 28 item 9: every per-action example of docs/resident.md runs against the registry ``make examples``
    leaves (``resident.db``), in the doc's order in one resident process, and each answer is the one shown."""
    tmp, env = mock_env
    actions = _resident_actions()
    assert [json.loads(c)["params"]["action"] for c, _ in actions] == [
        "init",
        "list_servers",
        "connect_server",
        "disconnect_server",
        "disconnect_server",
        "list_tools",
        "refresh_tools",
        "call_tool",
        "list_resources",
        "read_resource",
        "read_resource",
        "list_prompts",
        "get_prompt",
        "read_skill",
        "shutdown",
    ]
    assert sum(1 for _, shown in actions if shown is not None) == 14
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bkmcp.py"), "--resident", "--registry", "resident.db"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for command, shown in actions:
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
            answer = proc.stdout.readline()
            assert json.loads(answer)["task_id"] == json.loads(command)["task_id"], answer
            assert json.loads(answer)["success"] is True, answer
            if shown is not None:
                pattern = _line_pattern(_normalise(shown, tmp))
                assert pattern.fullmatch(_normalise(answer.rstrip("\n"), tmp)), (
                    f"documented:\n{shown}\nanswered:\n{answer}"
                )
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    stderr = proc.stderr.read() if proc.stderr is not None else ""
    assert DEMO_TOKEN not in stderr and "readable by group/others" not in stderr, stderr


_REAL_BLOCK = re.compile(r"^```sh real\n(.*?)^```", re.M | re.S)


def _real_examples(path: Path) -> list[tuple[str, int]]:
    """(command line, documented exit status) of every line of every ```sh real block: examples that name a real
    server (issue 40 item 7: an example nobody ran named a flag the server does not have)."""
    found = []
    for block in _REAL_BLOCK.findall(_read(path)):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                match = _EXIT.search(line)
                assert match, f"{path.name}: a real-server example lacks its '# exit N' comment: {line!r}"
                found.append((line[: match.start()].strip(), int(match.group(1))))
    return found


@pytest.mark.interop
def test_documented_real_server_examples_run_against_those_servers(
    tmp_path: Path, everything_stdio_argv, real_stdio_argv
) -> None:
    """Issue 40 item 7: every ```sh real example runs against the real server it names, through the editor files
    it names, written as those editors write them (Claude Desktop: command/args; Cursor: the same beside a url-only
    remote entry), and exits as documented; a failure names the --config it was run with in its hint."""
    examples = [(path, command, status) for path in _example_files() for command, status in _real_examples(path)]
    assert len(examples) >= 4, examples
    time_argv = real_stdio_argv("time-mcp")
    desktop = {"everything": {"command": everything_stdio_argv[0], "args": everything_stdio_argv[1:]}}
    cursor = {
        "time": {"command": time_argv[0], "args": time_argv[1:]},
        "remote": {"url": "http://127.0.0.1:9/mcp"},  # a Cursor remote entry: Streamable HTTP, not selected here
    }
    for relative, servers in ((".config/Claude/claude_desktop_config.json", desktop), (".cursor/mcp.json", cursor)):
        (tmp_path / relative).parent.mkdir(parents=True)
        (tmp_path / relative).write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    for path, command, status in examples:
        done = run_example(command, tmp_path, env)
        assert done.returncode == status, f"{path.name}: `{command}` exited {done.returncode}:\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, done.stderr
        if status == 1:
            hint = json.loads(done.stderr.strip().splitlines()[-1])["error"]["hint"]
            assert f"--config {tmp_path}/" in hint, hint
