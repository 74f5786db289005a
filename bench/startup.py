#!/usr/bin/env python3
"""Startup cost of dist/bkmcp.pyz on every available CPython 3.9-3.14 (SPEC §13, docs/building.md).

    python3 bench/startup.py [--runs 21] [--pyz dist/bkmcp.pyz] [--python PATH ...] [--no-jq]

For each Python, medians (ms) of:
  pass        `python -c pass` (the baseline of the ratios)
  --version   `python bkmcp.pyz --version`
  --help      `python bkmcp.pyz --help`
  srv --help  `python bkmcp.pyz --config TMP/mcp.json demo --help`
  imp pyz     the `--tools` import set (bkmcp, httpx) loaded the way the pyz's __main__ loads it
  imp site    the same imports from a site-packages-like folder (`pip install --target`, with bytecode)
  jq first    extracting + importing the jq native on a fresh cache, minus the same process without jq
  jq warm     importing it from the cache, minus the same process without jq
Ratios: the CLI runs against `pass`, `imp pyz` against `imp site`. Every measurement runs once before timing,
so caches (the per-user compiled cache of non-build Pythons) are warm; nothing is asserted, only printed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = "import bkmcp, httpx"


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


def median_ms(cmd: list[str], runs: int, env: dict[str, str], setup=None) -> float:  # type: ignore[no-untyped-def]
    times = []
    for i in range(runs + 1):
        if setup:
            setup()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
        elapsed = (time.perf_counter() - t0) * 1000
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd} failed: {proc.stderr.decode(errors='replace')[-500:]}")
        if i:  # the first run warms caches
            times.append(elapsed)
    return statistics.median(times)


def site_dir(python: str, work: Path, pyz: Path) -> Path:
    """A folder with httpx & co installed by pip (bytecode compiled) plus bkmcp.py and its bytecode."""
    target = work / ("site-" + Path(python).parent.parent.name)
    if target.exists():
        return target
    lock = [line.split()[0] for line in (ROOT / "vendor.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#") and not line.startswith("jq==")]
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target",
           str(target), "--no-index", "--find-links", str(ROOT / "vendor_cache"), *sorted(set(lock))]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with zipfile.ZipFile(pyz) as zf:
        (target / "bkmcp.py").write_bytes(zf.read("bkmcp.py"))
    subprocess.run([python, "-m", "compileall", "-q", str(target)], check=True)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pyz", type=Path, default=ROOT / "dist" / "bkmcp.pyz")
    parser.add_argument("--python", action="append", default=[], help="interpreter(s) to measure")
    parser.add_argument("--no-jq", action="store_true", help="skip the jq extraction measurements")
    args = parser.parse_args()
    pyz = args.pyz.resolve()
    if not pyz.exists():
        subprocess.run([sys.executable, str(ROOT / "build_zipapp.py"), "--output", str(pyz)], check=True)
    with zipfile.ZipFile(pyz) as zf:
        info = json.loads(zf.read("BUILD-INFO.json"))
        main_src = zf.read("__main__.py").decode()
    tag, build_id = info["bytecode"]["cache_tag"], info["build_id"]
    pythons = [(subprocess.run([p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                               text=True, check=True).stdout.strip(), p) for p in args.python] or find_pythons()
    size = pyz.stat().st_size
    print(f"{pyz.name}: {size} bytes ({size / 1e6:.1f} MB), build {build_id}, bytecode for {tag}, "
          f"{args.runs} runs each, medians in ms")
    work = Path(tempfile.mkdtemp(prefix="bkmcp-bench-"))
    try:
        cfg = work / "mcp.json"
        cfg.write_text(json.dumps({"mcpServers": {"demo": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}))
        env = dict(os.environ, XDG_CACHE_HOME=str(work / "cache"))
        # The pyz's own __main__.py, run with `-c`, minus its last step (bkmcp.main()).
        tail = "import bkmcp\n\nsys.exit(bkmcp.main())\n"
        assert main_src.endswith(tail), "unexpected __main__.py"
        boot = f"import sys; sys.path.insert(0, {str(pyz)!r}); __file__ = {str(pyz / '__main__.py')!r}\n"
        boot += main_src[: -len(tail)]
        header = (f"{'python':<7}{'pass':>7}{'--version':>15}{'--help':>15}{'srv --help':>15}"
                  f"{'imp pyz':>9}{'imp site':>9}{'ratio':>7}{'jq first':>10}{'jq warm':>9}")
        print(header)
        rows = []
        for version, python in pythons:
            base = median_ms([python, "-c", "pass"], args.runs, env)
            cli = [median_ms([python, str(pyz), *a], args.runs, env)
                   for a in (["--version"], ["--help"], ["--config", str(cfg), "demo", "--help"])]
            site = site_dir(python, work, pyz)
            imp_pyz = median_ms([python, "-c", boot + IMPORTS], args.runs, env)
            imp_site = median_ms([python, "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {IMPORTS}"],
                                 args.runs, env)
            jq_first = jq_warm = None
            if not args.no_jq:
                probe = boot + "import _bkmcp_boot as b\n"  # the jq loader is the same code as in bkmcp.py
                jq_code = probe + "assert b.load_native_module('jq') is not None\n"
                native = work / "cache" / "bkmcp" / build_id / "native"
                no_jq = median_ms([python, "-c", probe], args.runs, env)
                try:
                    jq_first = median_ms([python, "-c", jq_code], args.runs, env,
                                         setup=lambda native=native: shutil.rmtree(native, ignore_errors=True)) - no_jq
                    jq_warm = median_ms([python, "-c", jq_code], args.runs, env) - no_jq
                except RuntimeError:
                    pass  # no native for this Python in the pyz
            cells = [f"{c:6.1f} {c / base:4.2f}x" for c in cli]
            jq_cells = "".join(f"{v:>+9.1f}" if v is not None else f"{'n/a':>9}" for v in (jq_first, jq_warm))
            print(f"{version:<7}{base:7.1f}{cells[0]:>15}{cells[1]:>15}{cells[2]:>15}"
                  f"{imp_pyz:9.1f}{imp_site:9.1f}{imp_pyz / imp_site:6.2f}x{jq_cells:>10}")
            rows.append(version)
        missing = [f"3.{m}" for m in range(9, 15) if f"3.{m}" not in rows]
        if missing:
            print("not measured (no interpreter found):", ", ".join(missing))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
