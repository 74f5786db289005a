#!/usr/bin/env python3
"""Build the single-file artifact `dist/bkmcp.pyz` (docs/contract.md §12, docs/building.md). Stdlib only.

    python3 build_zipapp.py                       build dist/bkmcp.pyz, print its sha256 and size
    python3 build_zipapp.py --check               rebuild in memory, compare with dist/bkmcp.pyz byte for byte
    python3 build_zipapp.py --platform none       no jq natives (jq then needs a `jq` executable), written to
                                                  dist/bkmcp-platform-none.pyz: it never replaces the full build
    python3 build_zipapp.py --platform +macosx_11_0_arm64 --platform -musllinux_1_2_aarch64
    python3 build_zipapp.py --update-lock         (re)download the pins of vendor.txt and rewrite its hashes

Inputs: `bkmcp.py`, `zipapp_support.py` (stored as `_bkmcp_boot.py`), and the wheels pinned with their sha256 in
`vendor.txt`, fetched by `pip download --only-binary=:all: --no-deps` into `vendor_cache/` and checked against
the pins before use. Output layout:

    __main__.py(c)                 version gate, bkmcp's module (loaded once: docs/building.md), bkmcp.main()
    bkmcp.py(c), _bkmcp_boot.py(c) the program and its zipapp runtime support
    _bkmcp_vendor.zip              stored, nested zip of the pure packages: httpx & co, jsonschema & co, as
                                   `.py` plus `.pyc` (unchecked-hash, legacy layout) for the build Python only,
                                   since zipimport ignores __pycache__; extracted once into the per-user cache on
                                   the first import of one of them, so that `--help` reads a small directory
    <dist>-<ver>.dist-info/        METADATA and licence files only
    _bkmcp_native/<os>/jq.<abi>.so the jq binding per target, extracted on first --jq use
    BUILD-INFO.json                pins, sha256 of bkmcp.py, build id, natives and their sha256, build time

The output is deterministic: entries sorted, times from SOURCE_DATE_EPOCH (default: last commit time), fixed
permissions, fixed compression. The bytecode depends on the build Python's minor version, recorded in
BUILD-INFO.json; `--check` must run on the same minor.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import marshal
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from zipapp_support import REGEX_TABLE, lean_code  # lean_code: the compile the pyz's compiled cache uses too

HERE = Path(__file__).resolve().parent
LOCK_FILE = HERE / "vendor.txt"
CACHE_DIR = HERE / "vendor_cache"
DEFAULT_OUTPUT = HERE / "dist" / "bkmcp.pyz"
SHEBANG = b"#!/usr/bin/env python3\n"
NATIVE_DIR = "_bkmcp_native"
BOOT_MODULE = "_bkmcp_boot"
# The vendored packages' code lives in one nested, stored zip: zipimport reads the whole central directory of the
# pyz on every start, ~4.5 µs per entry, and `--help` needs none of these ~370 entries (docs/building.md).
VENDOR_ZIP = "_bkmcp_vendor.zip"

JQ_PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
DEFAULT_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "musllinux_1_2_x86_64",
    "manylinux_2_28_aarch64",
    "musllinux_1_2_aarch64",
)
NATIVE_PACKAGES = ("jq",)

# Trimming: what a wheel member must not be to enter the pyz (tests, scripts, type stubs, build leftovers).
_DROP_DIRS = {"tests", "test", "testing", "benchmarks", "bin", "__pycache__"}
_DROP_SUFFIXES = (".pyi", ".pyc", ".pyo", ".c", ".h", ".pyx", ".pxd")
_DROP_NAMES = {"py.typed"}
# Patches to vendored files, kept minimal and exceptional (docs/building.md). The build fails when a patch no
# longer applies, so a pin bump forces a look.
PATCHES: dict[str, list[tuple[bytes, bytes, str]]] = {
    "httpcore/_ssl.py": [
        (
            b"def default_ssl_context() -> ssl.SSLContext:",
            b'def default_ssl_context() -> "ssl.SSLContext":',
            "the one annotation evaluated while httpcore loads that names ssl: an http:// command never loads ssl",
        )
    ],
    "jsonschema/validators.py": [
        (
            b'package.joinpath("schemas", "vocabularies")',
            b'package.joinpath("schemas").joinpath("vocabularies")',
            "Python 3.9's zipfile.Path.joinpath takes one argument; importlib.resources gives one inside a zip",
        )
    ],
}
_LICENCE_RE = re.compile(r"(^|/)(LICEN[CS]E|COPYING|NOTICE|AUTHORS)[^/]*$|/licenses/", re.I)


class BuildError(Exception):
    pass


# ---------------------------------------------------------------------------------------------- lock file


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    filename: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def native(self) -> bool:
        return self.name in NATIVE_PACKAGES

    def tags(self) -> tuple[str, set[str]]:
        """(python tag, platform tags) of a native wheel, e.g. ("cp311", {"manylinux_2_28_x86_64", ...})."""
        parts = self.filename[: -len(".whl")].split("-")
        return parts[-3], set(parts[-1].split("."))


def load_lock(path: Path = LOCK_FILE) -> list[Pin]:
    pins = []
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req, filename, digest = line.split()
            name, version = req.split("==")
            algo, hexdigest = digest.split(":")
        except ValueError:
            raise BuildError(f"{path.name}:{lineno}: expected 'name==version file sha256:HEX'") from None
        if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
            raise BuildError(f"{path.name}:{lineno}: bad hash {digest!r}")
        pins.append(Pin(name, version, filename, hexdigest))
    return pins


def render_lock(pins: list[Pin]) -> str:
    lines = [
        "# Wheels vendored into dist/bkmcp.pyz: one line per file, `name==version file sha256:HEX`.",
        "# Policy and how to bump a pin: docs/building.md. Rewritten by `python3 build_zipapp.py --update-lock`.",
    ]
    for pin in sorted(pins, key=lambda p: (p.native, p.name.lower(), p.filename)):
        lines.append(f"{pin.requirement} {pin.filename} sha256:{pin.sha256}")
    return "\n".join(lines) + "\n"


def select_native_pins(pins: list[Pin], platforms: list[str], pythons: tuple[str, ...]) -> list[Pin]:
    chosen = []
    for name in NATIVE_PACKAGES:
        for py in pythons:
            tag = "cp" + py.replace(".", "")
            for plat in platforms:
                match = [p for p in pins if p.name == name and p.native and p.tags()[0] == tag and plat in p.tags()[1]]
                if not match:
                    raise BuildError(f"vendor.txt has no {name} wheel for {tag} on {plat}: run --update-lock")
                chosen.append(match[0])
    return sorted(set(chosen), key=lambda p: p.filename)


# ------------------------------------------------------------------------------------------------ wheels


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pip_download(requirement: str, dest: Path, python: str | None = None, platform: str | None = None) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--no-deps",
        "--dest",
        str(dest),
    ]
    if python:
        cmd += ["--python-version", python, "--implementation", "cp", "--abi", "cp" + python.replace(".", "")]
    else:  # pure-Python wheel only, even where a compiled one exists (pyrsistent)
        cmd += ["--python-version", "3.9"]
    cmd += ["--platform", platform or "any"]
    cmd.append(requirement)
    with tempfile.TemporaryDirectory() as tmp:
        cmd[cmd.index(str(dest))] = tmp
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        files = sorted(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(files) != 1:
            raise BuildError(f"pip download {requirement} failed:\n{proc.stderr.strip()}")
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / files[0].name
        shutil.move(str(files[0]), str(target))
        return target


def fetch_wheel(pin: Pin, cache: Path, platforms: list[str]) -> bytes:
    """The pinned wheel's bytes, from the cache or pip, refused unless its sha256 matches the pin."""
    path = cache / pin.filename
    if not path.exists():
        python = platform = None
        if pin.native:
            pytag, plats = pin.tags()
            python = pytag[2] + "." + pytag[3:]
            platform = next((p for p in platforms if p in plats), sorted(plats)[-1])
        got = _pip_download(pin.requirement, cache, python, platform)
        if got.name != pin.filename:
            raise BuildError(f"pip fetched {got.name} for {pin.requirement}, vendor.txt pins {pin.filename}")
    data = path.read_bytes()
    if _sha256(data) != pin.sha256:
        raise BuildError(f"{path} does not match the sha256 pinned in vendor.txt: delete it or fix the pin")
    return data


def prefetch_wheels(pins: list[Pin], cache: Path, platforms: list[str], out: IO[str] | None = None) -> int:
    """Download the pins not in ``cache`` yet, saying first how many and where they go, then each one as it comes
    (on a terminal one line that updates, else a line per wheel), then the total size; nothing when all are
    cached. On stderr: stdout keeps the build's one summary line. How many were downloaded."""
    out = sys.stderr if out is None else out
    missing = [pin for pin in dict.fromkeys(pins) if not (cache / pin.filename).exists()]
    if not missing:
        return 0
    tty = out.isatty()
    where = cache.resolve()
    out.write(
        f"build_zipapp: downloading {len(missing)} of the {len(set(pins))} wheels pinned in vendor.txt "
        f"(pip download from the package index, each checked against its sha256) into {where}/, once: later builds "
        "use that cache\n"
    )
    out.flush()
    total = 0
    for done, pin in enumerate(missing, 1):
        if tty:
            out.write(f"\r\033[K  [{done}/{len(missing)}] {pin.filename} …")
            out.flush()
        fetch_wheel(pin, cache, platforms)
        size = (cache / pin.filename).stat().st_size
        total += size
        if not tty:
            shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
            out.write(f"  [{done}/{len(missing)}] {pin.filename} ({shown})\n")
            out.flush()
    if tty:
        out.write("\r\033[K")
    out.write(f"build_zipapp: downloaded {len(missing)} wheels, {total / 1e6:.1f} MB, into {where}/\n")
    out.flush()
    return len(missing)


def update_lock(platforms: list[str], pythons: tuple[str, ...], cache: Path) -> None:
    """Download every pin of vendor.txt (each native for every target) and rewrite the file with their hashes."""
    reqs = set()  # only `name==version`, the first word of each line, is read: the rest is rewritten
    for raw in LOCK_FILE.read_text(encoding="utf-8").splitlines():
        words = raw.split("#", 1)[0].split()
        if words:
            name, _, version = words[0].partition("==")
            if not version:
                raise BuildError(f"vendor.txt: {words[0]!r} is not an exact pin")
            reqs.add((name, version, name in NATIVE_PACKAGES))
    new: list[Pin] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, version, native in sorted(reqs):
            targets = [(py, plat) for py in pythons for plat in platforms] if native else [(None, None)]
            for py, plat in targets:
                got = _pip_download(f"{name}=={version}", Path(tmp), py, plat)
                pin = Pin(name, version, got.name, _sha256(got.read_bytes()))
                if pin not in new:
                    new.append(pin)
                cache.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(got, cache / got.name)
    LOCK_FILE.write_text(render_lock(new), encoding="utf-8")
    print(f"vendor.txt: {len(new)} wheels pinned")


# -------------------------------------------------------------------------------------------- contents


def _keep_member(name: str) -> bool:
    parts = name.split("/")
    if name.endswith("/") or any(p in _DROP_DIRS for p in parts[:-1]):
        return False
    if parts[-1] in _DROP_NAMES or parts[-1].endswith(_DROP_SUFFIXES):
        return False
    if parts[0].endswith(".dist-info"):
        return parts[-1] == "METADATA" or bool(_LICENCE_RE.search(name))
    if parts[0].endswith(".data"):
        return False
    return True


def wheel_members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist() if _keep_member(i.filename)}


def _metadata_field(members: dict[str, bytes], field: str, prefix: str = "") -> str | None:
    for name, data in members.items():
        if name.endswith(".dist-info/METADATA"):
            for line in data.decode("utf-8", "replace").splitlines():
                if not line:
                    break
                if line.startswith(field + ": " + prefix):
                    return line[len(field) + 2 :].strip().split(" :: ")[-1]
    return None


def native_folder(platform: str) -> str:
    """Folder of `_bkmcp_native/` for a wheel platform tag (must agree with zipapp_support._native_folders)."""
    if platform.startswith("musllinux"):
        return "linux-musl"  # musl CPython < 3.11 uses the linux-gnu suffix: keep them apart from glibc builds
    if platform.startswith(("manylinux", "linux")):
        return "linux"
    if platform.startswith("macosx"):
        arch = platform.rsplit("_", 1)[-1]
        return "darwin" if arch in ("universal2", "intel") else f"darwin-{arch}"
    if platform.startswith("win"):
        return "win32"
    raise BuildError(f"unsupported platform tag {platform!r}")


MAIN_TEMPLATE = """\
# bkmcp.pyz entry point, written by build_zipapp.py. Old Pythons parse it too: keep the syntax plain.
import sys
if sys.version_info < (3, 9):
    sys.stderr.write("bkmcp needs Python 3.9 or newer; %%s is Python %%s. Run it with a newer python3.\\n"
                     %% (sys.executable or "this interpreter", sys.version.split()[0]))
    sys.exit(1)
import gc, os
gc.disable()  # loading bkmcp makes no garbage worth a collection: none runs until main (docs/building.md)
_archive = os.path.dirname(os.path.abspath(__file__))
_copy = False
if sys.implementation.cache_tag != %(cache_tag)r:  # the zip's bytecode is for one Python: others use a per-user copy
    _cache = os.environ.get("XDG_CACHE_HOME", "")
    _cache = _cache if os.path.isabs(_cache) else os.path.join(os.path.expanduser("~"), ".cache")
    _tree = os.path.join(_cache, "bkmcp", %(build_id)r, "py")
    if os.path.isdir(_tree) and not os.environ.get("BKMCP_NO_COMPILED_CACHE"):
        if not hasattr(os, "getuid") or os.stat(_tree).st_uid == os.getuid():
            sys.path.insert(0, _tree)
    import _bkmcp_boot
    _copy = _bkmcp_boot.use_compiled_cache(%(build_id)r, _archive)
if not _copy:  # a finder that finds nothing: the first vendored import puts their nested zip on sys.path, once
    class _Vendored:
        lock, done = __import__("_thread").allocate_lock(), False
        def find_spec(name, path=None, target=None):  # looked up on the class: a plain function
            if path is None and not _Vendored.done and name in %(vendored)r:
                with _Vendored.lock:
                    if not _Vendored.done:
                        import _bkmcp_boot  # its ImportError (no cache folder, damaged pyz) keeps the finder active
                        _bkmcp_boot.use_vendor_zip(%(build_id)r, _archive, %(vendor_sha256)r, %(vendored)r, %(magic)r)
                        _Vendored.done = True
            return None
    sys.meta_path.insert(0, _Vendored)
if not _copy and type(globals().get("__loader__")).__name__ == "zipimporter" and hasattr(__loader__, "exec_module"):
    import importlib.util as _util  # bkmcp.pyc loaded once, not twice as import does (docs/building.md, Fast start)
    sys.modules["bkmcp"] = _util.module_from_spec(_util.spec_from_file_location(
        "bkmcp", __loader__.archive + "/" + __loader__.prefix + "bkmcp.pyc", loader=__loader__))
    __loader__.exec_module(sys.modules["bkmcp"])
import bkmcp
gc.enable()
sys.exit(bkmcp.main())
"""


def _pyc(source: bytes, arcname: str) -> bytes:
    """Unchecked-hash bytecode (PEP 552) for the running Python: zipimport loads it without reading the source."""
    filename = "bkmcp.pyz/" + arcname
    if arcname == "bkmcp.py":
        code = lean_code(source, filename)
    else:
        code = compile(source, filename, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, check_source=0
    return importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code)


# Run by the build Python in a child process (argv: the vendor zip, a folder with bkmcp.py and zipapp_support.py):
# loads what a remote command and a validated call load, as bkmcp loads them, takes a response's cookies as every
# httpx client does (urllib.request's URL parsing compiles two patterns), and compiles bkmcp's own patterns.
_RECORD_REGEXES = """
import sys
sys.path[:0] = sys.argv[1:3]
import zipapp_support
def load():
    import bkmcp
    httpx = bkmcp.import_httpx()
    request = httpx.Request("POST", "http://127.0.0.1/mcp")
    httpx.Cookies().extract_cookies(httpx.Response(200, request=request))
    import jsonschema
    for value in list(vars(bkmcp).values()):
        if type(value).__name__ == "_LazyPattern":
            value.pattern
sys.stdout.buffer.write(zipapp_support.record_regexes(load))
"""


def regex_table(files: dict[str, bytes]) -> bytes:
    """REGEX_TABLE for the pyz (zipapp_support.record_regexes): recorded by the build Python, with a fixed hash
    seed and no site-packages, so that the same inputs give the same bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in (VENDOR_ZIP, "bkmcp.py"):
            Path(tmp, name).write_bytes(files[name])
        Path(tmp, "zipapp_support.py").write_bytes(files[f"{BOOT_MODULE}.py"])
        proc = subprocess.run(
            [sys.executable, "-S", "-s", "-c", _RECORD_REGEXES, str(Path(tmp, VENDOR_ZIP)), tmp],
            capture_output=True,
            env={"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"},
            check=False,
        )
    if proc.returncode != 0:
        raise BuildError(f"recording the regular expressions failed:\n{proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _bkmcp_version(source: bytes) -> str:
    m = re.search(rb"^__version__\s*=\s*['\"]([^'\"]+)['\"]", source, re.M)
    return m.group(1).decode() if m else "unknown"


def collect(
    source: Path,
    support: Path,
    pins: list[Pin],
    natives: list[Pin],
    platforms: list[str],
    cache: Path,
    epoch: int,
    with_pyc: bool,
) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    vendor: dict[str, bytes] = {}  # the pure packages' code, nested in VENDOR_ZIP
    dists = []
    patched: list[dict[str, str]] = []
    for pin in pins:
        members = wheel_members(fetch_wheel(pin, cache, platforms))
        for name, data in members.items():
            for old, new, why in PATCHES.get(name, []):
                if data.count(old) != 1:
                    raise BuildError(f"patch for {name} ({why}) no longer applies: review it after the bump")
                data = data.replace(old, new)
                patched.append({"file": name, "reason": why})
            target = files if ".dist-info/" in name else vendor  # metadata and licences stay visible
            if name in target and target[name] != data:
                raise BuildError(f"{name} comes from two wheels")
            target[name] = data
        dists.append(
            {
                "name": pin.name,
                "version": pin.version,
                "wheel": pin.filename,
                "sha256": pin.sha256,
                "license": _metadata_field(members, "License-Expression")
                or _metadata_field(members, "License")
                or _metadata_field(members, "Classifier", "License :: "),
                "license_files": sorted(n for n in members if _LICENCE_RE.search(n) and n in files),
            }
        )
    native_hashes: dict[str, str] = {}
    for pin in natives:
        pytag, plats = pin.tags()
        folder = native_folder(next(p for p in platforms if p in plats))
        for name, data in wheel_members(fetch_wheel(pin, cache, platforms)).items():
            if name.endswith((".so", ".pyd")) and "/" not in name:
                arc = f"{NATIVE_DIR}/{folder}/{name}"
                if arc in files and files[arc] != data:
                    raise BuildError(f"two {pin.name} wheels give {arc}: put them in separate folders")
                files[arc] = data
                native_hashes[arc] = _sha256(data)
            elif ".dist-info/" in name:
                files[f"{NATIVE_DIR}/{name}"] = data  # licence and METADATA, identical across targets
    for name, version in sorted({(p.name, p.version) for p in natives}):
        notice = HERE / "docs" / "licenses" / f"{name}-static-NOTICE.txt"
        if notice.exists():  # what the wheel links statically but its own LICENSE does not cover
            files[f"{NATIVE_DIR}/{name}-{version}.dist-info/licenses/NOTICE-static.txt"] = notice.read_bytes()
        lic = [n for n in files if n.startswith(f"{NATIVE_DIR}/{name}-") and _LICENCE_RE.search(n)]
        dists.append(
            {
                "name": name,
                "version": version,
                "wheel": "one per target, see vendor.txt",
                "sha256": None,
                "license": "BSD-2-Clause (binding); links jq (MIT) and Oniguruma (BSD-2-Clause) statically",
                "license_files": sorted(lic),
            }
        )
    program = source.read_bytes()
    files["bkmcp.py"] = program
    files[f"{BOOT_MODULE}.py"] = support.read_bytes()

    if with_pyc:
        for group in (files, vendor):
            for name in [n for n in group if n.endswith(".py") and not n.startswith(NATIVE_DIR)]:
                group[name + "c"] = _pyc(group[name], name)
    payload = hashlib.sha256()
    for name, data in sorted({**files, **vendor}.items()):
        payload.update(name.encode() + b"\0" + _sha256(data).encode() + b"\n")
    build_id = payload.hexdigest()[:16]
    files[VENDOR_ZIP] = zip_bytes(vendor, epoch)
    vendor_sha256 = _sha256(files[VENDOR_ZIP])
    vendored = tuple(sorted({n.split("/")[0].removesuffix(".py") for n in vendor if n.endswith(".py")}))

    cache_tag = sys.implementation.cache_tag if with_pyc else "none"
    main = (
        MAIN_TEMPLATE
        % {
            "cache_tag": cache_tag,
            "build_id": build_id,
            "vendored": vendored,
            "vendor_sha256": vendor_sha256,
            "magic": importlib.util.MAGIC_NUMBER if with_pyc else None,  # the vendor zip's spec finder, if any
        }
    ).encode()
    files["__main__.py"] = main
    if with_pyc:
        files["__main__.pyc"] = _pyc(main, "__main__.py")
        files[REGEX_TABLE] = regex_table(files)
    info = {
        "name": "bkmcp",
        "version": _bkmcp_version(program),
        "build_id": build_id,
        "bkmcp_sha256": _sha256(program),
        "source_date_epoch": epoch,
        "build_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
        "bytecode": {"cache_tag": cache_tag, "magic": importlib.util.MAGIC_NUMBER.hex() if with_pyc else None},
        "requires_python": ">=3.9",
        "jq_targets": {"pythons": sorted({p.tags()[0] for p in natives}), "platforms": platforms},
        "natives": dict(sorted(native_hashes.items())),
        "vendor_zip": {
            "member": VENDOR_ZIP,
            "sha256": vendor_sha256,
            "entries": len(vendor),
            "top_level": list(vendored),
        },
        "patches": patched,
        "vendored": sorted(dists, key=lambda d: str(d["name"]).lower()),
    }
    files["BUILD-INFO.json"] = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()
    return files


def write_pyz(files: dict[str, bytes], epoch: int) -> bytes:
    return zip_bytes(files, epoch, SHEBANG)


def zip_bytes(files: dict[str, bytes], epoch: int, prefix: bytes = b"") -> bytes:
    """A deterministic zip of `files` after `prefix`: sorted entries, one timestamp, fixed modes and compression."""
    date_time = time.gmtime(max(epoch, 315532800))[:6]  # zip cannot express times before 1980
    buf = io.BytesIO()
    buf.write(prefix)
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time)
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            # bytecode is read on every start: stored, it skips inflating (and, for __main__.py, which Pythons
            # other than the build one read as source, importing zlib); the nested zip is stored so that it is
            # copied out as is, and the regex table is read as the bytecode is; everything else is deflated
            stored = name.endswith((".pyc", ".zip")) or name in ("__main__.py", REGEX_TABLE)
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name], compresslevel=None if stored else 6)
    return buf.getvalue()


def describe_difference(current: bytes, files: dict[str, bytes]) -> str:
    """Which members differ between an existing pyz and a fresh build (for --check)."""
    try:
        with zipfile.ZipFile(io.BytesIO(current)) as zf:
            old = {i.filename: zf.read(i) for i in zf.infolist()}
    except (zipfile.BadZipFile, OSError) as exc:
        return f": the existing file is not a zip ({exc})"
    changed = sorted(n for n in set(old) | set(files) if old.get(n) != files.get(n))
    if not changed:
        return ": same members, different zip metadata (timestamps or compression: SOURCE_DATE_EPOCH, zlib?)"
    shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
    return f": members differ: {shown}"


# --------------------------------------------------------------------------------------------------- CLI


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value:
        return int(value)
    try:
        out = subprocess.run(
            ["git", "-C", str(HERE), "log", "-1", "--format=%ct"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return int(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 315532800  # 1980-01-01, the zip epoch


def resolve_platforms(options: list[str]) -> list[str]:
    """`--platform` values: `none`, plain tags (replace the default set), `+TAG` (add), `-TAG` (remove)."""
    plain = [o for o in options if o[:1] not in "+-" and o != "none"]
    result = list(plain) if plain else ([] if "none" in options else list(DEFAULT_PLATFORMS))
    for opt in options:
        if opt.startswith("+") and opt[1:] not in result:
            result.append(opt[1:])
        elif opt.startswith("-"):
            if opt[1:] not in result:
                raise BuildError(f"--platform {opt}: {opt[1:]} is not in the set {result}")
            result.remove(opt[1:])
    for plat in result:
        native_folder(plat)
    return result


def default_output(platforms: list[str]) -> Path:
    """dist/bkmcp.pyz for the default jq targets; another set (--platform) is a different file beside it, so a lean
    or custom build never silently replaces the full one (issue 40)."""
    if platforms == list(DEFAULT_PLATFORMS):
        return DEFAULT_OUTPUT
    return DEFAULT_OUTPUT.with_name("bkmcp-platform-none.pyz" if not platforms else "bkmcp-platform-custom.pyz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="default: dist/bkmcp.pyz, or dist/bkmcp-platform-*.pyz with --platform"
    )
    parser.add_argument("--source", type=Path, default=HERE / "bkmcp.py", help="the program (default: bkmcp.py)")
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="TAG",
        help="jq native targets: TAG (exact set), +TAG, -TAG, none; default: " + ", ".join(DEFAULT_PLATFORMS),
    )
    parser.add_argument("--jq-pythons", default=",".join(JQ_PYTHONS), help="CPython versions for jq natives")
    parser.add_argument("--no-pyc", action="store_true", help="leave bytecode out (for measurements)")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    parser.add_argument("--check", action="store_true", help="rebuild and compare with --output, byte for byte")
    parser.add_argument("--update-lock", action="store_true", help="re-pin vendor.txt from the package index")
    args = parser.parse_args(argv)
    try:
        platforms = resolve_platforms(args.platform)
        if args.output is None:
            args.output = default_output(platforms)
        pythons = tuple(v.strip() for v in args.jq_pythons.split(",") if v.strip())
        if args.update_lock:
            update_lock(
                list(DEFAULT_PLATFORMS) + [p for p in platforms if p not in DEFAULT_PLATFORMS],
                JQ_PYTHONS,
                args.cache_dir,
            )
            return 0
        lock = load_lock()
        pure = [p for p in lock if not p.native]
        natives = select_native_pins(lock, platforms, pythons) if platforms else []
        epoch = source_date_epoch()
        prefetch_wheels(pure + natives, args.cache_dir, platforms)
        files = collect(
            args.source, HERE / "zipapp_support.py", pure, natives, platforms, args.cache_dir, epoch, not args.no_pyc
        )
        blob = write_pyz(files, epoch)
    except (BuildError, OSError) as exc:
        print(f"build_zipapp: {exc}", file=sys.stderr)
        return 1
    digest = _sha256(blob)
    if args.check:
        try:
            current = args.output.read_bytes()
        except OSError as exc:
            print(f"build_zipapp: --check: {exc}", file=sys.stderr)
            return 1
        if current != blob:
            print(
                f"build_zipapp: {args.output} differs from a fresh build (sha256 {_sha256(current)} vs {digest})"
                + describe_difference(current, files),
                file=sys.stderr,
            )
            return 1
        print(f"{args.output}: reproducible, sha256 {digest}, {len(blob)} bytes")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".tmp")
    tmp.write_bytes(blob)
    os.chmod(tmp, 0o755)
    os.replace(tmp, args.output)
    info = json.loads(files["BUILD-INFO.json"])
    print(
        f"{args.output}: sha256 {digest}, {len(blob)} bytes ({len(blob) / 1e6:.1f} MB), {len(files)} entries, "
        f"build id {info['build_id']}, bytecode for {info['bytecode']['cache_tag']}, "
        f"jq natives {len(info['natives'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
