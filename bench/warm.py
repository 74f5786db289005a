#!/usr/bin/env python3
"""Warm sessions (``--keep-alive``, docs/contract.md §14): side by side in one run, ratios printed, no thresholds.

    python3 bench/warm.py [--runs 15] [--pyz dist/bkmcp.pyz] [--sdk-python .venv-sdk/bin/python] [--calls 1000]

Rows (medians of --runs wall times after one warm-up each, round-robin so a busy machine's drift hits all alike):

- ``bkmcp.pyz --help``: the floor a warm call is compared with;
- the official Python SDK's server over stdio (``tests/interop_servers/sdk_server.py --stdio``), ``add --a 2 --b 3``:
  one-shot, and warm (``--keep-alive``, the session opened before the timed runs);
- the in-process mock over HTTP, ``echo``: one-shot and warm;
- the first ``--keep-alive`` call (the background process and the session start; stopped again, untimed, after
  each run) beside the one-shot call to the same SDK server.

Then the background process's resident memory (VmRSS, children excluded) with 10 warm sessions (10 stdio mock
servers), and after 100 and after --calls warm calls: its RSS, open descriptors and child processes.
Every timed command must exit 0 with the right result, or the row reports the error instead of a time.
Targets (§14): warm stdio ≤ 1.5× --help and ≥ 10× faster than one-shot; warm HTTP ≤ 1.5× --help; first call ≤
one-shot + 150 ms; RSS with 10 sessions ≤ 60 MB; 1000 calls leave RSS, fds and children where 100 left them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import MockServer  # noqa: E402

MOCK = str(ROOT / "mock_server" / "mcp_mock.py")
SDK_SERVER = str(ROOT / "tests" / "interop_servers" / "sdk_server.py")


def run(argv: list[str], env: dict[str, str], expect: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or (expect is not None and expect not in done.stdout):
        raise RuntimeError(f"{' '.join(argv[2:6])}: exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}")
    return elapsed


def daemon_pid(place: Path) -> int | None:
    marker = f"--keep-alive-daemon {place}"
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                    "utf-8", "replace"
                ):
                    return int(entry)
            except OSError:
                continue
    return None


def footprint(pid: int) -> tuple[float, int, int]:
    """(RSS MB, open fds, child processes) of the background process."""
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    children = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                    children += 1
            except (OSError, IndexError):
                continue
    return rss / 1024, fds, children


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "bkmcp.pyz"))
    parser.add_argument("--sdk-python", default=str(ROOT / ".venv-sdk" / "bin" / "python"))
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        runtime = tmp / "run"
        runtime.mkdir(mode=0o700)
        place = runtime / "bkmcp"
        http = MockServer({})
        http.start()
        servers = {"mock-http": {"type": "http", "url": http.url}}
        sdk = Path(args.sdk_python).exists()
        if sdk:
            servers["sdk"] = {"type": "stdio", "command": args.sdk_python, "args": [SDK_SERVER, "--stdio"]}
        for i in range(10):
            servers[f"st{i}"] = {"type": "stdio", "command": python, "args": [MOCK, "--stdio", "--quiet"]}
        config = tmp / "mcp.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        config.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "BKMCP_"))}
        env.update(HOME=str(tmp), XDG_RUNTIME_DIR=str(runtime))
        bk = [python, args.pyz, "--config", str(config)]
        stop = [*bk, "--sessions", "--stop"]
        rows: dict[str, list[str]] = {"bkmcp.pyz --help": [*bk, "--help"]}
        expects: dict[str, str | None] = {"bkmcp.pyz --help": None}
        if sdk:
            rows["SDK stdio add, one-shot"] = [*bk, "sdk", "add", "--a", "2", "--b", "3"]
            rows["SDK stdio add, warm"] = [*rows["SDK stdio add, one-shot"], "--keep-alive"]
            rows["SDK stdio add, first --keep-alive call"] = rows["SDK stdio add, warm"]
            for name in list(rows)[1:]:
                expects[name] = '"isError":false'
        rows["HTTP mock echo, one-shot"] = [*bk, "mock-http", "echo", "--text", "hi"]
        rows["HTTP mock echo, warm"] = [*rows["HTTP mock echo, one-shot"], "--keep-alive"]
        expects["HTTP mock echo, one-shot"] = expects["HTTP mock echo, warm"] = '"text":"hi"'
        times: dict[str, list[float]] = {name: [] for name in rows}
        errors: dict[str, str] = {}
        try:
            for name, argv in rows.items():  # warm-up (opens the warm sessions)
                try:
                    run(argv, env, expects[name])
                except RuntimeError as exc:
                    errors[name] = str(exc)
            for _ in range(args.runs):
                for name, argv in rows.items():
                    if name in errors:
                        continue
                    first = name.endswith("first --keep-alive call")
                    if first:
                        subprocess.run(stop, env=env, capture_output=True, timeout=60)
                    try:
                        times[name].append(run(argv, env, expects[name]))
                    except RuntimeError as exc:
                        errors[name] = str(exc)
                    if first:  # the other warm rows find their sessions again on their next warm-up-free run
                        subprocess.run(stop, env=env, capture_output=True, timeout=60)
                        for other in rows:
                            if other.endswith(", warm") and other not in errors:
                                run(rows[other], env, expects[other])
            median = {name: statistics.median(t) * 1000 for name, t in times.items() if t}
            floor = median.get("bkmcp.pyz --help")
            print(f"warm sessions, medians of {args.runs} runs (ms), round-robin:")
            for name in rows:
                if name in errors:
                    print(f"  {name:44s} failed: {errors[name]}")
                    continue
                ratio = f"{median[name] / floor:5.2f}x --help" if floor else ""
                print(f"  {name:44s} {median[name]:8.1f}  {ratio}")
            if "SDK stdio add, warm" in median:
                faster = median["SDK stdio add, one-shot"] / median["SDK stdio add, warm"]
                print(f"  warm stdio vs one-shot: {faster:.1f}x faster")
                extra = median["SDK stdio add, first --keep-alive call"] - median["SDK stdio add, one-shot"]
                print(f"  first --keep-alive call: one-shot {extra:+.0f} ms")
            # memory: 10 warm stdio sessions, then many calls
            subprocess.run(stop, env=env, capture_output=True, timeout=60)
            for i in range(10):
                run([*bk, f"st{i}", "echo", "--text", "x", "--keep-alive"], env, '"text":"x"')
            pid = daemon_pid(place)
            assert pid is not None
            rss, fds, children = footprint(pid)
            print(f"  background process with 10 warm stdio sessions: RSS {rss:.1f} MB, {fds} fds, {children} children")
            marks = {}
            for n in range(1, args.calls + 1):
                run([*bk, f"st{n % 10}", "echo", "--text", "x", "--keep-alive"], env, '"text":"x"')
                if n in (100, args.calls):
                    marks[n] = footprint(pid)
            for n, (rss, fds, children) in marks.items():
                print(f"  after {n:5d} warm calls: RSS {rss:.1f} MB, {fds} fds, {children} children")
        finally:
            subprocess.run(stop, env=env, capture_output=True, timeout=60)
            http.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
