#!/usr/bin/env python3
"""docs/contract.md §13 resident figures from one run of ``bkmcp --resident`` against the mock server (HTTP and stdio).

    python3 bench/resident.py [--users 100] [--calls-per-pair 2] [--slow-ms 50] [--cycles 1000] [--pyz PATH]

1. Load: users x 5 servers (public HTTP x2, public stdio, per-user HTTP, per-user stdio) with every
   ``call_tool`` written to stdin before the first answer is read (``users * 5 * calls-per-pair`` in flight;
   the defaults give 1000). Each call carries a unique id in its arguments; the servers' own request logs
   give the lost / duplicated / resent counts (target 0), the answers give lost / duplicated answers, and the
   command-to-answer latency p50 / p99. The resident's RSS (children excluded) is read from /proc at the peak.
2. Overhead: sequential calls through the resident vs the same ``tools/call`` POSTed directly with httpx from
   this Python, against the same stateless mock (median difference, target <= 1 ms).
3. Cycles: ``connect_server`` + ``disconnect_server`` of a per-user stdio server, ``--cycles`` times; live
   children and open fds of the resident before and after (target: back to baseline).

``--soak`` runs instead (issue 16): ``--waves`` waves of ``--wave-users`` users, each listing the tools of a
per-user HTTP server with ``--tools`` tools and a per-user stdio server and calling both, every command with a
new access token, a bad registry row named by each user; the users then go idle and are reaped. RSS, open fds
and live children of the resident after the warm-up wave and at the end; then the per-call overhead (as in 2.)
for ``--tokens`` sequential calls, each with a distinct access token, first and last ``--overhead-calls``.

Nothing is asserted (no thresholds); the figures are only meaningful on the concurrent session engine (today's
adapter serialises requests per session, which shows in p99).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from resident_harness import write_registry  # noqa: E402

from mock_server.mcp_mock import DEFAULT_TOOLS, MockServer, mock_tool  # noqa: E402

MOCK = ROOT / "mock_server" / "mcp_mock.py"


class Resident:
    def __init__(self, registry: str, *options: str, pyz: str | None) -> None:
        argv = [sys.executable, pyz or str(ROOT / "bkmcp.py"), "--resident", "--registry", registry, *options]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.answers: dict[str, list[tuple[float, dict]]] = {}
        self.sent_at: dict[str, float] = {}
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._n = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.perf_counter()
            answer = json.loads(line)
            with self._cond:
                self.answers.setdefault(answer.get("task_id"), []).append((now, answer))
                self._cond.notify_all()

    def send_many(self, commands: list[dict]) -> None:
        data = b"".join((json.dumps(c) + "\n").encode() for c in commands)
        now = time.perf_counter()
        for c in commands:
            self.sent_at[c["task_id"]] = now
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def command(self, action: str, user: str | None = None, *, token: str | None = None, **params: object) -> dict:
        self._n += 1
        body: dict = {"command": "invoke", "task_id": f"b{self._n}", "params": {"action": action, **params}}
        if user:
            body["user"] = {"userId": user, **({"accessToken": token} if token else {})}
        return body

    def wait(self, task_ids: list[str], timeout: float = 600) -> None:
        end = time.monotonic() + timeout
        with self._cond:
            while any(t not in self.answers for t in task_ids):
                if time.monotonic() > end or self.proc.poll() is not None:
                    return
                self._cond.wait(0.5)

    def ask(self, action: str, user: str | None = None, **params: object) -> dict:
        body = self.command(action, user, **params)
        self.send_many([body])
        self.wait([body["task_id"]])
        return self.answers[body["task_id"]][-1][1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ask("shutdown")
            self.proc.wait(timeout=120)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] not in (b"Z", b"X"):
                count += 1
    return count


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def stdio_log_ids(paths: list[Path]) -> list[str]:
    ids = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("rpc_method") == "tools/call":
                ids.append(entry["json"]["params"]["arguments"]["text"])
    return ids


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--calls-per-pair", type=int, default=2)
    parser.add_argument("--slow-ms", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--overhead-calls", type=int, default=300)
    parser.add_argument("--pyz", default=None)
    parser.add_argument("--soak", action="store_true", help="the soak run (see the module docstring)")
    parser.add_argument("--waves", type=int, default=20)
    parser.add_argument("--wave-users", type=int, default=25)
    parser.add_argument("--tools", type=int, default=500)
    parser.add_argument("--tokens", type=int, default=10000)
    args = parser.parse_args()
    if args.soak:
        return soak(args)
    slow = mock_tool("work", "slow", ms=args.slow_ms, properties={"text": {"type": "string"}})
    tmp = Path(tempfile.mkdtemp(prefix="bkmcp-bench-resident-"))
    http = [MockServer({"tools": [slow, *DEFAULT_TOOLS]}) for _ in range(3)]
    direct = MockServer({"versions": ["2025-03-26"], "stateful": False})
    for srv in (*http, direct):
        srv.start()
    logs = {"pub_s": tmp / "pub_s.log", "usr_s": tmp / "usr_s.log"}

    def stdio(log: Path) -> list[str]:
        scenario = {"tools": [slow], "stdio_concurrent_calls": True}  # a server that serves calls concurrently
        return [str(MOCK), "--stdio", "--quiet", "--log", str(log), "--scenario-json", json.dumps(scenario)]

    rows = [
        {"name": "pub_a", "transport_type": "http", "url": http[0].url, "isolation": "public"},
        {"name": "pub_b", "transport_type": "http", "url": http[1].url, "isolation": "public"},
        {
            "name": "pub_s",
            "transport_type": "stdio",
            "command": sys.executable,
            "args": stdio(logs["pub_s"]),
            "isolation": "public",
        },
        {"name": "usr_h", "transport_type": "http", "url": http[2].url, "isolation": "user"},
        {
            "name": "usr_s",
            "transport_type": "stdio",
            "command": sys.executable,
            "args": stdio(logs["usr_s"]),
            "isolation": "user",
        },
        {
            "name": "ovh",
            "transport_type": "http",
            "url": direct.url,
            "isolation": "public",
            "protocol_version": "2025-03-26",
        },
        {
            "name": "cyc",
            "transport_type": "stdio",
            "command": sys.executable,
            "args": [str(MOCK), "--stdio", "--quiet"],
            "isolation": "user",
        },
    ]
    registry = str(tmp / "registry.db")
    write_registry(registry, rows, {"usr_h": {}, "usr_s": {}, "cyc": {}})
    res = Resident(
        registry,
        "--max-processes",
        str(args.users + 16),
        "--max-user-processes",
        "8",
        "--timeout",
        "300s",
        pyz=args.pyz,
    )
    pid = res.proc.pid
    try:
        users = [f"user-{i:03d}" for i in range(args.users)]
        servers = ["pub_a", "pub_b", "pub_s", "usr_h", "usr_s"]
        # warm-up: every session open and discovered (so the load measures calls, not process starts)
        warm = [res.command("connect_server", u, server_name=s) for u in users for s in servers]
        res.send_many(warm)
        res.wait([c["task_id"] for c in warm])
        calls = []
        for user in users:
            for server in servers:
                for k in range(args.calls_per_pair):
                    body = res.command(
                        "call_tool",
                        user,
                        server_name=server,
                        tool_name="work",
                        arguments={"text": f"{user}/{server}/{k}"},
                        timeout_ms=300000,
                    )
                    calls.append(body)
        peak = [0.0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                try:
                    peak[0] = max(peak[0], rss_mb(pid))
                except OSError:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        res.send_many(calls)
        res.wait([c["task_id"] for c in calls])
        wall = time.perf_counter() - started
        stop.set()
        sampler.join()
        ids = [c["params"]["arguments"]["text"] for c in calls]
        seen = [
            json.loads(e["body"])["params"]["arguments"]["text"] for srv in http for e in srv.requests("tools/call")
        ]
        seen += stdio_log_ids(list(logs.values()))
        counts: dict[str, int] = {}
        for item in seen:
            counts[item] = counts.get(item, 0) + 1
        lost_server = sum(1 for i in ids if i not in counts)
        dup_server = sum(c - 1 for c in counts.values() if c > 1)
        answered = [c["task_id"] for c in calls if c["task_id"] in res.answers]
        lost_answers = len(calls) - len(answered)
        dup_answers = sum(len(res.answers[t]) - 1 for t in answered)
        failed = sum(1 for t in answered if not res.answers[t][0][1].get("success"))
        latency = [(res.answers[t][0][0] - res.sent_at[t]) * 1000 for t in answered]
        print(
            f"load: {len(calls)} call_tool commands in flight across {args.users} users x {len(servers)} servers "
            f"(slow tool {args.slow_ms} ms), all answered in {wall:.1f} s"
        )
        print(
            f"  lost: {lost_server} (servers' logs), {lost_answers} (answers); duplicated/resent: {dup_server} "
            f"(servers' logs), {dup_answers} (answers); failed: {failed}"
        )
        print(f"  latency command->answer: p50 {pct(latency, 0.5):.0f} ms, p99 {pct(latency, 0.99):.0f} ms")
        print(
            f"  resident RSS (children excluded): peak {peak[0]:.1f} MB, now {rss_mb(pid):.1f} MB; "
            f"live children {children(pid)}"
        )

        # per-call overhead vs a direct POST from this Python (same stateless mock)
        import httpx

        res.ask("connect_server", "ovh-user", server_name="ovh")
        via, straight = [], []
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        with httpx.Client() as client:
            for i in range(args.overhead_calls):
                body = res.command(
                    "call_tool", "ovh-user", server_name="ovh", tool_name="echo", arguments={"text": f"o{i}"}
                )
                t0 = time.perf_counter()
                res.send_many([body])
                res.wait([body["task_id"]])
                via.append((res.answers[body["task_id"]][0][0] - t0) * 1000)
                t0 = time.perf_counter()
                reply = client.post(
                    direct.url,
                    headers=headers,
                    content=json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": i,
                            "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"text": f"d{i}"}},
                        }
                    ),
                )
                reply.json()
                straight.append((time.perf_counter() - t0) * 1000)
        overhead = statistics.median(via) - statistics.median(straight)
        print(
            f"overhead: median via resident {statistics.median(via):.2f} ms, direct httpx POST "
            f"{statistics.median(straight):.2f} ms -> per-call overhead {overhead:.2f} ms (target <= 1 ms)"
        )

        # connect/disconnect cycles of a per-user stdio server
        res.ask("connect_server", "cycler", server_name="cyc")
        res.ask("disconnect_server", "cycler", server_name="cyc")
        base_children, base_fds = children(pid), open_fds(pid)
        t0 = time.perf_counter()
        failures = 0
        for _ in range(args.cycles):
            failures += not res.ask("connect_server", "cycler", server_name="cyc").get("success")
            failures += not res.ask("disconnect_server", "cycler", server_name="cyc").get("success")
        took = time.perf_counter() - t0
        print(
            f"cycles: {args.cycles} connect/disconnect of a per-user stdio server in {took:.1f} s "
            f"({failures} failed): children {base_children} -> {children(pid)}, open fds {base_fds} -> "
            f"{open_fds(pid)}"
        )
    finally:
        res.close()
        for srv in (*http, direct):
            srv.stop()
    return 0


def soak(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bkmcp-bench-soak-"))
    big = MockServer({"generate_tools": args.tools, "versions": ["2025-03-26"]})
    direct = MockServer({"versions": ["2025-03-26"], "stateful": False})
    for srv in (big, direct):
        srv.start()
    rows = [
        {
            "name": "big",
            "transport_type": "http",
            "url": big.url,
            "isolation": "user",
            "protocol_version": "2025-03-26",
        },
        {
            "name": "box",
            "transport_type": "stdio",
            "command": sys.executable,
            "args": [str(MOCK), "--stdio", "--quiet"],
            "isolation": "user",
        },
        {"name": "ovh", "transport_type": "http", "url": direct.url, "protocol_version": "2025-03-26"},
        {"name": "broken", "transport_type": "stdio", "command": "x", "args": "not json"},
    ]
    registry = str(tmp / "registry.db")
    write_registry(registry, rows, {"big": {}, "box": {}})
    res = Resident(registry, "--idle-timeout", "2s", "--timeout", "120s", pyz=args.pyz)
    pid = res.proc.pid
    tokens = iter(range(10**9))

    def token() -> str:
        return f"eyJ.soak-token-{next(tokens):09d}.{'s' * 120}"

    def wave(number: int) -> int:
        users = [f"soak-{number}-{i}" for i in range(args.wave_users)]
        batch = []
        for user in users:
            batch.append(res.command("list_tools", user, token=token()))
            batch.append(
                res.command("call_tool", user, token=token(), name="mcp_big_gen_00001", arguments={"value": user})
            )
            batch.append(
                res.command(
                    "call_tool", user, token=token(), server_name="box", tool_name="echo", arguments={"text": user}
                )
            )
            batch.append(
                res.command("call_tool", user, token=token(), server_name="broken", tool_name="x", arguments={})
            )
        res.send_many(batch)
        res.wait([c["task_id"] for c in batch])
        failed = sum(
            1
            for c in batch
            if not res.answers[c["task_id"]][0][1].get("success") and c["params"].get("server_name") != "broken"
        )
        end = time.monotonic() + 60
        while children(pid) > 0 and time.monotonic() < end:  # the wave goes idle and is reaped
            time.sleep(0.1)
        time.sleep(2.5)  # and forgotten (twice the idle timeout), its keep-alive connections closed
        return failed

    def figures() -> tuple[float, int, int]:
        return rss_mb(pid), open_fds(pid), children(pid)

    def overhead(calls: int) -> tuple[float, float]:
        import httpx

        via, straight = [], []
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        with httpx.Client() as client:
            for i in range(calls):
                body = res.command(
                    "call_tool", "ovh-user", token=token(), server_name="ovh", tool_name="echo", arguments={"text": "o"}
                )
                t0 = time.perf_counter()
                res.send_many([body])
                res.wait([body["task_id"]])
                via.append((res.answers[body["task_id"]][0][0] - t0) * 1000)
                t0 = time.perf_counter()
                message = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo"}}
                client.post(direct.url, headers=headers, content=json.dumps(message)).json()
                straight.append((time.perf_counter() - t0) * 1000)
        return statistics.median(via), statistics.median(straight)

    try:
        res.ask("connect_server", "ovh-user", server_name="ovh")
        failed = wave(0)
        start = figures()
        for number in range(1, args.waves):
            failed += wave(number)
        end = figures()
        commands = args.waves * args.wave_users * 4
        print(
            f"soak: {args.waves} waves x {args.wave_users} users ({commands} commands, each with a new access token; "
            f"a {args.tools}-tool per-user HTTP server, a per-user stdio server, a bad row), reaped after each wave; "
            f"{failed} failed"
        )
        print(
            f"  after the warm-up wave: RSS {start[0]:.1f} MB, open fds {start[1]}, live children {start[2]}; "
            f"at the end: RSS {end[0]:.1f} MB ({(end[0] / start[0] - 1) * 100:+.1f} %), open fds {end[1]}, "
            f"live children {end[2]}"
        )
        first = overhead(args.overhead_calls)
        for _ in range(max(0, args.tokens - 2 * args.overhead_calls) // 500):  # distinct tokens in between
            batch = [
                res.command("call_tool", "ovh-user", token=token(), server_name="ovh", tool_name="echo", arguments={})
                for _ in range(500)
            ]
            res.send_many(batch)
            res.wait([c["task_id"] for c in batch])
        last = overhead(args.overhead_calls)
        seen = next(tokens)
        print(
            f"overhead with distinct tokens: first {args.overhead_calls}: {first[0]:.2f} vs {first[1]:.2f} ms direct "
            f"-> {first[0] - first[1]:.2f} ms; after {seen} distinct tokens: {last[0]:.2f} vs {last[1]:.2f} ms "
            f"-> {last[0] - last[1]:.2f} ms (target <= 1 ms); RSS {rss_mb(pid):.1f} MB"
        )
    finally:
        res.close()
        for srv in (big, direct):
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
