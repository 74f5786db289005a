#!/usr/bin/env python3
"""Round trips of bkmcp against the in-process mock, per era (docs/contract.md §13 "no redundant request").

    python3 bench/roundtrips.py

For --check, --tools and a call, pinned to each protocol version and unpinned (probe), prints the HTTP requests
the SERVER received, grouped by JSON-RPC method (DELETE and GET listed by verb). Targets: pinned legacy check =
initialize + initialized + pages (+ DELETE); modern check = discover + pages; unpinned adds only the probe.
The catalogue has 5 tools on 3 pages. Nothing is asserted, only printed (tests assert the same counts).
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bkmcp  # noqa: E402
from mock_server.mcp_mock import MockServer  # noqa: E402

# (label, pinned protocolVersion, mock scenario keys): unpinned against a dual-era and a legacy-only server too
CASES = [
    ("auto/dual", None, {}),
    ("auto/legacy", None, {"versions": ["2025-11-25"]}),
    ("2025-03-26", "2025-03-26", {}),
    ("2025-06-18", "2025-06-18", {}),
    ("2025-11-25", "2025-11-25", {}),
    ("2026-07-28", "2026-07-28", {}),
]
MODES = {"--check": ["--check"], "--tools": ["--tools"], "call": ["echo", "--body", '{"text": "x"}']}


def run(config: Path, args: list[str]) -> int:
    out, err = io.StringIO(), io.StringIO()
    return bkmcp.main(
        ["--config", str(config), "m", *args], stdout=out, stderr=err, env={"PATH": ""}, stdin=io.StringIO("")
    )


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bkmcp-bench-"))
    print(f"{'version':<12} {'mode':<8} {'total':>5}  requests received by the server")
    for label, version, scenario in CASES:
        for mode, args in MODES.items():
            with MockServer({"page_size": 2, **scenario}) as srv:
                entry: dict = {"type": "http", "url": srv.url}
                if version:
                    entry["protocolVersion"] = version
                config = tmp / "mcp.json"
                config.write_text(json.dumps({"mcpServers": {"m": entry}}), encoding="utf-8")
                status = run(config, args)
                counts: Counter = Counter()
                for entry_log in srv.log:
                    key = entry_log["rpc_method"] or entry_log["http_method"]
                    counts[key] += 1
                parts = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in counts.items())
                flag = "" if status == 0 else f"  (exit {status})"
                print(f"{label:<12} {mode:<8} {sum(counts.values()):>5}  {parts}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
