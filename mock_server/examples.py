#!/usr/bin/env python3
"""`make examples` (or `python3 mock_server/examples.py [DIR]`): every server the documentation's examples name.

Starts the mock servers of docs/user-guide.md, "Trying the examples", on free loopback ports, writes the folder
the examples run in (``mcp.json`` naming them, ``params.json``, ``broken.json``, ``examples/mcp.json`` — the
user guide's configuration example —, ``resident.db``: the registry of docs/resident.md's examples, and, when a
bkmcp is given, ``registry.db``: the servers imported into a SQLite registry), prints the two variables to export,
and serves until Ctrl-C (or SIGTERM). A temp folder it made itself (no DIR given) is removed then, demo tokens and
all; a DIR you gave is left as it is.
``tests/integration/test_doc_examples.py`` runs every documented example in a folder made by ``start_examples``,
so what the docs show is what this starts.

Stdlib only (the mock server is).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mock_server.demo_resident import NOTES_TOOLS, SCHEMA  # noqa: E402
from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool  # noqa: E402

DEMO_TOKEN = "demo-secret-token"  # the token `demo` wants; the config reads it from $DEMO_TOKEN


# The shapes of docs/user-guide.md's worked union and $ref examples: server-sequential-thinking's boolean-or-string
# field, and a FastMCP / SDK MCPServer tool with a pydantic model, an Enum and an Optional[model] parameter.
THINK = mock_tool(
    "think",
    properties={
        "thought": {"type": "string"},
        "nextThoughtNeeded": {"type": ["boolean", "string"], "description": "Whether another thought is needed"},
    },
    required=["thought", "nextThoughtNeeded"],
)
SHRIMP = {
    **mock_tool("name_shrimp", required=["tank"]),
    "inputSchema": {
        "type": "object",
        "properties": {
            "tank": {"$ref": "#/$defs/Tank"},
            "color": {"$ref": "#/$defs/Color", "default": "red"},
            "spare": {"anyOf": [{"$ref": "#/$defs/Tank"}, {"type": "null"}], "default": None},
        },
        "required": ["tank"],
        "$defs": {
            "Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
            "Tank": {
                "type": "object",
                "title": "Tank",
                "properties": {"name": {"type": "string"}, "litres": {"type": "integer", "default": 10}},
                "required": ["name"],
            },
        },
    },
}


def build_example_servers() -> dict[str, MockServer]:
    """The HTTP mocks, not started: ``demo`` (Bearer token), ``lab`` (tools that fail in instructive ways, and
    skills, SEP-2640, one of them tampered),
    ``pages`` (a pagination cycle), ``locked`` (401 for this token), ``denied`` (403)."""
    return {
        "demo": MockServer({"require_headers": {"Authorization": f"Bearer {DEMO_TOKEN}"}}),
        "lab": MockServer(
            {
                "tools": [
                    *DEFAULT_TOOLS,
                    mock_tool("ask", "input_required"),
                    mock_tool("slow", "slow", ms=5000),
                    mock_tool("rpc", "rpc_error", message="no such report"),
                    THINK,
                    SHRIMP,
                ],
                "skills": True,
            }
        ),
        "pages": MockServer({"page_size": 2, "faults": {"cursor_cycle": True}}),
        "locked": MockServer({"require_headers": {"Authorization": "Bearer another-token"}}),
        "denied": MockServer(
            {
                "forbid_headers_403": {"Authorization": f"Bearer {DEMO_TOKEN}"},
                "forbidden_message": "this identity may not use the report tools",
            }
        ),
    }


def example_config(urls: dict[str, str], python: str = sys.executable) -> dict:
    """The ``mcp.json`` of the examples: the started mocks, the stdio mock (absolute paths: it works from any
    folder) and the servers that exist to fail (nothing listening, an unset variable, two identity headers)."""
    bearer = {"Authorization": "Bearer ${DEMO_TOKEN}"}
    return {
        "mcpServers": {
            "demo": {"type": "http", "url": urls["demo"], "headers": bearer},
            "demo-stdio": {
                "type": "stdio",
                "command": python,
                "args": [str(HERE / "mcp_mock.py"), "--stdio", "--quiet"],
            },
            "lab": {"type": "http", "url": urls["lab"]},
            "pages": {"type": "http", "url": urls["pages"]},
            "locked": {"type": "http", "url": urls["locked"], "headers": bearer},
            "denied": {"type": "http", "url": urls["denied"], "headers": bearer},
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
    }


def write_resident_registry(path: Path, urls: dict[str, str], python: str = sys.executable) -> None:
    """The registry docs/resident.md's action examples run against (docs/resident-registry.md schema, created 0600:
    it holds credentials): ``weather`` (public HTTP, the ``demo`` mock with a system credential), ``notes`` (a
    per-user stdio server with the mock's skills; alice and bob have tokens), ``crm`` (per-user HTTP; nobody has a
    credential yet) and ``broken`` (public HTTP, nothing listens)."""
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    stdio = [
        str(HERE / "mcp_mock.py"),
        "--stdio",
        "--quiet",
        "--scenario-json",
        json.dumps({"tools": NOTES_TOOLS, "skills": True}),
    ]
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        http = "INSERT INTO mcp_servers (name, transport_type, url, headers, isolation) VALUES (?, 'http', ?, ?, ?)"
        bearer = {"Authorization": "Bearer ${user.api_key}"}
        db.execute(http, ("weather", urls["demo"], json.dumps(bearer), "public"))
        db.execute(http, ("crm", urls["lab"], json.dumps(bearer), "user"))
        db.execute(http, ("broken", "http://127.0.0.1:9/mcp", "{}", "public"))
        db.execute(
            "INSERT INTO mcp_servers (name, transport_type, command, args, env_template, isolation) "
            "VALUES ('notes', 'stdio', ?, ?, ?, 'user')",
            (python, json.dumps(stdio), json.dumps({"NOTES_TOKEN": "${user.token}"})),
        )
        db.execute("INSERT INTO mcp_credentials VALUES ('weather', ?)", (json.dumps({"api_key": DEMO_TOKEN}),))
        for user in ("alice", "bob"):
            db.execute("INSERT INTO mcp_user_credentials VALUES (?, 'notes', ?)", (user, json.dumps({"token": user})))
        db.commit()
    finally:
        db.close()


def start_examples(folder: Path, bkmcp: list[str] | None = None) -> tuple[list[MockServer], dict[str, str]]:
    """Start the mocks and fill ``folder``; (the started servers, the variables to export). ``bkmcp`` (a command
    line) imports the servers into ``folder/registry.db``; without it there is no registry."""
    servers = build_example_servers()
    urls = {name: server.start() for name, server in servers.items()}
    try:
        config = folder / "mcp.json"
        config.write_text(json.dumps(example_config(urls), indent=2) + "\n", encoding="utf-8")
        config.chmod(0o600)
        (folder / "broken.json").write_text(
            '{"mcpServers": {"a": {"type": "http", "url": "https://x/mcp",}}}\n', encoding="utf-8"
        )
        (folder / "params.json").write_text('{"text": "from a file", "count": 2}\n', encoding="utf-8")
        (folder / "examples").mkdir(exist_ok=True)
        shutil.copyfile(ROOT / "examples" / "mcp.json", folder / "examples" / "mcp.json")
        write_resident_registry(folder / "resident.db", urls)
        exports = {"BK_CLI_CONFIG_DIR": str(folder), "DEMO_TOKEN": DEMO_TOKEN}
        if bkmcp is not None:
            subprocess.run(
                [*bkmcp, "--registry", "registry.db", "--import", "mcp.json"],
                cwd=folder,
                env={**os.environ, **exports},
                capture_output=True,
                timeout=60,
                check=True,
            )
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return list(servers.values()), exports


def render_next_steps(folder: Path, exports: dict[str, str], command: list[str] | None) -> list[str]:
    """What to paste into another shell, runnable exactly as printed: into the folder, the variables, a ``bkmcp``
    (the one on PATH, else a shell function running this build), then a first command."""
    lines = ["in another shell (bash or zsh), paste:"]
    lines.append(
        f"  cd {shlex.quote(str(folder))} && export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
    )
    if shutil.which("bkmcp") is None:
        if command is None:
            lines.append("  # no bkmcp on PATH and no dist/bkmcp.pyz: run `make install` (or `make build`) first")
        else:
            lines.append(
                f'  bkmcp() {{ {shlex.join(command)} "$@"; }}  # this build; `make install` puts bkmcp on PATH'
            )
    lines.append("  bkmcp demo --check")
    lines.append("(Ctrl-C here stops the servers)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", help="where to write the examples' files (default: a new temp folder)")
    parser.add_argument("--bkmcp", default=None, help="bkmcp to import registry.db with (default: dist/bkmcp.pyz)")
    args = parser.parse_args(argv)
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bkmcp-examples-")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    pyz = ROOT / "dist" / "bkmcp.pyz"
    command = args.bkmcp.split() if args.bkmcp else ([sys.executable, str(pyz)] if pyz.exists() else None)
    if command is not None:  # it runs inside the folder: paths given relative to here must still work
        command = [os.path.abspath(part) if os.path.exists(part) else part for part in command]

    def stop(*_args: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    servers: list[MockServer] = []
    try:  # from the first file written: a Ctrl-C at any point stops what started and removes a temp folder
        servers, exports = start_examples(folder, command)
        print(f"the example servers are running; their config is {folder / 'mcp.json'}")
        if command is None:
            print("(no registry.db: build dist/bkmcp.pyz first, or pass --bkmcp, for the resident-mode examples)")
        for line in render_next_steps(folder, exports, command):
            print(line)
        if args.folder is None:
            print(f"(Ctrl-C also removes {folder}, which holds the demo tokens)")
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for server in servers:
            server.stop()
        if args.folder is None:  # the temp folder is ours: nothing of it (tokens, registries) outlives the servers
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
