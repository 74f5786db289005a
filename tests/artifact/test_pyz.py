"""The built artifact: CLI on every Python, reproducibility, contents, jq natives and their fallbacks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from artifact_helpers import ROOT, build_pyz, find_python, program_source, run_in_pyz, run_pyz

from mock_server.mcp_mock import MockServer
from tests.helpers import STOOD_IN_STDLIB, write_mcp_json

pytestmark = pytest.mark.artifact

BIG_BODY = '{"n": 100000000000000000001, "x": 1.50, "s": "1.50", "list": [1, 2]}'


def _config(tmp_path: Path) -> Path:
    return write_mcp_json(tmp_path, {"demo": {"type": "http", "url": "http://127.0.0.1:9/mcp"}})


# ------------------------------------------------------------------------------------------- CLI per Python


def test_version(python: str, pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    proc = run_pyz(python, pyz_path, "--version", env=pyz_env)
    assert proc.returncode == 0, proc.stderr
    assert build_info["version"] in proc.stdout
    assert proc.stderr == ""


def test_help(python: str, pyz_path: Path, pyz_env: dict) -> None:
    proc = run_pyz(python, pyz_path, "--help", env=pyz_env)
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout or "usage" in proc.stdout


def test_server_help(python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path) -> None:
    proc = run_pyz(python, pyz_path, "--config", str(_config(tmp_path)), "demo", "--help", env=pyz_env)
    assert proc.returncode == 0, proc.stderr
    assert "demo" in proc.stdout


def test_runs_through_shebang_and_relative_path(pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    if shutil.which("python3", path=pyz_env.get("PATH")) is None:
        pytest.skip("no python3 on PATH for the shebang")
    proc = subprocess.run(
        ["./" + pyz_path.name, "--version"],
        cwd=pyz_path.parent,
        capture_output=True,
        text=True,
        env=pyz_env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert build_info["version"] in proc.stdout


def test_vendored_imports(python: str, pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    """Everything bkmcp imports lazily loads from the pyz's nested vendor zip (copied into the cache), not from
    the interpreter's site-packages (certifi may be preloaded by a site .pth on this machine, so only its data is
    checked)."""
    vendor = build_info["vendor_zip"]
    code = (
        f"boot.use_vendor_zip({build_info['build_id']!r}, {str(pyz_path)!r}, {vendor['sha256']!r})\n"
        "assert sys.path[0].endswith('_bkmcp_vendor.zip'), sys.path[0]\n"
        "import httpx, httpcore, h11, anyio, idna, certifi, jsonschema, attr, pyrsistent\n"
        "for m in (httpx, httpcore, h11, anyio, jsonschema, attr, pyrsistent):  # certifi: see below\n"
        "    assert m.__file__.startswith(sys.path[0]), m.__file__\n"
        "jsonschema.Draft202012Validator({'type': 'object', 'required': ['a']}).validate({'a': 1})\n"
        "assert os.path.exists(certifi.where())\n"
        "import httpx; httpx.Client().close()\n"
        "print(httpx.__version__, jsonschema.validators.__name__)\n"
    )
    proc = run_in_pyz(python, pyz_path, "import os\n" + code, env=pyz_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("0.28.1")


@pytest.mark.parametrize("version", ["2.7", "3.6", "3.7", "3.8"])
def test_old_python_gets_a_clean_message(version: str, pyz_path: Path, pyz_env: dict) -> None:
    old = find_python(version)
    if old is None:
        pytest.skip(f"CPython {version} is not installed here")
    proc = run_pyz(old, pyz_path, "--help", env=pyz_env)
    assert proc.returncode == 1
    assert "needs Python 3.9 or newer" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_compiled_cache_for_other_pythons(pythons: dict, pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    """A Python the zip has no bytecode for gets a per-user copy whose __pycache__ fills once, even under
    PYTHONDONTWRITEBYTECODE; eight concurrent first runs all succeed and leave one copy, no temp dirs."""
    tag = build_info["bytecode"]["cache_tag"]
    others = [
        p
        for p in pythons.values()
        if subprocess.run(
            [p, "-c", "import sys; print(sys.implementation.cache_tag)"], capture_output=True, text=True, check=True
        ).stdout.strip()
        != tag
    ]
    if not others:
        pytest.skip(f"no Python other than the build one ({tag}) is installed")
    python = others[0]
    env = dict(pyz_env, PYTHONDONTWRITEBYTECODE="1")
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda _: run_pyz(python, pyz_path, "--version", env=env), range(8)))
    assert [p.returncode for p in procs] == [0] * 8, [p.stderr for p in procs]
    root = Path(env["XDG_CACHE_HOME"]) / "bkmcp"
    assert os.listdir(root) == [build_info["build_id"]]
    assert os.listdir(root / build_info["build_id"]) == ["py"]
    assert run_pyz(python, pyz_path, "--help", env=env).returncode == 0
    pycache = root / build_info["build_id"] / "py" / "__pycache__"
    assert any(n.startswith("bkmcp.") for n in os.listdir(pycache))
    assert any(n.startswith("_bkmcp_boot.") for n in os.listdir(pycache))


# ------------------------------------------------------------------------------------ build and contents


def test_reproducible(tmp_path: Path) -> None:
    source = program_source()
    a = build_pyz(tmp_path / "a.pyz", "--platform", "none", epoch="1700000000", source=source)
    b = build_pyz(tmp_path / "b.pyz", "--platform", "none", epoch="1700000000", source=source)
    assert hashlib.sha256(a.read_bytes()).hexdigest() == hashlib.sha256(b.read_bytes()).hexdigest()
    check = subprocess.run(
        [
            sys.executable,
            str(ROOT / "build_zipapp.py"),
            "--output",
            str(a),
            "--platform",
            "none",
            "--source",
            str(source),
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, SOURCE_DATE_EPOCH="1700000000"),
        check=False,
    )
    assert check.returncode == 0, check.stderr
    assert "reproducible" in check.stdout
    c = build_pyz(tmp_path / "c.pyz", "--platform", "none", epoch="1700000002", source=source)
    assert c.read_bytes() != a.read_bytes()


def test_reproducible_full_build(pyz_path: Path, tmp_path: Path, build_info: dict) -> None:
    """The session's artifact (natives included) rebuilds to the same bytes with its recorded epoch."""
    if os.environ.get("BKMCP_PYZ"):
        pytest.skip("prebuilt artifact: its inputs are not known here")
    again = build_pyz(tmp_path / "again.pyz", epoch=str(build_info["source_date_epoch"]), source=program_source())
    assert again.read_bytes() == pyz_path.read_bytes()


def test_contents(pyz_path: Path, build_info: dict) -> None:
    data = pyz_path.read_bytes()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    assert os.stat(pyz_path).st_mode & stat.S_IXUSR
    with zipfile.ZipFile(pyz_path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert len({i.date_time for i in infos}) == 1
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        vendor = build_info["vendor_zip"]
        nested = zf.read(vendor["member"])
        assert zf.getinfo(vendor["member"]).compress_type == zipfile.ZIP_STORED
        assert hashlib.sha256(nested).hexdigest() == vendor["sha256"]
        with zipfile.ZipFile(io.BytesIO(nested)) as inner:
            inner_infos = inner.infolist()
        inner_names = [i.filename for i in inner_infos]
        assert inner_names == sorted(inner_names) and len(inner_names) == vendor["entries"]
        assert {i.date_time for i in inner_infos} == {infos[0].date_time}
        assert "httpx/__init__.py" in inner_names and "jsonschema/validators.py" in inner_names
        assert {n.split("/")[0].removesuffix(".py") for n in inner_names if not n.endswith(".pyc")} == set(
            vendor["top_level"]
        )
        # what every start reads: the outer directory stays small (zipimport parses it entry by entry)
        assert len(names) < 80 and not [n for n in names if n.endswith(".py") and "/" in n], names
        for name in names + inner_names:
            parts = name.split("/")
            assert not {"tests", "test", "bin", "__pycache__"} & set(parts[:-1]), name
            assert not name.endswith((".pyi", "py.typed", ".c", ".h")), name
        assert zf.read("bkmcp.py") == program_source().read_bytes() or os.environ.get("BKMCP_PYZ")
        assert hashlib.sha256(zf.read("bkmcp.py")).hexdigest() == build_info["bkmcp_sha256"]
        for member, digest in build_info["natives"].items():
            assert hashlib.sha256(zf.read(member)).hexdigest() == digest
        main = zf.read("__main__.py").decode()
        assert len(main.splitlines()) < 40 and "bkmcp.main()" in main
    pins = {
        line.split()[0]
        for line in (ROOT / "vendor.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    vendored = {f"{d['name']}=={d['version']}" for d in build_info["vendored"]}
    assert vendored == pins
    for dist in build_info["vendored"]:
        assert dist["license_files"], f"{dist['name']} ships no licence"
        assert all(f in names for f in dist["license_files"])
    assert "jsonschema==4.17.3" in pins  # the last pure-Python line (docs/building.md)
    assert build_info["build_id"] in main


def test_default_native_matrix(build_info: dict) -> None:
    if os.environ.get("BKMCP_PYZ"):
        pytest.skip("prebuilt artifact may carry another matrix")
    natives = build_info["natives"]
    for minor in range(9, 15):
        for arch in ("x86_64", "aarch64"):
            assert f"_bkmcp_native/linux/jq.cpython-3{minor}-{arch}-linux-gnu.so" in natives
            assert any(n.startswith(f"_bkmcp_native/linux-musl/jq.cpython-3{minor}-{arch}") for n in natives)


# ------------------------------------------------------------------------- --jq through the CLI (bkmcp.py)
# bkmcp.py's JqProgram is the one jq implementation; the pyz's _bkmcp_boot only extracts and loads its native.
# Every run below is a --dry-run (no server needed) under -S, so the interpreter's own jq module is never found.

JQ_EXACT = ".data.arguments | .n, .x, .s, (.list | add)"
JQ_EXACT_OUT = ["100000000000000000001", "1.50", '"1.50"', "3"]


def _dry_run(python: str, pyz: Path, tmp_path: Path, env: dict, jq: str) -> subprocess.CompletedProcess:
    """A --dry-run call projected by --jq; -S hides any jq module installed beside the interpreter."""
    config = tmp_path / "mcp.json"  # written by _jq_env, once, before any concurrent run
    return run_pyz(
        python,
        pyz,
        "--config",
        str(config),
        "demo",
        "echo",
        "--body",
        BIG_BODY,
        "--dry-run",
        "--jq",
        jq,
        env=env,
        no_site=True,
    )


def _jq_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def _error(stream: str) -> dict:
    return json.loads(stream.strip().splitlines()[-1])["error"]


def _jq_env(pyz_env: dict, tmp_path: Path, jq: str | None = None) -> dict:
    """Writes the config `_dry_run` uses; PATH holds only `jq`: a wrapper that logs each call to bin/jq.log and
    runs `jq`, or, with None, nothing, so (with -S) a --jq that works must have used the pyz's native."""
    _config(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if jq:
        wrapper = bin_dir / "jq"
        wrapper.write_text(f'#!/bin/sh\necho "$@" >> {str(bin_dir / "jq.log")!r}\nexec {jq!r} "$@"\n')
        wrapper.chmod(0o755)
    return dict(pyz_env, PATH=str(bin_dir))


def _natives(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix == ".so")


def test_jq_native_concurrent_first_runs(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict
) -> None:
    """Eight first --jq uses at once: all load the native, numbers come out as written, one cache dir with one
    native is left (no temp files or folders)."""
    env = _jq_env(pyz_env, tmp_path)
    with ThreadPoolExecutor(8) as pool:
        procs = list(pool.map(lambda _: _dry_run(python, pyz_path, tmp_path, env, JQ_EXACT), range(8)))
    for proc in procs:
        assert _jq_lines(proc) == JQ_EXACT_OUT
    root = Path(env["XDG_CACHE_HOME"]) / "bkmcp"
    assert os.listdir(root) == [build_info["build_id"]]
    build_dir = root / build_info["build_id"]
    assert set(os.listdir(build_dir)) <= {"native", "py"} and "native" in os.listdir(build_dir)
    native = build_dir / "native"
    (so,) = native.iterdir()
    assert so.suffix == ".so" and not so.name.startswith(".")
    assert hashlib.sha256(so.read_bytes()).hexdigest() in build_info["natives"].values()
    assert _natives(Path(env["XDG_CACHE_HOME"])) == [so]


def test_jq_native_replaced_when_corrupt(pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict) -> None:
    env = _jq_env(pyz_env, tmp_path)
    assert _jq_lines(_dry_run(sys.executable, pyz_path, tmp_path, env, JQ_EXACT)) == JQ_EXACT_OUT
    native = Path(env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"] / "native"
    (so,) = native.iterdir()
    so.write_bytes(b"garbage")
    assert _jq_lines(_dry_run(sys.executable, pyz_path, tmp_path, env, JQ_EXACT)) == JQ_EXACT_OUT
    assert hashlib.sha256(so.read_bytes()).hexdigest() in build_info["natives"].values()
    assert list(native.iterdir()) == [so]


def _assert_jq_errors(python: str, pyz: Path, tmp_path: Path, env: dict) -> None:
    """A compile error is local (exit 1, stderr, nothing run); a runtime error is jq_error (exit 2, stdout)."""
    compile_error = _dry_run(python, pyz, tmp_path, env, ".a |||")
    assert compile_error.returncode == 1 and compile_error.stdout == ""
    assert _error(compile_error.stderr)["code"] == "invalid_jq_expression"
    runtime_error = _dry_run(python, pyz, tmp_path, env, 'error("boom")')
    assert runtime_error.returncode == 2
    error = _error(runtime_error.stdout)
    assert error["code"] == "jq_error" and "boom" in error["message"]


def test_jq_compile_and_runtime_errors(pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict) -> None:
    env = _jq_env(pyz_env, tmp_path)
    _assert_jq_errors(sys.executable, pyz_path, tmp_path, env)
    native = Path(env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"] / "native"
    assert [p.suffix for p in native.iterdir()] == [".so"]  # the errors came from the native, not a jq executable


def _readonly_home_env(pyz_env: dict, tmp_path: Path) -> dict:
    """HOME that cannot hold a cache, even for root: it lies below a regular file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    env = dict(_jq_env(pyz_env, tmp_path), HOME=str(blocker / "home"))
    env.pop("XDG_CACHE_HOME")
    return env


def test_read_only_home(python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict) -> None:
    env = _readonly_home_env(pyz_env, tmp_path)
    proc = run_pyz(python, pyz_path, "--help", env=env)
    assert proc.returncode == 0, proc.stderr
    assert _jq_lines(_dry_run(python, pyz_path, tmp_path, env, JQ_EXACT)) == JQ_EXACT_OUT
    fallback = Path(env["TMPDIR"]) / f"bkmcp-{os.getuid()}" / build_info["build_id"]
    (so,) = _natives(fallback / "native")
    assert hashlib.sha256(so.read_bytes()).hexdigest() in build_info["natives"].values()
    assert _natives(Path(env["TMPDIR"])) == [so]  # not in a per-run mkdtemp beside it
    assert stat.S_IMODE(os.stat(fallback.parent).st_mode) == 0o700


def test_read_only_home_chmod(pyz_path: Path, pyz_env: dict, tmp_path: Path, build_info: dict) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through chmod 0555; test_read_only_home covers the case")
    home = Path(pyz_env["HOME"])
    home.chmod(0o555)
    try:
        env = _jq_env(pyz_env, tmp_path)
        env.pop("XDG_CACHE_HOME")
        assert _jq_lines(_dry_run(sys.executable, pyz_path, tmp_path, env, JQ_EXACT)) == JQ_EXACT_OUT
        fallback = Path(env["TMPDIR"]) / f"bkmcp-{os.getuid()}" / build_info["build_id"]
        assert len(_natives(fallback / "native")) == 1
    finally:
        home.chmod(0o755)


def test_jq_falls_back_to_executable(python: str, pyz_no_natives: Path, pyz_env: dict, tmp_path: Path) -> None:
    """No native for this machine and no jq module: --jq runs the `jq` on PATH, numbers still exact, the same
    errors, and an expression starting with "-" is not read as a jq option."""
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("no jq executable on PATH (apt-get install jq)")
    env = _jq_env(pyz_env, tmp_path, jq)
    log = tmp_path / "bin" / "jq.log"
    assert _jq_lines(_dry_run(python, pyz_no_natives, tmp_path, env, JQ_EXACT)) == JQ_EXACT_OUT
    assert log.exists()  # the executable did the work
    _assert_jq_errors(python, pyz_no_natives, tmp_path, env)
    assert _jq_lines(_dry_run(python, pyz_no_natives, tmp_path, env, "-1")) == ["-1"]
    assert not _natives(Path(env["XDG_CACHE_HOME"]))


def test_jq_unavailable(python: str, pyz_no_natives: Path, pyz_env: dict, tmp_path: Path) -> None:
    env = _jq_env(pyz_env, tmp_path)
    proc = _dry_run(python, pyz_no_natives, tmp_path, env, ".ok")
    assert proc.returncode == 1
    assert proc.stdout == ""
    error = _error(proc.stderr)
    assert error["code"] == "jq_unavailable" and "jq" in error.get("hint", "")
    assert not _natives(Path(env["XDG_CACHE_HOME"]))


def test_vendor_zip_refused_when_it_does_not_match_its_sha256(pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    """A pyz whose nested vendor zip does not match the sha256 its __main__ carries is reported as damaged, and
    nothing is copied into the cache."""
    code = (
        "try:\n"
        f"    boot.use_vendor_zip({build_info['build_id']!r}, {str(pyz_path)!r}, '0' * 64)\n"
        "except ImportError as exc:\n"
        "    print('refused:', exc)\n"
    )
    proc = run_in_pyz(sys.executable, pyz_path, code, env=pyz_env)
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.startswith("refused: ")
        and "is damaged" in proc.stdout
        and "download or build it again" in (proc.stdout)
    )
    build_dir = Path(pyz_env["XDG_CACHE_HOME"]) / "bkmcp" / build_info["build_id"]
    assert not (build_dir / build_info["vendor_zip"]["member"]).exists()


def test_bkmcp_bytecode_is_lean_on_every_python(python: str, pyz_path: Path, pyz_env: dict, build_info: dict) -> None:
    """bkmcp as every Python runs it from the pyz (the zip's .pyc on the build Python, the compiled cache on the
    others) carries no docstrings or function annotations, keeps class annotations (the records need them) and
    the source's line numbers, and still works."""
    lines = program_source().read_text().splitlines()
    def_main = next(i for i, line in enumerate(lines, 1) if line.startswith("def main("))
    def_flags = next(i for i, line in enumerate(lines, 1) if line.startswith("def build_tool_flags("))  # deferred
    code = (
        f"if sys.implementation.cache_tag != {build_info['bytecode']['cache_tag']!r}:\n"
        f"    assert boot.use_compiled_cache({build_info['build_id']!r}, {str(pyz_path)!r})\n"
        "import bkmcp\n"
        "assert bkmcp.__doc__ is None and bkmcp.main.__doc__ is None and bkmcp.ToolFlag.__doc__ is None\n"
        "assert bkmcp.main.__annotations__ == {} and bkmcp.build_tool_flags.__annotations__ == {}\n"
        "assert list(bkmcp.ToolFlag.__annotations__) == ['name', 'kind', 'required', 'schema', 'nullable']\n"
        "print(bkmcp.main.__code__.co_firstlineno, bkmcp.build_tool_flags.__code__.co_firstlineno,\n"
        "      bkmcp.build_tool_flags({'inputSchema': {'properties': {'q': {'type': 'string'}}}})"
        ".flags['q'].usage)\n"
    )
    for _ in range(2):  # a non-build Python: the first run compiles the cache, the second loads it
        proc = run_in_pyz(python, pyz_path, code, env=pyz_env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [str(def_main), str(def_flags), "--q", "STRING"]


def test_a_host_name_reaches_getaddrinfo_as_the_idna_codec_would_give_it(
    python: str, pyz_path: Path, pyz_env: dict, build_info: dict, tmp_path: Path
) -> None:
    """``bkmcp._ascii_host`` (section 6) on every Python: where it answers bytes, they are what the 'idna' codec
    gives getaddrinfo for that name, and every name the codec's fast path takes is answered so; the rest stays text,
    for the codec. A --tools over http://localhost then never loads the codec, and the server answers it."""
    code = (
        f"if sys.implementation.cache_tag != {build_info['bytecode']['cache_tag']!r}:\n"
        f"    assert boot.use_compiled_cache({build_info['build_id']!r}, {str(pyz_path)!r})\n"
        "import bkmcp\n"
        "fast = ['127.0.0.1', 'localhost', 'localhost.', '::1', 'mcp.example.com', 'A-b_c.D', 'has space.com',\n"
        "        'a' * 63 + '.com', 'x.' + 'a' * 63, 'a.' * 200]\n"
        "other = ['', 'a..b', '.a', 'a' * 64 + '.com', 'x.' + 'a' * 64, 'a' * 64, 'b\\u00fccher.de', 'xn--.\\u00e9']\n"
        "for host in fast + other:\n"
        "    got = bkmcp._ascii_host(host)\n"
        "    try:\n"
        "        want = host.encode('idna')\n"
        "    except UnicodeError:\n"
        "        want = None\n"
        "    assert (got == want) if isinstance(got, bytes) else (got == host), (host, got, want)\n"
        "    assert isinstance(got, bytes) == (host in fast), host\n"
        "print('ok')\n"
    )
    proc = run_in_pyz(python, pyz_path, code, env=pyz_env)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok"], proc.stdout + proc.stderr

    server = MockServer({})
    port = server.start().split(":")[2].split("/")[0]
    try:
        config = write_mcp_json(tmp_path, {"local": {"type": "http", "url": f"http://localhost:{port}/mcp"}})
        proc = subprocess.run(
            [python, "-X", "importtime", str(pyz_path), "--config", str(config), "local", "--tools"],
            capture_output=True,
            text=True,
            env=pyz_env,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr[-2000:]
        assert "encodings.idna" not in proc.stderr and server.requests("tools/list")
    finally:
        server.stop()


_SSL_STOOD_IN = """
import bkmcp
httpx = bkmcp.import_httpx()
import httpcore._backends.sync as backend
print("ssl" in sys.modules, "_ssl" in sys.modules)
import ssl
print(backend.ssl.SSLSocket is ssl.SSLSocket, backend.ssl.MemoryBIO is ssl.MemoryBIO)
"""


def test_an_http_command_never_loads_ssl_and_an_https_one_still_speaks_tls(
    python: str, pyz_path: Path, pyz_env: dict, build_info: dict, tmp_path: Path
) -> None:
    """httpcore imports ssl at the top of its modules but an http:// pool never uses it (bkmcp's
    ``_plain_transport`` knows its plain socket has no TLS object; the pyz's httpcore/_ssl.py annotation is a
    string): loading httpx leaves ssl (and OpenSSL's _ssl) out, a --tools and a call over http:// never load it;
    httpcore's own reference answers the real module's classes afterwards, and an https:// URL on that plain port
    still fails its TLS handshake, as before (mcp_connection_error, nothing sent)."""
    vendor, magic = build_info["vendor_zip"], bytes.fromhex(build_info["bytecode"]["magic"])
    prelude = (  # what the pyz's __main__ does: the compiled cache, or the vendor zip with the build's bytecode
        f"if sys.implementation.cache_tag != {build_info['bytecode']['cache_tag']!r}:\n"
        f"    assert boot.use_compiled_cache({build_info['build_id']!r}, {str(pyz_path)!r})\n"
        "else:\n"
        f"    boot.use_vendor_zip({build_info['build_id']!r}, {str(pyz_path)!r}, {vendor['sha256']!r},"
        f" {tuple(vendor['top_level'])!r}, {magic!r})\n"
    )
    proc = run_in_pyz(python, pyz_path, prelude + _SSL_STOOD_IN, env=pyz_env, no_site=True)
    assert proc.returncode == 0 and proc.stdout.split() == ["False", "False", "True", "True"], proc.stderr

    server = MockServer({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
    url = server.start()
    try:
        for name, target in (("plain", url), ("tls", url.replace("http://", "https://"))):
            config = write_mcp_json(tmp_path / name, {"local": {"type": "http", "url": target}})
            for args in (["--tools"], ["echo", "--body", '{"a": 1}']):
                command = [python, "-X", "importtime", str(pyz_path), "--config", str(config), "local", *args]
                proc = subprocess.run(command, capture_output=True, text=True, env=pyz_env, timeout=120)
                loaded = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if "|" in line}
                if name == "plain":
                    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"], proc.stderr[-2000:]
                    assert "h11" in loaded and not {"ssl", "_ssl"} & loaded
                else:
                    error = json.loads(proc.stdout)["error"]
                    assert proc.returncode == 2 and error["code"] == "mcp_connection_error", proc.stdout
                    assert "TLS" in error["message"] and {"ssl", "_ssl"} <= loaded
        assert len(server.requests("tools/list")) == 2 and len(server.requests("tools/call")) == 1
    finally:
        server.stop()


# A site hook: counts the collections that run while bkmcp's module, one of its deferred sections, or a module of
# the HTTP stack is being executed (a frame of that code on the stack when the collection starts)
_COUNT_LOADING_COLLECTIONS = """
import atexit, gc, os, sys
_seen = []
def _loading(frame):
    while frame is not None:
        code = frame.f_code
        name = code.co_filename.replace(os.sep, "/")
        if code.co_name == "_bkmcp_load" or code.co_name == "<module>" and (
            name.endswith("bkmcp.py") or any(part in name for part in ("/httpx/", "/httpcore/", "/h11/"))
        ):
            return True
        frame = frame.f_back
    return False
def _count(phase, info):
    if phase == "start" and _loading(sys._getframe()):
        _seen.append(info["generation"])
gc.callbacks.append(_count)
atexit.register(lambda: open({marker!r}, "a").write("%d\\n" % len(_seen)))
"""


def _imported(command: list[str], env: dict) -> set[str]:
    """The modules a successful ``python -X importtime …`` run imported."""
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if "|" in line}


def test_an_http_command_loads_no_module_it_does_not_use_and_collects_nothing_while_it_loads(
    python: str, pyz_path: Path, pyz_env: dict, tmp_path: Path
) -> None:
    """At the real entry point on every Python: a --tools and a call over http:// load none of the stdlib modules
    ``import_httpx`` stands in for (hashlib with OpenSSL's _hashlib, shutil, traceback, ...), and no collection
    runs while bkmcp's module, its deferred sections or httpx, httpcore and h11 are executed (the pyz's __main__
    pauses the collector while bkmcp loads, ``_bkmcp_load`` while a section runs, ``import_httpx`` while the HTTP
    stack loads); the server received both requests."""
    hooks, marker = tmp_path / "hooks", tmp_path / "collections.txt"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_COUNT_LOADING_COLLECTIONS.format(marker=str(marker)), encoding="utf-8")
    env = dict(pyz_env, PYTHONPATH=str(hooks))
    server = MockServer({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
    url = server.start()
    try:
        config = write_mcp_json(tmp_path, {"local": {"type": "http", "url": url}})
        run_pyz(python, pyz_path, "--config", str(config), "local", "--tools", env=pyz_env)  # the per-user copies
        site = _imported([python, "-X", "importtime", "-c", "pass"], env)  # a site .pth may load some of them
        for args in (["--tools"], ["echo", "--body", '{"a": 1}']):
            command = [python, "-X", "importtime", str(pyz_path), "--config", str(config), "local", *args]
            loaded = _imported(command, env)
            assert "h11" in loaded and "sitecustomize" in site and not STOOD_IN_STDLIB & (loaded - site), loaded
        assert marker.read_text().split() == ["0", "0", "0"]
        assert len(server.requests("tools/list")) == 3 and len(server.requests("tools/call")) == 1
    finally:
        server.stop()


def test_help_runs_without_the_deferred_sections_on_every_python(
    python: str, pyz_path: Path, pyz_env: dict, build_info: dict, tmp_path: Path
) -> None:
    """From the pyz (its .pyc on the build Python, the compiled cache on the others), `--help` executes neither the
    engine nor the resident section (docs/building.md, deferred sections); `--dry-run` loads the engine only, and
    an attribute of the resident section loads it."""
    code = (
        f"if sys.implementation.cache_tag != {build_info['bytecode']['cache_tag']!r}:\n"
        f"    assert boot.use_compiled_cache({build_info['build_id']!r}, {str(pyz_path)!r})\n"
        "import io, bkmcp\n"
        "out = io.StringIO()\n"
        "assert bkmcp.main(['--help'], stdout=out, stderr=out) == 0 and 'Usage:' in out.getvalue()\n"
        "print(bkmcp._bkmcp_lazy_1, bkmcp._bkmcp_lazy_2, 'McpSession' in vars(bkmcp))\n"
        "dry = ['--config', sys.argv[1], 'demo', 'echo', '--body', '{}', '--dry-run']\n"
        "assert bkmcp.main(dry, stdout=out, stderr=out) == 0, out.getvalue()\n"
        "print(bkmcp._bkmcp_lazy_1, bkmcp._bkmcp_lazy_2)\n"
        "print(bkmcp.ResidentServer.__module__, bkmcp._bkmcp_lazy_2)\n"
    )
    config = _config(tmp_path)
    for _ in range(2):  # a non-build Python: the first run compiles the cache, the second loads it
        prelude = f"import sys; sys.argv[1:] = [{str(config)!r}]\n"
        proc = run_in_pyz(python, pyz_path, prelude + code, env=pyz_env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["True True False", "False True", "bkmcp False"]


_MODULE_FACTS = (
    "m = sys.modules['bkmcp']; s = m.__spec__\n"
    "print(json.dumps([m.__name__, m.__file__, m.__cached__, m.__package__, s.name, s.origin, s.cached, s.parent,\n"
    "    s.has_location, s.submodule_search_locations, type(m.__loader__).__name__, m.__loader__.archive,\n"
    "    m.__loader__ is s.loader, sorted(k for k in vars(m) if k.startswith('__')), m.main.__module__]))\n"
)


def test_the_build_python_loads_bkmcp_once_with_the_spec_of_a_plain_import(pyz_path: Path, pyz_env: dict) -> None:
    """On the build Python the pyz's __main__ makes bkmcp's module itself (zipimport's find_spec would unmarshal
    bkmcp.pyc only to learn its file name, then exec_module again): bkmcp.pyc is unmarshalled once, and the module
    has every attribute a plain `import bkmcp` from the pyz gives it."""
    counting = (
        "import json, marshal, runpy, sys\n"
        "real, sizes = marshal.loads, []\n"
        "def loads(data, *rest):\n"
        "    sizes.append(len(data))\n"
        "    return real(data, *rest)\n"
        "marshal.loads = loads\n"
        f"sys.argv = [{str(pyz_path)!r}, '--version']\n"
        "try:\n"
        f"    runpy.run_path({str(pyz_path)!r}, run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "print(sum(size > 500_000 for size in sizes))\n" + _MODULE_FACTS
    )
    plain = f"import json, sys\nsys.path.insert(0, {str(pyz_path)!r})\nimport bkmcp\n" + _MODULE_FACTS
    ran, imported = (
        subprocess.run([sys.executable, "-c", code], env=pyz_env, capture_output=True, text=True, timeout=60)
        for code in (counting, plain)
    )
    assert ran.returncode == 0 and imported.returncode == 0, ran.stderr + imported.stderr
    version, loads, facts = ran.stdout.splitlines()
    assert version.startswith("bkmcp ") and loads == "1"  # bkmcp.pyc: the one code object that large
    assert json.loads(facts) == json.loads(imported.stdout)
    assert json.loads(facts)[1] == f"{pyz_path}/bkmcp.pyc"
