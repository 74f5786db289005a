#!/usr/bin/env python3
"""`make conformance`: the official MCP conformance harness's client scenarios against bkmcp (stdlib, Python 3.9+).

    run_conformance.py [--harness-dir DIR] [--bkmcp CMD] [--version V ...] [--scenario S ...] [-j N] [--out DIR]

For each pinned harness version (`.ci/install_conformance.sh` installs them into `.conformance/node`), every client
scenario of `conformance list --client` runs once as the harness infers it (`SCENARIO`) and, on harness versions
that hand the client its protocol version, once more per other dated spec version the scenario lists
(`SCENARIO@VERSION`, `--spec-version VERSION`, bkmcp pinned to it). The client command is `driver.py` (next to
this file), which turns the scenario into bkmcp commands.

A run passes when the harness exits 0 and its `checks.json` has at least one SUCCESS and no FAILURE (a run whose
checks were all skipped exercised nothing and counts as failed). `expected_failures.txt` lists the runs (or single
checks of a run) that fail because of a capability bkmcp deliberately lacks; the exit status is 1 on any unexpected
failure, any unexpected pass (remove the line) and any listed run that no longer exists, else 0.

Everything runs inside one private network namespace with loopback only (the harness's servers listen on all
interfaces) and a private PID namespace (nothing outlives the run): the script re-executes itself under
`unshare --user --map-root-user --net --pid --fork --kill-child`. Results: `--out` (default `.conformance/results`)
gets one directory per run (the harness's checks.json, stdout.txt, stderr.txt) and `summary.json`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSIONS = ("0.1.16", "0.2.0-alpha.12")
# Harness versions that pass MCP_CONFORMANCE_PROTOCOL_VERSION and run a scenario at each --spec-version on that
# version's wire (0.1.16 has neither: its --spec-version only filters).
PER_SPEC_VERSION = {"0.2.0-alpha.12"}
LATEST_DATED = "2025-11-25"  # what the harness runs a scenario at when no --spec-version is given and it lists it
CAPABILITIES = {  # the words expected_failures.txt may use, and what each stands for
    "oauth": "OAuth 2.1 authorization (discovery, registration, tokens): identity is the configured headers only",
    "elicitation": "answering elicitation/create (bkmcp answers it since issue 39: no line uses this word now)",
    "mrtr": "multi-round-trip requests (answered since issue 39: no line uses this word now)",
    "skills": "the skills extension (SEP-2640)",
    "schema-invalid-arguments": "sending arguments the tool's inputSchema rejects (checked locally first, contract §6)",
    "x-mcp-header-exclusion": "excluding tools with invalid x-mcp-header declarations (issue 11 item 4)",
}
_NETNS_ENV = "BKMCP_CONFORMANCE_NETNS"
_HARNESS_TIMEOUT_MS = 60000  # the harness's own bound on one client command (its default is 30 s)


@dataclass(frozen=True)
class Run:
    version: str
    scenario: str
    spec_version: str | None = None  # None: as the harness infers it

    @property
    def run_id(self) -> str:
        return self.scenario + (f"@{self.spec_version}" if self.spec_version else "")


@dataclass
class Outcome:
    run: Run
    passed: bool
    exit_status: int
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    result_dir: str = ""


def parse_scenario_list(text: str) -> list[tuple[str, list[str]]]:
    """`conformance list --client` output -> [(scenario, [spec versions or tags])]."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^\s+- (\S+)(?: \[([^\]]*)\])?\s*$", line)
        if m:
            found.append((m.group(1), [v for v in (m.group(2) or "").split(",") if v]))
    return found


def plan_runs(version: str, scenarios: list[tuple[str, list[str]]]) -> list[Run]:
    runs = []
    for name, tags in scenarios:
        runs.append(Run(version, name))
        dated = sorted(t for t in tags if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t))
        if version not in PER_SPEC_VERSION or len(dated) < 2:
            continue
        inferred = max((d for d in dated if d <= LATEST_DATED), default=None)
        runs.extend(Run(version, name, d) for d in dated if d != inferred)
    return runs


@dataclass
class Expected:
    capability: str
    checks: list[str] | None = None  # None: the whole run fails; else exactly these check ids fail


def parse_expected(text: str) -> dict[tuple[str, str], Expected]:
    """expected_failures.txt lines: `VERSION RUN-ID[:CHECK-ID] CAPABILITY [# why]`; `#` comments and blanks skipped.

    `RUN-ID` alone: the run fails as a whole. `RUN-ID:CHECK-ID` (one line per check): exactly the listed checks
    fail and every other check of the run must pass, whatever the client's exit status.
    """
    expected: dict[tuple[str, str], Expected] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"expected_failures.txt:{number}"
        if len(parts) != 3:
            raise ValueError(f"{where}: want 'VERSION RUN-ID[:CHECK-ID] CAPABILITY', got {raw!r}")
        version, target, capability = parts
        run_id, _, check = target.partition(":")
        if version not in VERSIONS:
            raise ValueError(f"{where}: unknown harness version {version!r}")
        if capability not in CAPABILITIES:
            raise ValueError(f"{where}: unknown capability {capability!r} (one of {', '.join(sorted(CAPABILITIES))})")
        old = expected.get((version, run_id))
        if old is not None and (old.checks is None or not check or check in old.checks or old.capability != capability):
            raise ValueError(f"{where}: {version} {target} conflicts with an earlier line for {run_id}")
        if old is None:
            expected[(version, run_id)] = Expected(capability, [check] if check else None)
        else:
            old.checks.append(check)  # type: ignore[union-attr]
    return expected


def judge_checks(checks: list[dict]) -> tuple[bool, dict[str, int], list[str]]:
    """(passed, status counts, failing check ids) of one checks.json; all-skipped is not a pass."""
    counts: dict[str, int] = {}
    failures = []
    for check in checks:
        status = str(check.get("status"))
        counts[status] = counts.get(status, 0) + 1
        if status == "FAILURE":
            failures.append(str(check.get("id")))
    return counts.get("SUCCESS", 0) > 0 and not failures, counts, failures


def compare(outcomes: list[Outcome], expected: dict[tuple[str, str], Expected]) -> list[str]:
    """The problems that fail `make conformance`: unexpected failures and passes, listed runs that do not exist."""
    problems = []
    seen = set()
    for o in outcomes:
        key = (o.run.version, o.run.run_id)
        seen.add(key)
        name = f"{o.run.version} {o.run.run_id}"
        entry = expected.get(key)
        if entry is None:
            if not o.passed:
                status = "" if o.exit_status == 0 else f", harness exit {o.exit_status}"
                problems.append(
                    f"UNEXPECTED FAILURE {name}: failing checks "
                    f"{', '.join(o.failures) or '(none: ' + _counts_text(o.counts) + ')'}"
                    f"{status}; see {o.result_dir}"
                )
        elif entry.checks is None:
            if o.passed:
                problems.append(
                    f"UNEXPECTED PASS {name} (listed as needing {entry.capability}): remove its line "
                    "from tests/conformance/expected_failures.txt"
                )
        else:
            extra = sorted(set(o.failures) - set(entry.checks))
            fixed = sorted(set(entry.checks) - set(o.failures))
            if extra or not o.counts.get("SUCCESS"):
                problems.append(
                    f"UNEXPECTED FAILURE {name}: failing checks {', '.join(extra) or '(no success)'} "
                    f"besides the listed {', '.join(entry.checks)}; see {o.result_dir}"
                )
            if fixed:
                problems.append(
                    f"UNEXPECTED PASS {name}: check(s) {', '.join(fixed)} (listed as needing "
                    f"{entry.capability}) pass now: remove their lines"
                )
    return problems + [
        f"STALE {v} {r}: listed in expected_failures.txt but the harness has no such run"
        for (v, r) in sorted(expected)
        if (v, r) not in seen
    ]


def is_expected_outcome(o: Outcome, entry: Expected | None) -> bool:
    if entry is None:
        return o.passed
    if entry.checks is None:
        return not o.passed
    return set(o.failures) == set(entry.checks) and bool(o.counts.get("SUCCESS"))


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())) or "no checks"


def enter_namespace(argv: list[str]) -> int:
    """Re-run this script inside fresh user + network + PID namespaces with only loopback up."""
    cmd = [
        "unshare",
        "--user",
        "--map-root-user",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "sh",
        "-c",
        'ip link set lo up && exec "$@"',
        "sh",
        sys.executable,
        os.path.abspath(__file__),
    ] + argv
    try:
        return subprocess.call(cmd, env={**os.environ, _NETNS_ENV: "1"})
    except FileNotFoundError as exc:
        raise SystemExit(
            f"run_conformance: {exc.filename} not found (.ci/install_conformance.sh checks what is needed)"
        ) from None


def check_namespace() -> None:
    with open("/proc/self/net/dev", encoding="ascii") as fh:  # this process's namespace (/sys/class/net is not)
        links = sorted(line.split(":")[0].strip() for line in fh.readlines()[2:])
    if links != ["lo"]:
        raise SystemExit(f"run_conformance: not in a loopback-only network namespace (links: {links})")


def run_one(run: Run, node: str, harness: str, driver_cmd: str, out: str) -> Outcome:
    result_dir = os.path.join(out, run.version, run.run_id.replace("/", "_"))
    shutil.rmtree(result_dir, ignore_errors=True)  # only this run's results, never a previous one's
    os.makedirs(result_dir)
    argv = [
        node,
        harness,
        "client",
        "--command",
        driver_cmd,
        "--scenario",
        run.scenario,
        "--timeout",
        str(_HARNESS_TIMEOUT_MS),
        "-o",
        result_dir,
    ]
    env = dict(os.environ)
    if run.spec_version:
        argv += ["--spec-version", run.spec_version]
        env["BKMCP_CONFORMANCE_PIN"] = "1"
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=_HARNESS_TIMEOUT_MS / 1000 + 60,
        )  # safety net over the harness's own bound
        status, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        status, log = -1, f"harness did not end: {exc}"
    seconds = time.monotonic() - start
    with open(os.path.join(result_dir, "harness.log"), "w", encoding="utf-8") as fh:
        fh.write(log)
    found = sorted(glob.glob(os.path.join(result_dir, "**", "checks.json"), recursive=True))
    if not found:
        return Outcome(run, False, status, {"NO-CHECKS-FILE": 1}, [], seconds, result_dir)
    with open(found[-1], encoding="utf-8") as fh:
        passed, counts, failures = judge_checks(json.load(fh))
    return Outcome(run, passed and status == 0, status, counts, failures, seconds, os.path.dirname(found[-1]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness-dir", default=os.path.join(ROOT, ".conformance", "node"))
    default_bkmcp = f"{shlex.quote(sys.executable)} {shlex.quote(os.path.join(ROOT, 'bkmcp.py'))}"
    parser.add_argument(
        "--bkmcp",
        default=default_bkmcp,
        help="how the driver runs bkmcp (shell-quoted; default: this Python + bkmcp.py)",
    )
    parser.add_argument("--version", action="append", choices=VERSIONS, help="harness version (default: all)")
    parser.add_argument(
        "--scenario", action="append", help="run only these scenarios (lines for the others are not judged)"
    )
    parser.add_argument("-j", "--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--out", default=os.path.join(ROOT, ".conformance", "results"))
    parser.add_argument("--expected", default=os.path.join(HERE, "expected_failures.txt"))
    opts = parser.parse_args(args)
    if os.environ.get(_NETNS_ENV) != "1":
        return enter_namespace(args)
    check_namespace()
    try:
        with open(opts.expected, encoding="utf-8") as fh:
            expected = parse_expected(fh.read())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"run_conformance: {exc}") from None
    node = os.path.join(opts.harness_dir, "node_modules", ".bin", "node")
    out = os.path.abspath(opts.out)
    # The harness splits --command on spaces: the driver's bkmcp command line travels in the environment instead.
    os.environ["BKMCP_CONFORMANCE_BKMCP"] = opts.bkmcp
    driver_cmd = f"{sys.executable} {os.path.join(HERE, 'driver.py')}"
    if " " in sys.executable + HERE:
        raise SystemExit("run_conformance: the harness splits --command on spaces; use paths without spaces")
    runs: list[Run] = []
    for version in opts.version or VERSIONS:
        harness = os.path.join(opts.harness_dir, "node_modules", f"conformance-{version}", "dist", "index.js")
        listed = subprocess.run([node, harness, "list", "--client"], capture_output=True, text=True, timeout=120)
        if listed.returncode != 0:
            raise SystemExit(
                f"run_conformance: {node} {harness} list failed (run .ci/install_conformance.sh): "
                f"{listed.stderr.strip()}"
            )
        runs += [
            r
            for r in plan_runs(version, parse_scenario_list(listed.stdout))
            if not opts.scenario or r.scenario in opts.scenario
        ]
    # Lines for harness versions or scenarios left out of this run are not judged (nor reported stale).
    expected = {
        k: v
        for k, v in expected.items()
        if k[0] in (opts.version or VERSIONS) and (not opts.scenario or k[1].split("@")[0] in opts.scenario)
    }
    print(f"run_conformance: {len(runs)} runs, {opts.jobs} at a time; bkmcp = {opts.bkmcp}", flush=True)
    start = time.monotonic()
    outcomes: list[Outcome] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = [
            pool.submit(
                run_one,
                r,
                node,
                os.path.join(opts.harness_dir, "node_modules", f"conformance-{r.version}", "dist", "index.js"),
                driver_cmd,
                out,
            )
            for r in runs
        ]
        for future in futures:
            o = future.result()
            outcomes.append(o)
            entry = expected.get((o.run.version, o.run.run_id))
            verdict = ("pass" if o.passed else "FAIL") + (f" (expected: {entry.capability})" if entry else "")
            verdict += "" if is_expected_outcome(o, entry) else " !!"
            print(
                f"  {o.run.version:<15} {o.run.run_id:<52} {verdict:<38} {_counts_text(o.counts)}  {o.seconds:.1f}s",
                flush=True,
            )
    problems = compare(outcomes, expected)
    summary = {}
    for version in opts.version or VERSIONS:
        mine = [o for o in outcomes if o.run.version == version]
        summary[version] = {
            "runs": len(mine),
            "passed": sum(o.passed for o in mine),
            "expected_failures": sum(
                (not o.passed) and is_expected_outcome(o, expected.get((version, o.run.run_id))) for o in mine
            ),
            "unexpected": sum(not is_expected_outcome(o, expected.get((version, o.run.run_id))) for o in mine),
            "passed_runs": [o.run.run_id for o in mine if o.passed],
        }
        s = summary[version]
        print(
            f"run_conformance: {version}: {s['passed']}/{s['runs']} passed, {s['expected_failures']} expected "
            f"failures, {s['unexpected']} unexpected",
            flush=True,
        )
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(
            {
                "summary": summary,
                "problems": problems,
                "seconds": round(time.monotonic() - start, 1),
                "runs": [
                    {
                        "version": o.run.version,
                        "run": o.run.run_id,
                        "passed": o.passed,
                        "exit_status": o.exit_status,
                        "checks": o.counts,
                        "failing_checks": o.failures,
                        "seconds": round(o.seconds, 1),
                    }
                    for o in outcomes
                ],
            },
            fh,
            indent=1,
        )
    for problem in problems:
        print(f"run_conformance: {problem}", flush=True)
    print(
        f"run_conformance: {'FAILED' if problems else 'OK'} in {time.monotonic() - start:.0f} s (results in {out})",
        flush=True,
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
