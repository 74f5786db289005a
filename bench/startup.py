#!/usr/bin/env python3
"""Startup cost of dist/bkmcp.pyz on every available CPython 3.9-3.14 (docs/contract.md §13, docs/building.md).

    python3 bench/startup.py [--runs 21] [--pyz dist/bkmcp.pyz] [--python PATH ...] [--no-jq]

For each Python, medians (ms) of:
  pass        `python -c pass` (the baseline of the ratios)
  --version   `python bkmcp.pyz --version`
  --help      `python bkmcp.pyz --help`
  srv --help  `python bkmcp.pyz --config TMP/mcp.json demo --help`
  empty       an empty zipapp (`python -m zipapp` of a `pass` script): the floor any pyz pays (zipimport and
              runpy; on 3.9 runpy imports `typing` through importlib.util)
  help src    `bkmcp.main(["--help"])` from that site-packages folder; ratio = pyz --help / this (the
              artifact's own overhead, independent of how heavy bkmcp.py is)
  imp pyz     the `--tools` import set (bkmcp, then httpx as bkmcp loads it) loaded the way the pyz's __main__ loads it
  imp site    the same imports from a site-packages-like folder (`pip install --target`, with bytecode)
  jq first    extracting + importing the jq native on a fresh cache, minus the same process without jq
  jq warm     importing it from the cache, minus the same process without jq
  1st help    `--help` on a fresh cache: for a Python other than the build one, the first-run cost of
              extracting the per-user compiled cache (and compiling bkmcp.py)
Each Python runs through a fresh empty venv (`--host-site`: the interpreter itself), so that a .pth file of the
host's site-packages (this machine's 3.11 imports certifi from one at every start) cannot inflate `pass`.
After the table, for this interpreter: a checkout's two ways to start (docs/building.md, issue 37 item 6):
`python bkmcp.py --help` (a script is compiled at every start: 14k+ lines) against `python -m bkmcp --help` (the
module's compiled cache in __pycache__, written once), both in a copy of the checkout's bkmcp.py.
Ratios: the CLI runs against `pass`, `help src` as said, `imp pyz` against `imp site`. Every command runs once
before timing, so caches (the per-user compiled cache of non-build Pythons) are warm, then the commands of one
Python run round-robin. Nothing is asserted, only printed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = "import bkmcp; bkmcp.import_httpx()"  # what --tools loads: httpx and httpcore, without their extras


def find_pythons() -> list[tuple[str, str]]:
    """(version, path) of real CPython 3.9-3.14 interpreters from pyenv (not its shims), else this one."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = {}
    for minor in range(9, 15):
        paths = sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", "python3")))
        paths = [p for p in paths if "t" not in os.path.basename(os.path.dirname(os.path.dirname(p)))[4:]]
        if paths:
            found[f"3.{minor}"] = paths[-1]
    if not found:
        found[f"{sys.version_info[0]}.{sys.version_info[1]}"] = sys.executable
    return sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split("."))))


CLOCK = "wall"


def run_ms(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time of one run, or with --cpu the child's user+sys CPU time (steadier on a busy machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.stderr.decode(errors='replace')[-500:]}")
    if CLOCK == "cpu":
        return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
    return elapsed


def medians(cmds: dict[str, list[str]], runs: int, env: dict[str, str], setup=None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Median ms of each command, run round-robin (so drift hits all alike) after one warm-up run each."""
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for i in range(runs + 1):
        for name, cmd in cmds.items():
            if setup:
                setup()
            elapsed = run_ms(cmd, env)
            if i:
                times[name].append(elapsed)
    return {name: statistics.median(ts) for name, ts in times.items()}


def site_dir(python: str, work: Path, pyz: Path) -> Path:
    """A folder with httpx & co installed by pip (bytecode compiled) plus bkmcp.py and its bytecode."""
    target = work / ("site-" + Path(python).parent.parent.name)
    if target.exists():
        return target
    lock = [
        line.split()[0]
        for line in (ROOT / "vendor.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#") and not line.startswith("jq==")
    ]
    # The locked wheels are pure Python, so this interpreter's pip installs them for one without pip (Debian's
    # python3.14-minimal, which .ci/install_foreign.sh fetches); the bytecode is still compiled by ``python``.
    has_pip = subprocess.run([python, "-c", "import pip"], capture_output=True, check=False).returncode == 0
    cmd = [
        python if has_pip else sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--target",
        str(target),
        "--no-index",
        "--find-links",
        str(ROOT / "vendor_cache"),
        *sorted(set(lock)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install --target failed: {proc.stderr[-800:]}")
    with zipfile.ZipFile(pyz) as zf:
        (target / "bkmcp.py").write_bytes(zf.read("bkmcp.py"))
    subprocess.run([python, "-m", "compileall", "-q", str(target)], check=True)
    return target


def checkout_start(work: Path, runs: int, env: dict[str, str]) -> None:
    """A checkout's `python bkmcp.py --help` against `python -m bkmcp --help` (module bytecode cached)."""
    checkout = work / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "bkmcp.py", checkout / "bkmcp.py")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout)], check=True)
    here = os.getcwd()
    os.chdir(checkout)  # `-m` looks in the working directory first: this checkout's bkmcp.py and its cache
    try:
        m = medians(
            {
                "pass": [sys.executable, "-c", "pass"],
                "script": [sys.executable, "bkmcp.py", "--help"],
                "module": [sys.executable, "-m", "bkmcp", "--help"],
            },
            runs,
            env,
        )
    finally:
        os.chdir(here)
    print(
        f"checkout ({sys.version_info[0]}.{sys.version_info[1]}): python -c pass {m['pass']:.1f}, "
        f"python -m bkmcp --help {m['module']:.1f}, python bkmcp.py --help {m['script']:.1f} "
        f"({m['script'] / m['module']:.2f}x the -m form)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pyz", type=Path, default=ROOT / "dist" / "bkmcp.pyz")
    parser.add_argument("--python", action="append", default=[], help="interpreter(s) to measure")
    parser.add_argument("--no-jq", action="store_true", help="skip the jq extraction measurements")
    parser.add_argument("--cpu", action="store_true", help="measure the child's CPU time instead of wall time")
    parser.add_argument(
        "--no-site", action="store_true", help="run every interpreter with -S (no site-packages .pth side effects)"
    )
    parser.add_argument(
        "--host-site",
        action="store_true",
        help="run the interpreters themselves, with whatever their site-packages .pth files import "
        "(default: each through a fresh empty venv, so a host .pth cannot inflate `-c pass`)",
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = "cpu" if args.cpu else "wall"
    pyz = args.pyz.resolve()
    if not pyz.exists():
        subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "--output", str(pyz)], check=True)
    with zipfile.ZipFile(pyz) as zf:
        info = json.loads(zf.read("BUILD-INFO.json"))
        main_src = zf.read("__main__.py").decode()
    tag, build_id = info["bytecode"]["cache_tag"], info["build_id"]
    pythons = [
        (
            subprocess.run(
                [p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip(),
            p,
        )
        for p in args.python
    ] or find_pythons()
    size = pyz.stat().st_size
    print(
        f"{pyz.name}: {size} bytes ({size / 1e6:.1f} MB), build {build_id}, bytecode for {tag}, "
        f"{args.runs} runs each, medians of {CLOCK} time in ms{', every python with -S' if args.no_site else ''}"
        + (", interpreters as installed (host .pth files run)" if args.host_site else ", each Python in an empty venv")
    )
    work = Path(tempfile.mkdtemp(prefix="bkmcp-bench-"))
    try:
        cfg = work / "mcp.json"
        cfg.write_text(json.dumps({"mcpServers": {"demo": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}))
        env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
        empty = work / "empty.pyz"
        with zipfile.ZipFile(empty, "w") as zf:
            zf.writestr("__main__.py", "pass\n")
        # The pyz's own __main__.py, run with `-c` as zipimport runs it (its __file__ and __loader__), minus its
        # last steps (import bkmcp, the collector back on, bkmcp.main()); the collector is back on before the
        # imports are timed, as for the same imports from site-packages.
        tail = "import bkmcp\ngc.enable()\nsys.exit(bkmcp.main())\n"
        assert main_src.endswith(tail), "unexpected __main__.py"
        boot = (
            f"import sys, zipimport; sys.path.insert(0, {str(pyz)!r}); __file__ = {str(pyz / '__main__.py')!r}; "
            f"__loader__ = zipimport.zipimporter({str(pyz)!r})\n"
        )
        boot += main_src[: -len(tail)] + "gc.enable()\n"
        header = (
            f"{'python':<7}{'pass':>7}{'empty':>7}{'--version':>15}{'--help':>15}{'srv --help':>15}"
            f"{'help src':>13}"
            f"{'imp pyz':>9}{'imp site':>9}{'ratio':>7}{'jq first':>10}{'jq warm':>9}{'1st help':>9}"
        )
        print(header)
        rows = []
        for version, python in pythons:
            site = site_dir(python, work, pyz)
            if not args.host_site:  # an empty venv: the interpreter as shipped, without this host's .pth imports
                venv = work / f"venv-{version}"
                subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
                python = str(venv / "bin" / "python")
            py = [python, "-S"] if args.no_site else [python]
            m = medians(
                {
                    "pass": [*py, "-c", "pass"],
                    "empty": [*py, str(empty)],
                    "version": [*py, str(pyz), "--version"],
                    "help": [*py, str(pyz), "--help"],
                    "srv": [*py, str(pyz), "--config", str(cfg), "demo", "--help"],
                    "imp_pyz": [*py, "-c", boot + IMPORTS],
                    "imp_site": [*py, "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {IMPORTS}"],
                    "help_site": [
                        *py,
                        "-c",
                        f"import sys; sys.path.insert(0, {str(site)!r}); import bkmcp; "
                        "sys.exit(bkmcp.main(['--help']))",
                    ],
                },
                args.runs,
                env,
            )
            base, imp_pyz, imp_site = m["pass"], m["imp_pyz"], m["imp_site"]
            cli = [m["version"], m["help"], m["srv"]]
            jq_first = jq_warm = None
            if not args.no_jq:
                probe = boot + "import _bkmcp_boot as b\n"  # the jq loader bkmcp.py calls
                jq_code = probe + "assert b.load_native_module('jq') is not None\n"
                native = work / "cache" / "bkmcp" / build_id / "native"
                try:
                    warm = medians({"no_jq": [*py, "-c", probe], "jq": [*py, "-c", jq_code]}, args.runs, env)
                    first = medians(
                        {"jq": [*py, "-c", jq_code]},
                        args.runs,
                        env,
                        setup=lambda native=native: shutil.rmtree(native, ignore_errors=True),
                    )
                    jq_first, jq_warm = first["jq"] - warm["no_jq"], warm["jq"] - warm["no_jq"]
                except RuntimeError:
                    pass  # no native for this Python in the pyz
            tree = work / "cache" / "bkmcp" / build_id / "py"
            first_help = medians(
                {"help": [*py, str(pyz), "--help"]},
                max(3, args.runs // 3),
                env,
                setup=lambda tree=tree: shutil.rmtree(tree, ignore_errors=True),
            )["help"]
            cells = [f"{c:6.1f} {c / base:4.2f}x" for c in cli]
            jq_cells = "".join(f"{v:>+9.1f}" if v is not None else f"{'n/a':>9}" for v in (jq_first, jq_warm))
            help_site = m["help_site"]
            print(
                f"{version:<7}{base:7.1f}{m['empty'] / base:6.2f}x{cells[0]:>15}{cells[1]:>15}{cells[2]:>15}"
                f"{help_site:7.1f} {m['help'] / help_site:4.2f}x"
                f"{imp_pyz:9.1f}{imp_site:9.1f}{imp_pyz / imp_site:6.2f}x{jq_cells:>10}{first_help:9.1f}"
            )
            rows.append(version)
        missing = [f"3.{m}" for m in range(9, 15) if f"3.{m}" not in rows]
        if missing:
            print("not measured (no interpreter found):", ", ".join(missing))
        checkout_start(work, args.runs, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
