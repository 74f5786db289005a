#!/usr/bin/env python3
"""`--tools` (and over HTTP `--resources` and `--read`) against a local server, side by side with peer clients, in
one run (docs/contract.md §13).

    bench/install_peers.sh .peers                  # pinned peers (PyPI + npm), once
    python3 bench/peers.py [--runs 15] [--transport http,stdio] [--peers-dir .peers] [--pyz dist/bkmcp.pyz]
                           [--baseline-pyz OLD.pyz]    # before and after, in one sitting

Every client lists the same mock server's catalogue (50 tools over 2 pages by default) in one cold one-shot
process, over HTTP (an in-process ``MockServer``) and over stdio (the client starts
``python mock_server/mcp_mock.py --stdio`` itself, so the server's own start-up is in every number):

- bkmcp: ``python dist/bkmcp.pyz --tools`` (and ``python bkmcp.py --tools`` from source, and ``--tools
  --keep-alive``, warm: its session kept by the background process the warm-up run started), and beside them one
  call, ``bkmcp.pyz bench tool_000 --q hello --n 7`` (discovery, flags, argument validation, ``tools/call``), which
  counts only if it completes and the server received exactly those arguments once: its ratio to ``--tools`` is
  the cost of the call path (bench/call_cost.py measures only that pair, also in instructions)
- the official Python SDK client (``mcp`` 2.3.0 from ``.venv-sdk``): connect, list every page, print the names
- from --peers-dir (what bench/install_peers.sh installs):
  mcp2cli 3.8.0 ``--list --json --refresh`` (--refresh: it would otherwise answer from its own tools cache),
  MCP Inspector 2.12.0 ``--cli … --method tools/list``, mcporter 0.12.3 ``list … --json``, and
  mcpc 0.2.6, which has no one-shot mode since 0.2.0: ``connect … @bench`` then ``@bench tools-list`` are timed
  together, the ``close @bench`` after them is not
- any --peer NAME=COMMAND (HTTP only; the server URL is appended)
- over HTTP, the same validated call by the peers that have a one-shot call (Inspector ``--method tools/call
  --tool-name tool_000 --tool-arg q=hello --tool-arg n=7``, mcporter ``call --tool tool_000 --args JSON``): it
  counts only if the server received exactly those arguments once
- over HTTP, the resource rows (issue 38): ``bkmcp.pyz bench --resources`` (``resources/list`` to the last page,
  and ``resources/templates/list``) beside Inspector ``--method resources/list`` and mcporter ``resource bench
  --json`` (a server of an ``mcporter.json``: ``resource`` takes no ``--http-url``), listing the mock's 50
  resources over 2 pages; and ``bkmcp.pyz bench --read URI`` beside Inspector ``--method resources/read --uri URI``
  and mcporter ``resource bench URI --json``, reading one text resource: a list counts only if its output names
  every resource and the server answered a ``resources/list`` per page during it, a read only if the server
  received exactly one ``resources/read`` of that URI and the output holds its text
- over stdio, the floor row: the bare server, started with an empty stdin (it exits at EOF); the last column says
  what each client adds above it (wall ms)

Each cell (``--tools``, the call, ``--resources``, ``--read``) compares bkmcp.pyz with the fastest peer of that cell;
the geometric mean of the first two is printed (issue 31's goal: at most 0.30x the fastest peer's time), then that
of all four, and what ``--resources`` and ``--read`` cost beside bkmcp.pyz's own ``--tools`` (issue 38: as much).

A run counts only if it exits 0 and its output names every tool of the catalogue; over HTTP the server must also
have answered at least one tools/list per page during it (no answer from a cache). A client that fails once is
reported with its error line and never timed. Medians of --runs runs after one warm-up run each, of wall time and
of CPU time (user+sys of the client and of the children it waited for: steadier on a busy machine; mcpc's
detached bridge process is not in it, and the HTTP server, in this process, is in nobody's); the commands run
round-robin so drift on a busy machine hits them alike. All of them get a fresh HOME (peers keep
state there). bkmcp.pyz runs with the running Python through a fresh empty venv, as a user's python3 runs it
(this repository's .venv has the editable install's .pth, whose finder imports pathlib and re at every start);
``--host-python`` runs it with this interpreter as it is; the source row needs the venv's httpx.
Prints each median, its ratio to bkmcp.pyz, the fastest peer and whether bkmcp.pyz is ≥ 3× faster than it, by
either clock. No thresholds: this is a report, not a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mock_server.mcp_mock import MockServer, mock_tool  # noqa: E402

PAGE_SIZE = 25
TARGET = 3.0  # docs/contract.md §13: `--tools` at least 3x faster than the fastest peer, on each transport
CALL = ["tool_000", "--q", "hello", "--n", "7"]  # bkmcp's call row: discover, map, validate, call once
CALL_ARGUMENTS = {"q": "hello", "n": 7}
READ_URI, READ_TEXT = "bench://res/007", "the text of resource 7"  # bkmcp's --read row and the peers' reads
# what each kind of row asks the server for: it counts only when the server received that request
METHODS = {"tools": "tools/list", "call": "tools/call", "resources": "resources/list", "read": "resources/read"}
MOCK = str(ROOT / "mock_server" / "mcp_mock.py")

SDK_CLIENT = r"""
import asyncio, sys
from mcp import StdioServerParameters
from mcp.client import Client
async def main(target):
    names, cursor = [], None
    async with Client(target) as client:
        while True:
            page = await client.list_tools(cursor=cursor)
            names += [t.name for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
    print("\n".join(names))
argv = sys.argv[1:]
asyncio.run(main(argv[0] if len(argv) == 1 else StdioServerParameters(command=argv[0], args=argv[1:])))
"""


@dataclass
class Client:
    """One client's way to do one `kind` of request once: `steps` are timed together, the last one prints it."""

    name: str
    steps: list[list[str]]
    cleanup: list[list[str]] = field(default_factory=list)  # after each run, untimed
    peer: bool = True  # False for bkmcp's own rows
    kind: str = "tools"  # a key of METHODS: list the tools, call CALL, list the resources, read READ_URI
    floor: bool = False  # the bare stdio server, started and ended by EOF on stdin: what every stdio client pays
    baseline: bool = False  # --baseline-pyz's rows: another build of bkmcp, timed in the same sitting
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    error: str | None = None


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def run_once(
    client: Client, env: dict[str, str], cwd: str, names: dict[str, set[str]], server: MockServer | None
) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of `client`; raises RuntimeError with the error line unless it did its request:
    listed every name of `names[client.kind]` (tools or resources), or called or read once."""
    method = METHODS[client.kind]
    before = len(server.requests(method)) if server else 0
    try:
        cpu_start, start = cpu_ms(), time.perf_counter()
        for step, argv in enumerate(client.steps, 1):
            done = subprocess.run(
                argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
            )
            if done.returncode != 0:
                where = f" (step {step}: {' '.join(argv[2:4])})" if len(client.steps) > 1 else ""
                raise RuntimeError(f"exit {done.returncode}{where}: {last_line(done.stderr + done.stdout)}")
        elapsed, cpu = (time.perf_counter() - start) * 1000, cpu_ms() - cpu_start
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"timed out after {exc.timeout:.0f} s") from exc
    finally:
        for argv in client.cleanup:
            subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=120)
    if client.floor:
        return elapsed, cpu
    if client.kind in ("call", "read"):
        sent = server.requests(method)[before:] if server else []
        own_ok = client.peer or client.kind == "read" or '"isError":false' in done.stdout  # a peer: its own way
        if not own_ok or (server and len(sent) != 1):
            raise RuntimeError(f"the {client.kind} did not complete once: {last_line(done.stderr + done.stdout)}")
        params = json.loads(sent[0]["body"])["params"] if sent else {}
        if sent and client.kind == "call" and params.get("arguments") != CALL_ARGUMENTS:
            raise RuntimeError(f"the server received other arguments: {sent[0]['body'][:200]}")
        if sent and client.kind == "read" and params.get("uri") != READ_URI:
            raise RuntimeError(f"the server received another URI: {sent[0]['body'][:200]}")
        if client.kind == "read" and READ_TEXT not in done.stdout:
            raise RuntimeError(f"output lacks the resource's text: {last_line(done.stderr + done.stdout)}")
        return elapsed, cpu
    wanted = names[client.kind]
    missing = wanted - set(re.findall(r"\b(?:tool|res)_\d+\b", done.stdout))
    if missing:
        raise RuntimeError(
            f"output lacks {len(missing)} of {len(wanted)} {client.kind} (e.g. {min(missing)}): "
            f"{last_line(done.stderr + done.stdout)}"
        )
    pages = -(-len(wanted) // PAGE_SIZE)
    if server and len(server.requests(method)) - before < pages:
        raise RuntimeError(f"the server answered fewer {method} requests than there are pages (a cached answer?)")
    return elapsed, cpu


def build_clients(
    transport: str, target: list[str], args: argparse.Namespace, tmp: Path
) -> tuple[list[Client], list[tuple[str, str]]]:
    """The clients to time over `transport` (target = [url] or the stdio server's argv), and the peers missing."""
    python = args.pyz_python  # the pyz rows: the interpreter as shipped (see main)
    entry = (
        {"type": "http", "url": target[0]}
        if transport == "http"
        else {"type": "stdio", "command": target[0], "args": target[1:]}
    )
    config = tmp / f"{transport}.json"
    config.write_text(json.dumps({"mcpServers": {"bench": entry}}))
    bkmcp = ["--config", str(config), "bench", "--tools"]
    call = ["--config", str(config), "bench", *CALL]
    clients = [
        Client("bkmcp.pyz --tools", [[python, args.pyz, *bkmcp]], peer=False),
        Client("bkmcp.pyz call (validated)", [[python, args.pyz, *call]], peer=False, kind="call"),
        # warm (docs/contract.md §14): the warm-up run starts the background process; it is stopped at the end
        Client("bkmcp.pyz --tools --keep-alive (warm)", [[python, args.pyz, *bkmcp, "--keep-alive"]], peer=False),
        Client("bkmcp.py --tools (source)", [[sys.executable, str(ROOT / "bkmcp.py"), *bkmcp]], peer=False),
    ]
    if args.baseline_pyz:  # before and after in one sitting: the rows of another build, round-robin with the rest
        clients += [
            Client("baseline pyz --tools", [[python, args.baseline_pyz, *bkmcp]], peer=False, baseline=True),
            Client("baseline pyz call", [[python, args.baseline_pyz, *call]], peer=False, kind="call", baseline=True),
        ]
    resources = ["--config", str(config), "bench", "--resources"]
    read = ["--config", str(config), "bench", "--read", READ_URI]
    if transport == "http":  # issue 38: the resource rows, over HTTP
        clients += [
            Client("bkmcp.pyz --resources", [[python, args.pyz, *resources]], peer=False, kind="resources"),
            Client("bkmcp.pyz --read URI", [[python, args.pyz, *read]], peer=False, kind="read"),
        ]
        if args.baseline_pyz:
            clients += [
                Client(
                    "baseline pyz --resources",
                    [[python, args.baseline_pyz, *resources]],
                    peer=False,
                    kind="resources",
                    baseline=True,
                ),
                Client(
                    "baseline pyz --read URI",
                    [[python, args.baseline_pyz, *read]],
                    peer=False,
                    kind="read",
                    baseline=True,
                ),
            ]
    if transport == "stdio":  # the floor row: the server alone, which every stdio number above includes
        clients.append(Client("bare stdio server (floor)", [list(target)], peer=False, floor=True))
    missing = []
    if Path(args.sdk_python).exists():
        clients.append(Client("official Python SDK client", [[args.sdk_python, "-c", SDK_CLIENT, *target]]))
    else:
        missing.append(("official Python SDK client", f"{args.sdk_python} missing (make interop)"))

    peers = Path(args.peers_dir).resolve()
    mcp2cli = peers / "mcp2cli" / "bin" / "mcp2cli"
    how = ["--mcp", target[0]] if transport == "http" else ["--mcp-stdio", shlex.join(target)]
    if mcp2cli.exists():
        clients.append(Client("mcp2cli 3.8.0", [[str(mcp2cli), *how, "--list", "--json", "--refresh"]]))
    else:
        missing.append(("mcp2cli", f"{mcp2cli} missing (bench/install_peers.sh {args.peers_dir})"))

    node = peers / "node" / "node_modules" / ".bin" / "node"
    scripts = {
        name: (peers / "node" / "node_modules" / ".bin" / name).resolve() for name in ("inspector", "mcpc", "mcporter")
    }
    for name, script in scripts.items():
        if not node.exists() or not script.exists():
            missing.append((name, f"{script} missing (bench/install_peers.sh {args.peers_dir})"))
    if transport == "http":
        for name, command in (p.split("=", 1) for p in args.peer):
            clients.append(Client(name, [[*shlex.split(command), target[0]]]))
    if not node.exists():
        return clients, missing
    if scripts["inspector"].exists():
        clients.append(
            Client(
                "MCP Inspector CLI 2.12.0",
                [[str(node), str(scripts["inspector"]), "--cli", *target, "--method", "tools/list"]],
            )
        )
    if scripts["mcporter"].exists():
        how = (
            ["--http-url", target[0], "--allow-http"]
            if transport == "http"
            else ["--stdio", target[0], *(arg for value in target[1:] for arg in ("--stdio-arg", value))]
        )
        clients.append(Client("mcporter 0.12.3", [[str(node), str(scripts["mcporter"]), "list", *how, "--json"]]))
    if transport == "http" and scripts["inspector"].exists():  # the validated call's peers (issue 31 item 5)
        args_ = [arg for key, value in CALL_ARGUMENTS.items() for arg in ("--tool-arg", f"{key}={value}")]
        clients.append(
            Client(
                "MCP Inspector CLI 2.12.0 call",
                [
                    [str(node), str(scripts["inspector"]), "--cli", *target, "--method", "tools/call"]
                    + ["--tool-name", CALL[0], *args_]
                ],
                kind="call",
            )
        )
        inspector = [str(node), str(scripts["inspector"]), "--cli", *target]
        clients += [
            Client(
                "MCP Inspector CLI 2.12.0 resources", [[*inspector, "--method", "resources/list"]], kind="resources"
            ),
            Client(
                "MCP Inspector CLI 2.12.0 read",
                [[*inspector, "--method", "resources/read", "--uri", READ_URI]],
                kind="read",
            ),
        ]
    if transport == "http" and scripts["mcporter"].exists():
        # --args, not q=hello n=7: mcporter 0.12.3 sent {"n": 7} for those (q dropped)
        how = ["--http-url", target[0], "--allow-http", "--tool", CALL[0], "--args", json.dumps(CALL_ARGUMENTS)]
        clients.append(
            Client(
                "mcporter 0.12.3 call",
                [[str(node), str(scripts["mcporter"]), "call", *how, "--output", "json"]],
                kind="call",
            )
        )
        # `resource` names a configured server only (no --http-url): an mcporter.json of the same URL
        (tmp / "mcporter.json").write_text(json.dumps({"mcpServers": {"bench": {"baseUrl": target[0]}}}))
        mcporter = [str(node), str(scripts["mcporter"]), "--config", str(tmp / "mcporter.json"), "resource", "bench"]
        clients += [
            Client("mcporter 0.12.3 resource", [[*mcporter, "--json"]], kind="resources"),
            Client("mcporter 0.12.3 resource URI", [[*mcporter, READ_URI, "--json"]], kind="read"),
        ]
    if scripts["mcpc"].exists():
        mcpc = [str(node), str(scripts["mcpc"])]
        server = target[0] if transport == "http" else f"{config}:bench"
        clients.append(
            Client(
                "mcpc 0.2.6 (connect + tools-list)",
                [[*mcpc, "connect", server, "@bench"], [*mcpc, "--json", "@bench", "tools-list"]],
                cleanup=[[*mcpc, "close", "@bench"]],
            )
        )
    return clients, missing


def measure(
    clients: list[Client],
    runs: int,
    env: dict[str, str],
    cwd: str,
    names: dict[str, set[str]],
    server: MockServer | None,
) -> None:
    """Round-robin: one warm-up run of each client, then `runs` timed rounds; a failing client drops out."""
    for i in range(runs + 1):
        for client in clients:
            if client.error:
                continue
            try:
                elapsed, cpu = run_once(client, env, cwd, names, server)
            except RuntimeError as exc:
                client.error = str(exc)
                continue
            if i:
                client.times.append(elapsed)
                client.cpu.append(cpu)


def report(transport: str, clients: list[Client], missing: list[tuple[str, str]]) -> None:
    own = clients[0]
    floor = next((c for c in clients if c.floor and c.times), None)
    head = f"{'+ floor':>9s}" if floor else ""
    print(f"\n{transport + ':':41s} {'wall ms':>9s} {'x pyz':>7s}  {'CPU ms':>9s} {'x pyz':>7s}  {head}")
    for client in clients:
        if client.error:
            print(f"  {client.name:39s}    failed: {client.error}")
            continue
        cells = []
        for mine, base in ((client.times, own.times), (client.cpu, own.cpu)):
            value = statistics.median(mine)
            cells.append(f"{value:9.1f} {value / statistics.median(base):6.2f}x" if base else f"{value:9.1f}")
        if floor and not client.floor:  # what the client adds above the bare server (wall)
            cells.append(f"{statistics.median(client.times) - statistics.median(floor.times):9.1f}")
        print(f"  {client.name:39s} {'  '.join(cells)}")
    for name, why in missing:
        print(f"  {name:39s}    not installed: {why}")
    cells = {"tools": "--tools", "call": "call", "resources": "--resources", "read": "--read"}
    for (label, series), baseline in itertools.product(
        (("wall", lambda c: c.times), ("CPU", lambda c: c.cpu)), (False, True)
    ):
        ratios, own = {}, {}
        for kind, what in cells.items():
            mine = next(
                (c for c in clients if not c.peer and c.baseline == baseline and c.kind == kind and not c.floor),
                None,
            )
            if mine is None or not series(mine):
                continue
            own[kind] = statistics.median(series(mine))
            timed = [c for c in clients if c.peer and c.kind == kind and not c.error]
            if not timed:
                continue
            fastest = min(timed, key=lambda c: statistics.median(series(c)))
            ratio = own[kind] / statistics.median(series(fastest))
            ratios[kind] = ratio
            print(
                f"  {what} ({label}): fastest peer {fastest.name}; {mine.name} takes {ratio:.2f}x its time "
                f"({1 / ratio:.2f}x faster): {'meets' if 1 / ratio >= TARGET else 'misses'} the >= {TARGET:g}x "
                "target (docs/contract.md §13)"
            )
        who = "baseline pyz" if baseline else "bkmcp.pyz"
        if "tools" in ratios and "call" in ratios:
            mean = statistics.geometric_mean([ratios["tools"], ratios["call"]])
            print(
                f"  geometric mean of --tools and call ({label}, {who}): {mean:.3f}x the fastest peer "
                "(issue 31 goal: <= 0.30x)"
            )
        if len(ratios) == len(cells):
            mean = statistics.geometric_mean(ratios.values())
            print(f"  geometric mean of the four cells ({label}, {who}): {mean:.3f}x the fastest peer")
        for kind in ("resources", "read"):
            if kind in own and "tools" in own:
                print(
                    f"  {cells[kind]} ({label}, {who}): {own[kind] / own['tools']:.2f}x its own --tools "
                    "(issue 38: as much)"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tools", type=int, default=50, help="catalogue size (tools, and resources)")
    parser.add_argument("--pyz", default=str(ROOT / "dist" / "bkmcp.pyz"))
    parser.add_argument("--baseline-pyz", help="another bkmcp.pyz (an earlier build) timed beside it, same sitting")
    parser.add_argument("--sdk-python", default=str(ROOT / ".venv-sdk" / "bin" / "python"))
    parser.add_argument(
        "--host-python",
        action="store_true",
        help="run bkmcp.pyz with this interpreter as it is (default: through a fresh empty venv of it, so that a "
        ".pth file of this venv, such as the editable install's finder, cannot add its imports to every run)",
    )
    parser.add_argument("--peers-dir", default=str(ROOT / ".peers"), help="where bench/install_peers.sh installed")
    parser.add_argument("--peer", action="append", default=[], help="NAME=COMMAND (HTTP; the server URL is appended)")
    parser.add_argument("--transport", default="http,stdio", help="http, stdio or both (default)")
    parser.add_argument("--version", default="2025-11-25", help="mock protocol versions: legacy, or 'all' (dual)")
    args = parser.parse_args()

    versions = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] if args.version == "all" else [args.version]
    tools = [
        mock_tool(f"tool_{i:03d}", properties={"q": {"type": "string"}, "n": {"type": "integer"}})
        for i in range(args.tools)
    ]
    resources = [
        {
            "uri": f"bench://res/{i:03d}",
            "name": f"res_{i:03d}",
            "mimeType": "text/plain",
            "x-mock-text": f"the text of resource {i}",
        }
        for i in range(args.tools)
    ]
    scenario = {
        "versions": versions,
        "tools": tools,
        "resources": resources,
        "resource_templates": [],
        "page_size": PAGE_SIZE,
    }
    names = {"tools": {tool["name"] for tool in tools}, "resources": {r["name"] for r in resources}}
    print(
        f"--tools against a local mock ({args.tools} tools, {PAGE_SIZE} a page, {len(versions)} version(s)); "
        f"over HTTP --resources ({args.tools} resources, no template) and --read {READ_URI}; "
        f"medians of {args.runs} cold runs after a warm-up, round-robin; CPU = user+sys of the client and the "
        "children it waited for"
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "home").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
        env["HOME"] = str(tmp / "home")
        (tmp / "run").mkdir(mode=0o700)
        env["XDG_RUNTIME_DIR"] = str(tmp / "run")  # bkmcp --keep-alive's private folder, gone with the run
        env["PATH"] = os.pathsep.join(
            [str(Path(args.peers_dir).resolve() / "node" / "node_modules" / ".bin"), env.get("PATH", "")]
        )
        (tmp / "scenario.json").write_text(json.dumps(scenario))
        args.pyz_python = sys.executable
        if not args.host_python:  # what a user's python3 runs the pyz with: no packages, no .pth files of a dev venv
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
            args.pyz_python = str(tmp / "venv" / "bin" / "python")
        for transport in args.transport.split(","):
            server = MockServer(scenario) if transport == "http" else None
            target = (
                [server.start()]
                if server
                else [sys.executable, MOCK, "--stdio", "--quiet", "--scenario", str(tmp / "scenario.json")]
            )
            try:
                clients, missing = build_clients(transport, target, args, tmp)
                measure(clients, args.runs, env, str(tmp), names, server)
            finally:
                stop = [sys.executable, args.pyz, "--sessions", "--stop"]
                subprocess.run(stop, env=env, capture_output=True, timeout=60)  # the warm row's process
                if server:
                    server.stop()
            report(transport, clients, missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
