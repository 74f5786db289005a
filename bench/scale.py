#!/usr/bin/env python3
"""Scale of big catalogues and big results (docs/contract.md §13), measured side by side in one run.

- ``--tools`` over N tools on N/100 pages: wall time and peak RSS of the bkmcp process, for growing N, with the
  catalogue's JSON size; prints time per 1000 tools (linear growth keeps it flat) and
  (peak RSS - base RSS) / catalogue size (target <= 3).
- a call whose result is one text block of M MB over SSE: peak RSS over base as a multiple of the payload
  (target <= 3) and throughput.

Base RSS = the same bkmcp process doing ``--tools`` on an empty catalogue. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import MockServer, mock_tool  # noqa: E402


def measure(command: list[str], config: Path, *args: str) -> tuple[float, int, str]:
    # a fresh interpreter per measurement so RUSAGE_CHILDREN's high-water mark is this child's alone
    probe = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "dt = time.perf_counter() - t\n"
        "sys.stderr.write(p.stderr.decode()[-500:]) if p.returncode else None\n"
        "print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, len(p.stdout), p.returncode)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *command, "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    elapsed, peak, size, code = done.stdout.split()
    if code != "0":
        raise SystemExit(f"bkmcp failed: {done.stderr}")
    return float(elapsed), int(peak), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "bkmcp.pyz"))
    parser.add_argument("--tools", default="0,1000,5000,10000")
    parser.add_argument("--result-mb", default="10,50")
    args = parser.parse_args()
    command = [sys.executable, args.pyz] if Path(args.pyz).exists() else [sys.executable, str(ROOT / "bkmcp.py")]
    mib = 1024 * 1024

    print(f"bkmcp: {' '.join(command[1:])}")
    print(
        f"{'tools':>7} {'pages':>6} {'catalogue':>10} {'time':>8} {'ms/1k tools':>12} {'peak RSS':>9} "
        f"{'(RSS-base)/catalogue':>21}"
    )
    base_rss = None
    with tempfile.TemporaryDirectory() as tmp:
        for count in [int(n) for n in args.tools.split(",")]:
            server = MockServer({"versions": ["2026-07-28"], "tools": [], "generate_tools": count, "page_size": 100})
            url = server.start()
            config = Path(tmp) / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"s": {"type": "http", "url": url}}}))
            elapsed, peak, size = measure(command, config, "s", "--tools")
            pages = len(server.requests("tools/list"))
            server.stop()
            catalogue = (
                len(
                    json.dumps(
                        [mock_tool(f"gen_{i:05d}", properties={"value": {"type": "string"}}) for i in range(count)]
                    )
                )
                if count
                else 0
            )
            if base_rss is None:
                base_rss = peak
            per_k = f"{elapsed * 1000 / (count / 1000):12.1f}" if count else f"{'-':>12}"
            ratio = f"{(peak - base_rss) / catalogue:21.2f}" if catalogue else f"{'(base)':>21}"
            print(f"{count:7d} {pages:6d} {catalogue / mib:9.2f}M {elapsed:7.2f}s {per_k} {peak / mib:8.1f}M {ratio}")

        print(f"\n{'result':>7} {'time':>8} {'MB/s':>7} {'peak RSS':>9} {'(RSS-base)/payload':>19}")
        for megabytes in [int(n) for n in args.result_mb.split(",")]:
            size = megabytes * mib
            server = MockServer(
                {"response_mode": "sse", "versions": ["2025-11-25"], "tools": [mock_tool("big", "big", bytes=size)]}
            )
            url = server.start()
            config = Path(tmp) / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"s": {"type": "http", "url": url}}}))
            elapsed, peak, _ = measure(command, config, "s", "big", "--body", "{}")
            server.stop()
            assert base_rss is not None
            print(
                f"{megabytes:6d}M {elapsed:7.2f}s {megabytes / elapsed:7.1f} {peak / mib:8.1f}M "
                f"{(peak - base_rss) / size:19.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
