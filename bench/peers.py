#!/usr/bin/env python3
"""`--tools` against a local server, side by side with peer clients, in one run (SPEC §13).

Measured (median wall time of N cold one-shot runs, each a fresh process, same mock server, same catalogue):

- bkmcp: ``python dist/bkmcp.pyz --tools`` (and ``python bkmcp.py --tools`` from source)
- the official Python SDK client (``mcp`` 2.3.0 from ``.venv-sdk``): connect, list every page, print JSON
- any of ``mcp2cli``, ``mcpc`` found on PATH (or named with --peer NAME=COMMAND, where COMMAND gets the URL)

Prints each median and its ratio to bkmcp's. No thresholds: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import MockServer, mock_tool  # noqa: E402

SDK_CLIENT = r"""
import asyncio, json, sys
from mcp.client import Client
async def main(url):
    async with Client(url) as client:
        tools = await client.list_tools()
        items = tools.tools if hasattr(tools, "tools") else tools
        print(json.dumps([t.model_dump(mode="json") if hasattr(t, "model_dump") else t for t in items])[:80])
asyncio.run(main(sys.argv[1]))
"""


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float | None:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            sys.stderr.write(f"  failed ({done.returncode}): {shlex.join(argv)}\n  {done.stderr.strip()[-300:]}\n")
            return None
        times.append(elapsed * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tools", type=int, default=50, help="catalogue size")
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "bkmcp.pyz"))
    parser.add_argument("--sdk-python", default=str(ROOT / ".venv-sdk" / "bin" / "python"))
    parser.add_argument("--peer", action="append", default=[], help="NAME=COMMAND (the server URL is appended)")
    parser.add_argument("--version", default="2025-11-25", help="mock protocol versions: legacy, or 'all' (dual)")
    args = parser.parse_args()

    versions = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] if args.version == "all" else [args.version]
    tools = [mock_tool(f"tool_{i:03d}", properties={"q": {"type": "string"}, "n": {"type": "integer"}})
             for i in range(args.tools)]
    server = MockServer({"versions": versions, "tools": tools, "page_size": 25})
    url = server.start()
    env = dict(os.environ)
    rows: list[tuple[str, float | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"bench": {"type": "http", "url": url}}}))
        python = sys.executable
        rows.append(("bkmcp.pyz --tools", median_ms([python, args.pyz, "--config", str(config), "bench", "--tools"],
                                                     args.runs, env)))
        rows.append(("bkmcp.py --tools (source)", median_ms(
            [python, str(ROOT / "bkmcp.py"), "--config", str(config), "bench", "--tools"], args.runs, env)))
        if Path(args.sdk_python).exists():
            rows.append(("official Python SDK client", median_ms([args.sdk_python, "-c", SDK_CLIENT, url],
                                                                 args.runs, env)))
        else:
            sys.stderr.write(f"  skipped the SDK client: {args.sdk_python} missing (make interop)\n")
        peers = dict(p.split("=", 1) for p in args.peer)
        for name in ("mcp2cli", "mcpc"):
            if name not in peers and shutil.which(name):
                sys.stderr.write(f"  {name} found on PATH; pass --peer {name}=COMMAND with its list-tools form\n")
        for name, command in peers.items():
            rows.append((name, median_ms([*shlex.split(command), url], args.runs, env)))
    server.stop()

    base = rows[0][1]
    print(f"--tools against a local mock ({args.tools} tools, {len(versions)} version(s)), median of {args.runs} "
          "cold runs")
    for name, value in rows:
        if value is None:
            print(f"  {name:32s}   failed")
        else:
            ratio = f"{value / base:5.2f}x bkmcp" if base else ""
            print(f"  {name:32s} {value:8.1f} ms  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
