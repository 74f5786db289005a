#!/usr/bin/env python3
"""`make demo`: run the built bkmcp.pyz through its main job against the bundled mock MCP server.

Stdlib only, so it works on a fresh machine with nothing but Python 3 and make. It starts
``mock_server/mcp_mock.py`` on a free loopback port, writes a throwaway config, and runs the artifact:
help, server help, --check, --tools, tool help, a call with typed flags, a call with --body, a dry-run.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def start_mock() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "mcp_mock.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # "LISTENING http://127.0.0.1:PORT/mcp"
    if not line.startswith("LISTENING "):
        proc.kill()
        raise SystemExit(f"demo: mock server did not start (got {line!r})")
    return proc, line.split(" ", 1)[1]


def main() -> int:
    pyz = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "dist/bkmcp.pyz")
    if not os.path.exists(pyz):
        raise SystemExit(f"demo: {pyz} not found; run `make build` first")
    proc, url = start_mock()
    failures = 0
    try:
        with tempfile.TemporaryDirectory(prefix="bkmcp-demo-") as tmp:
            config = os.path.join(tmp, "mcp.json")
            with open(config, "w", encoding="utf-8") as handle:
                json.dump(
                    {
                        "mcpServers": {
                            "demo": {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"}},
                        }
                    },
                    handle,
                    indent=2,
                )
            os.chmod(config, 0o600)
            env = dict(os.environ, BK_CLI_CONFIG_DIR=tmp, DEMO_TOKEN="demo-secret-token")
            steps = [
                ["--help"],
                ["demo", "--help"],
                ["demo", "--check"],
                ["demo", "--tools", "--jq", ".data.tools[].name"],
                ["demo", "echo", "--help"],
                ["demo", "echo", "--text", "hello from bkmcp", "--count", "3"],
                ["demo", "echo", "--body", '{"text": "exact numbers", "ratio": 12345678901234567890.5}'],
                ["demo", "echo", "--body", '{"text": "offline"}', "--dry-run"],
            ]
            print(
                f"demo: each `$ bkmcp …` below runs {shlex.join([sys.executable, pyz])} with BK_CLI_CONFIG_DIR={tmp}\n"
                "      (a config for this demo's mock, removed at the end); to run them yourself afterwards, use the\n"
                "      lines `make examples` prints\n",
                flush=True,
            )
            for args in steps:
                print(f"$ bkmcp {' '.join(shlex.quote(a) for a in args)}", flush=True)
                done = subprocess.run([sys.executable, pyz, *args], env=env, text=True, capture_output=True, timeout=60)
                sys.stdout.write(done.stdout)
                if done.stderr:
                    sys.stdout.write(done.stderr)
                print(f"(exit {done.returncode})\n", flush=True)
                failures += done.returncode != 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    print("demo: all steps succeeded" if not failures else f"demo: {failures} step(s) failed")
    print(
        "demo: the mock server and its config are gone now; to keep going, `make examples` starts every server\n"
        "      the docs' examples use, writes their mcp.json and prints what to export (docs/user-guide.md)"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
