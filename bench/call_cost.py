#!/usr/bin/env python3
"""A one-shot tool call against `--tools` on the same local HTTP server (issue 17 item 6, docs/building.md).

    python3 bench/call_cost.py [--runs 21] [--pyz dist/bkmcp.pyz] [--python PATH] [--source] [--callgrind]

One in-process mock server (the catalogue of bench/peers.py: 50 tools over 2 pages, ``q`` string and ``n``
integer each) answers, round-robin, cold one-shot processes of

- ``bkmcp.pyz bench --tools``                       (the baseline of the ratio)
- ``bkmcp.pyz bench tool_000 --q hello --n 7``       (discover, map flags, validate the arguments, call once)
- ``bkmcp.pyz bench task_now --q hello --n 7 --task`` (the same call run as a 2025-11-25 task that completes at
  once, at a server poll interval of ``TASK_POLL_MS``: tools/call with ``params.task``, tasks/get, tasks/result;
  docs/contract.md §5 "Tasks": it costs at most one poll interval more than the plain call)

and, with ``--source``, the same two through ``bkmcp.py``. Prints the medians of wall time and of CPU time
(user+sys of the child) and the ratio call / --tools by both clocks. ``--callgrind`` instead runs each command
once under ``valgrind --tool=callgrind`` and prints instructions executed (steady on a busy machine; the server
runs in this process, so it is not counted). A call counts only if it exits 0 and the server received exactly
the arguments given. No thresholds: a report, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import TASK_CAPABILITIES, MockServer, mock_tool  # noqa: E402

PAGE_SIZE = 25
CALL = ["tool_000", "--q", "hello", "--n", "7"]
TASK_CALL = ["task_now", "--q", "hello", "--n", "7", "--task"]
TASK_POLL_MS = 1000  # the interval server-everything's tasks suggest


def child_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def run(argv: list[str], env: dict[str, str], server: MockServer, call: bool) -> tuple[float, float]:
    before = len(server.requests("tools/call"))
    cpu, start = child_cpu_ms(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    wall, cpu = (time.perf_counter() - start) * 1000, child_cpu_ms() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[-6:])}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    if call:
        calls = server.requests("tools/call")[before:]
        got = [json.loads(c["body"])["params"].get("arguments") for c in calls]
        if got != [{"q": "hello", "n": 7}]:
            raise SystemExit(f"the server received {got!r}")
        if argv[-1] == "--task" and len(server.requests("tasks/result")) == 0:
            raise SystemExit("the --task call was not run as a task")
    elif len(re.findall(r'"tool_\d+"', done.stdout)) < 50:
        raise SystemExit("--tools did not list the catalogue")
    return wall, cpu


def callgrind(argv: list[str], env: dict[str, str], tmp: Path) -> int:
    out = tmp / "callgrind.out"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"valgrind: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if not found:
        raise SystemExit("valgrind printed no instruction count")
    out.unlink()
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "bkmcp.pyz"))
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run bkmcp with")
    parser.add_argument("--source", action="store_true", help="also time bkmcp.py from the checkout")
    parser.add_argument("--source-python", default=str(ROOT / ".venv" / "bin" / "python"), help="for --source")
    parser.add_argument("--callgrind", action="store_true", help="instruction counts (one run each) instead")
    args = parser.parse_args()

    tools = [
        mock_tool(f"tool_{i:03d}", properties={"q": {"type": "string"}, "n": {"type": "integer"}}) for i in range(50)
    ]
    job = mock_tool("task_now", "job", {"q": {"type": "string"}, "n": {"type": "integer"}}, poll_ms=TASK_POLL_MS)
    job["execution"] = {"taskSupport": "optional"}
    tools.append(job)
    scenario = {"versions": ["2025-11-25"], "tools": tools, "page_size": PAGE_SIZE, "capabilities": TASK_CAPABILITIES}
    server = MockServer(scenario)
    url = server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            (tmp / "home").mkdir()
            config = tmp / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"bench": {"type": "http", "url": url}}}))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "BKMCP_"))}
            env["HOME"] = str(tmp / "home")
            programs = [("pyz", args.python, args.pyz)]
            if args.source:
                programs.append(("source", args.source_python, str(ROOT / "bkmcp.py")))
            rows = []
            for label, python, program in programs:
                base = [python, program, "--config", str(config), "bench"]
                rows.append((f"{label} --tools", base + ["--tools"], False))
                rows.append((f"{label} call {CALL[0]}", base + CALL, True))
                rows.append((f"{label} call --task", base + TASK_CALL, True))
            for _, argv, call in rows:  # warm-up: the per-user cache, the page cache
                run(argv, env, server, call)
            print(f"python: {args.python}")
            if args.callgrind:
                counts = {name: callgrind(argv, env, tmp) for name, argv, _ in rows}
                for name, count in counts.items():
                    print(f"  {name:28s} {count / 1e6:9.1f} M instructions")
                for label, _, _ in programs:
                    ratio = counts[f"{label} call {CALL[0]}"] / counts[f"{label} --tools"]
                    print(f"  {label}: call / --tools = {ratio:.2f}x (instructions)")
                return 0
            walls: dict[str, list[float]] = {name: [] for name, _, _ in rows}
            cpus: dict[str, list[float]] = {name: [] for name, _, _ in rows}
            for _ in range(args.runs):
                for name, argv, call in rows:
                    wall, cpu = run(argv, env, server, call)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
            print(f"medians of {args.runs} cold runs, round-robin after a warm-up")
            print(f"  {'':28s} {'wall ms':>9s} {'CPU ms':>9s}")
            for name, _, _ in rows:
                print(f"  {name:28s} {statistics.median(walls[name]):9.1f} {statistics.median(cpus[name]):9.1f}")
            for label, _, _ in programs:
                call_name, tools_name = f"{label} call {CALL[0]}", f"{label} --tools"
                wall = statistics.median(walls[call_name]) / statistics.median(walls[tools_name])
                cpu = statistics.median(cpus[call_name]) / statistics.median(cpus[tools_name])
                print(f"  {label}: call / --tools = {wall:.2f}x wall, {cpu:.2f}x CPU (target <= 1.2x)")
                extra = statistics.median(walls[f"{label} call --task"]) - statistics.median(walls[call_name])
                print(
                    f"  {label}: call --task - call = {extra:.1f} ms wall "
                    f"(target <= one poll interval, {TASK_POLL_MS} ms)"
                )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
