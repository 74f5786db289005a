#!/usr/bin/env python3
"""`make demo-resident`: bkmcp's resident mode driven by a short scripted session, every command and answer shown.

Starts the bundled mock MCP server over HTTP (a public server with a system credential) and names a stdio mock
(a per-user server whose environment carries each user's own token), writes a SQLite registry with raw sqlite3
(the docs/contract.md §11.3 schema) holding both servers and two users' credentials, then runs ``bkmcp --resident`` and
sends: init, list_tools for two users (one tool shown in each model family's form), calls, a crash and the restart
on next use, list_servers, shutdown.

    python3 mock_server/demo_resident.py [dist/bkmcp.pyz]     (default: the source tree's bkmcp.py)
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BKMCP = os.path.join(ROOT, "bkmcp.py")

SCHEMA = """
CREATE TABLE mcp_servers (name TEXT PRIMARY KEY,
  transport_type TEXT NOT NULL CHECK (transport_type IN ('stdio','http')), command TEXT, args TEXT,
  env_template TEXT, url TEXT, headers TEXT,
  isolation TEXT NOT NULL DEFAULT 'public' CHECK (isolation IN ('public','user')), protocol_version TEXT,
  enabled INTEGER NOT NULL DEFAULT 1);
CREATE TABLE mcp_credentials (server_name TEXT PRIMARY KEY REFERENCES mcp_servers(name), credentials TEXT NOT NULL);
CREATE TABLE mcp_user_credentials (user_id TEXT NOT NULL, server_name TEXT NOT NULL REFERENCES mcp_servers(name),
  credentials TEXT NOT NULL, PRIMARY KEY (user_id, server_name));
CREATE TABLE mcp_tools_cache (server_name TEXT NOT NULL, user_id TEXT NOT NULL, tools TEXT NOT NULL,
  protocol_version TEXT, fetched_at REAL NOT NULL, PRIMARY KEY (server_name, user_id));
"""

NOTES_TOOLS = [
    {
        "name": "whoami",
        "description": "Show the token this user's server process was started with.",
        "inputSchema": {"type": "object", "properties": {}},
        "x-mock": "env",
        "x-mock-vars": ["NOTES_TOKEN"],
    },
    {
        "name": "crash",
        "description": "Exit the server process (to show the restart).",
        "inputSchema": {"type": "object", "properties": {}},
        "x-mock": "drop",
    },
    {
        "name": "echo",
        "description": "Echo the arguments.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
]


FORMS = (
    ("function", "OpenAI, sent as {type: function, function: …}"),
    ("function_strict", "OpenAI strict (Structured Outputs), the same way"),
    ("anthropic", "Anthropic, one of tools"),
    ("gemini", "Gemini, one of functionDeclarations"),
)


def start_mock() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(HERE, "mcp_mock.py"),
            "--port",
            "0",
            "--require-header",
            "Authorization=Bearer weather-system-key",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise SystemExit(f"demo-resident: mock server did not start (got {line!r})")
    return proc, line.split(" ", 1)[1]


def write_registry(path: str, url: str) -> None:
    # It holds credentials: created 0600 before sqlite opens it, as an operator should (bkmcp warns otherwise).
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    stdio = [
        os.path.join(HERE, "mcp_mock.py"),
        "--stdio",
        "--quiet",
        "--scenario-json",
        json.dumps({"tools": NOTES_TOOLS, "stdio_drop": "exit"}),
    ]
    db.execute(
        "INSERT INTO mcp_servers (name, transport_type, url, headers, isolation) VALUES (?, 'http', ?, ?, 'public')",
        ("weather", url, json.dumps({"Authorization": "Bearer ${user.api_key}"})),
    )
    db.execute(
        "INSERT INTO mcp_servers (name, transport_type, command, args, env_template, isolation) "
        "VALUES (?, 'stdio', ?, ?, ?, 'user')",
        ("notes", sys.executable, json.dumps(stdio), json.dumps({"NOTES_TOKEN": "${user.token}"})),
    )
    db.execute("INSERT INTO mcp_credentials VALUES ('weather', ?)", (json.dumps({"api_key": "weather-system-key"}),))
    for user, token in (("alice", "alice-notes-token"), ("bob", "bob-notes-token")):
        db.execute("INSERT INTO mcp_user_credentials VALUES (?, 'notes', ?)", (user, json.dumps({"token": token})))
    db.commit()
    db.close()


class Session:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.count = 0

    def send(self, action: str, user: str | None = None, **params: object) -> dict:
        self.count += 1
        command: dict = {"command": "invoke", "task_id": f"demo-{self.count}", "params": {"action": action, **params}}
        if user:
            command["user"] = {"userId": user}
        line = json.dumps(command)
        print(f"\n>>> {line}", flush=True)  # before bkmcp's own stderr lines about it
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        shown = answer.strip()
        print(f"<<< {shown if len(shown) <= 600 else shown[:600] + ' …'}")
        return json.loads(answer)


def main() -> int:
    pyz = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
    mock, url = start_mock()
    timer = threading.Timer(120, mock.kill)  # a hard safety net
    timer.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bkmcp-demo-resident-") as tmp:
            registry = os.path.join(tmp, "registry.db")
            write_registry(registry, url)
            argv = [
                sys.executable,
                pyz or BKMCP,
                "--resident",
                "--registry",
                registry,
                "--events",
                os.path.join(tmp, "events.jsonl"),
            ]
            print(f"registry: {registry} (public HTTP server 'weather', per-user stdio server 'notes')")
            print(f"$ bkmcp --resident --registry {registry} --events events.jsonl")
            s = Session(argv)
            s.send("init")
            for user in ("alice", "bob"):
                tools = s.send("list_tools", user)
                print("    injected:", ", ".join(t["name"] for t in tools["result"]["tools"]))
            echo = next(t for t in tools["result"]["tools"] if t["name"] == "mcp_notes_echo")
            print("\n--- one tool in each model family's form (docs/resident.md, 'Definitions for each model family'):")
            for family, how in FORMS:
                print(f"    {family:<16} {how}: {json.dumps(echo.get(family))}")
            s.send("call_tool", "alice", name="mcp_notes_whoami")
            s.send("call_tool", "bob", name="mcp_notes_whoami")
            s.send("call_tool", "bob", name="mcp_weather_echo", arguments={"text": "hello from bob"})
            print(
                "\n--- next, on purpose: the tool 'crash' makes alice's notes server exit mid-call. bkmcp answers "
                "mcp_connection_error (outcome unknown),\n--- warns on stderr, and starts the server again on its "
                "next use (the call after it).",
                flush=True,
            )
            s.send("call_tool", "alice", server_name="notes", tool_name="crash")
            s.send("call_tool", "alice", server_name="notes", tool_name="echo", arguments={"text": "restarted"})
            s.send("list_servers", "alice")
            s.send("shutdown")
            status = s.proc.wait(timeout=60)
            print(f"\nbkmcp exited with status {status}; events:")
            with open(os.path.join(tmp, "events.jsonl"), encoding="utf-8") as handle:
                for line in handle:
                    print("   ", line.rstrip())
            return status
    finally:
        timer.cancel()
        mock.terminate()
        mock.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
