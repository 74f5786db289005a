"""Every example marked ```` ```sh mock ```` in README.md, README_zh.md, docs/user-guide.md and docs/resident.md
runs through ``python bkmcp.py`` against the bundled mock servers (on 127.0.0.1, started by ``mock_env``) and exits
with the status its ``# exit N`` comment states, never printing the demo token. The checks of the documentation
that need no server are in tests/unit/test_docs.py.
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

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool
from tests.helpers import ROOT, write_mcp_json

pytestmark = [pytest.mark.integration]

DOCS = ROOT / "docs"
README_EN = ROOT / "README.md"
README_ZH = ROOT / "README_zh.md"
USER_GUIDE = DOCS / "user-guide.md"
RESIDENT = DOCS / "resident.md"

# The tokens the mock examples use (documented in docs/user-guide.md, "Trying the examples").
DEMO_TOKEN = "demo-secret-token"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


_BLOCK = re.compile(r"^```sh mock\n(.*?)^```", re.M | re.S)
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


def _example_files() -> list[Path]:
    return [README_EN, README_ZH, USER_GUIDE] + ([RESIDENT] if RESIDENT.exists() else [])


@pytest.fixture(scope="module")
def mock_env(tmp_path_factory: pytest.TempPathFactory):
    """The servers the examples name (docs/user-guide.md, "Trying the examples"): ``demo`` (HTTP, Bearer token),
    ``demo-stdio``, ``lab`` (tools that fail in instructive ways), ``pages`` (a pagination cycle), ``locked`` (401
    for this token), ``denied`` (403), ``offline`` (nothing listens), ``needs-var`` (an unset variable),
    ``conflict`` (two identity headers). Same shape as ``make demo``'s config."""
    tmp = tmp_path_factory.mktemp("docs-examples")
    bearer = {"Authorization": "Bearer ${DEMO_TOKEN}"}
    demo = MockServer({"require_headers": {"Authorization": f"Bearer {DEMO_TOKEN}"}})
    lab = MockServer(
        {
            "tools": [
                *DEFAULT_TOOLS,
                mock_tool("ask", "input_required"),
                mock_tool("slow", "slow", ms=5000),
                mock_tool("rpc", "rpc_error", message="no such report"),
            ]
        }
    )
    pages = MockServer({"page_size": 2, "faults": {"cursor_cycle": True}})
    locked = MockServer({"require_headers": {"Authorization": "Bearer another-token"}})
    denied = MockServer(
        {
            "forbid_headers_403": {"Authorization": f"Bearer {DEMO_TOKEN}"},
            "forbidden_message": "this identity may not use the report tools",
        }
    )
    mocks = (demo, lab, pages, locked, denied)
    urls = [server.start() for server in mocks]
    servers = {
        "demo": {"type": "http", "url": urls[0], "headers": bearer},
        "demo-stdio": {
            "type": "stdio",
            "command": sys.executable,
            "args": [str(ROOT / "mock_server" / "mcp_mock.py"), "--stdio", "--quiet"],
        },
        "lab": {"type": "http", "url": urls[1]},
        "pages": {"type": "http", "url": urls[2]},
        "locked": {"type": "http", "url": urls[3], "headers": bearer},
        "denied": {"type": "http", "url": urls[4], "headers": bearer},
        "offline": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        "needs-var": {
            "type": "http",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer ${REPORT_TOKEN}"},
        },
        "conflict": {
            "type": "http",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer x", "X-Bkapi-Authorization": '{"access_token": "y"}'},
        },
    }
    write_mcp_json(tmp, json.dumps({"mcpServers": servers}, indent=2))
    write_mcp_json(tmp, '{"mcpServers": {"a": {"type": "http", "url": "https://x/mcp",}}}\n', name="broken.json")
    (tmp / "params.json").write_text('{"text": "from a file", "count": 2}\n', encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "BK_CLI_CONFIG_DIR": str(tmp),
        "DEMO_TOKEN": DEMO_TOKEN,
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }
    # registry.db: the SQLite registry of these servers, for resident-mode examples
    subprocess.run(
        [sys.executable, str(ROOT / "bkmcp.py"), "--registry", "registry.db", "--import", "mcp.json"],
        cwd=tmp,
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
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
    for command, status in examples:
        done = run_example(command, tmp, env)
        assert done.returncode == status, (
            f"{path.name}: `{command}` exited {done.returncode}, documented "
            f"{status}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
        )
        assert "Traceback" not in done.stderr, done.stderr
        assert DEMO_TOKEN not in done.stdout + done.stderr, f"`{command}` printed the token"


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
