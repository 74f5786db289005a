#!/usr/bin/env python3
"""``--tools`` wall time against a local mock server, as a ratio to the same HTTP requests made by curl.

    python3 bench/latency.py [--runs 15] [--tools 200] [--page-size 50]

The mock runs as its own process (``mock_server/mcp_mock.py --port 0``). For each era setup, bkmcp runs as a
fresh process (``python bkmcp.py``, and ``dist/bkmcp.pyz`` when built) and so does curl, which replays exactly
the requests bkmcp's wire shows for that setup in ONE process over one keep-alive connection (``curl --next``):

  modern pinned   tools/list x pages
  modern auto     server/discover + tools/list x pages
  legacy pinned   initialize + notifications/initialized + tools/list x pages (stateless mock: no session id,
                  so curl needs no response parsing; bkmcp's DELETE is then skipped as well)

Medians over --runs interleaved runs, in ms, and bkmcp/curl ratios. Nothing is asserted (no thresholds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "curl", "version": "0"},
}


def start_mock(scenario: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "mock_server" / "mcp_mock.py"),
            "--port",
            "0",
            "--scenario-json",
            json.dumps(scenario),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("LISTENING"):
            return proc, line.split()[1]
    proc.kill()
    raise RuntimeError("mock did not start")


def curl_args(url: str, requests: list[tuple[dict, dict[str, str]]]) -> list[str]:
    args = ["curl", "-sS", "-o", "/dev/null", "--no-progress-meter"]
    for index, (body, headers) in enumerate(requests):
        if index:
            args += ["--next", "-sS", "-o", "/dev/null"]
        args += ["-X", "POST", url, "-H", f"Accept: {ACCEPT}", "-H", "Content-Type: application/json"]
        for key, value in headers.items():
            args += ["-H", f"{key}: {value}"]
        args += ["--data-binary", json.dumps(body)]
    return args


def modern_requests(pages: int, discover: bool) -> list[tuple[dict, dict[str, str]]]:
    out = []
    headers = {"MCP-Protocol-Version": MODERN}
    if discover:
        out.append(
            (
                {"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": META}},
                {**headers, "Mcp-Method": "server/discover"},
            )
        )
    for page in range(pages):
        params: dict = {"_meta": META}
        if page:
            params["cursor"] = cursor(page + 1)
        out.append(
            (
                {"jsonrpc": "2.0", "id": page + 1, "method": "tools/list", "params": params},
                {**headers, "Mcp-Method": "tools/list"},
            )
        )
    return out


def legacy_requests(pages: int) -> list[tuple[dict, dict[str, str]]]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "curl", "version": "0"}},
    }
    out = [(init, {}), ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {"MCP-Protocol-Version": LEGACY})]
    for page in range(pages):
        params = {"cursor": cursor(page + 1)} if page else {}
        out.append(
            (
                {"jsonrpc": "2.0", "id": page + 1, "method": "tools/list", "params": params},
                {"MCP-Protocol-Version": LEGACY},
            )
        )
    return out


def cursor(page: int) -> str:
    sys.path.insert(0, str(ROOT))
    from mock_server.mcp_mock import _encode_cursor

    return _encode_cursor(page)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}… exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tools", type=int, default=200)
    parser.add_argument("--page-size", type=int, default=50)
    opts = parser.parse_args()
    if shutil.which("curl") is None:
        print("curl is not installed: nothing to compare against")
        return 0
    pages = -(-opts.tools // opts.page_size)
    tmp = Path(tempfile.mkdtemp(prefix="bkmcp-latency-"))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp)}
    setups = [
        ("modern pinned", {}, MODERN, modern_requests(pages, discover=False)),
        ("modern auto", {}, None, modern_requests(pages, discover=True)),
        ("legacy pinned", {"versions": [LEGACY], "stateful": False}, LEGACY, legacy_requests(pages)),
    ]
    clients = [("bkmcp.py", [sys.executable, str(ROOT / "bkmcp.py")])]
    pyz = ROOT / "dist" / "bkmcp.pyz"
    if pyz.exists():
        clients.append(("bkmcp.pyz", [sys.executable, str(pyz)]))
    print(f"--tools over {opts.tools} tools in {pages} pages, median of {opts.runs} runs (ms)")
    print(f"{'setup':<15} {'client':<10} {'bkmcp':>8} {'curl':>8} {'ratio':>7}")
    for label, scenario, version, requests in setups:
        proc, url = start_mock({"generate_tools": opts.tools, "tools": [], "page_size": opts.page_size, **scenario})
        try:
            entry: dict = {"type": "http", "url": url}
            if version:
                entry["protocolVersion"] = version
            config = tmp / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"m": entry}}), encoding="utf-8")
            curl = curl_args(url, requests)
            commands = {name: [*argv, "--config", str(config), "m", "--tools"] for name, argv in clients}
            samples: dict[str, list[float]] = {name: [] for name in commands}
            samples["curl"] = []
            for cmd in commands.values():  # warm-up (bytecode, page cache)
                timed(cmd, env)
            timed(curl, env)
            for _ in range(opts.runs):
                for name, cmd in commands.items():
                    samples[name].append(timed(cmd, env))
                samples["curl"].append(timed(curl, env))
            base = statistics.median(samples["curl"])
            for name in commands:
                value = statistics.median(samples[name])
                print(f"{label:<15} {name:<10} {value:8.1f} {base:8.1f} {value / base:6.2f}x")
        finally:
            proc.terminate()
            proc.wait(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
