"""Remote commands load httpx without its optional extras (``bkmcp.import_httpx``): no async back end (trio,
anyio, sniffio), no httpx CLI (click, rich, pygments), no brotli/zstandard decoders, whatever the host has
installed. Run as a real process against the mock over HTTP, with fake versions of those modules first on the
path: each records being imported, and the server shows which encodings bkmcp offered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import STOOD_IN_STDLIB, run_bkmcp_modules

HIDDEN = ("trio", "anyio", "sniffio", "click", "rich", "pygments", "brotli", "brotlicffi", "zstandard")


def test_remote_command_imports_no_optional_httpx_extras(tmp_path: Path, mock) -> None:
    target = mock()
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    marker = tmp_path / "imported.txt"
    for name in HIDDEN:  # a module that exists, but records its import (and offers what httpx looks for)
        (fakes / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nclass Decompressor: pass\n", encoding="utf-8"
        )
    code, modules, proc = run_bkmcp_modules(
        tmp_path, "--config", str(target.config), target.name, "--tools", env={"PYTHONPATH": str(fakes)}
    )
    assert code == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["tools"]
    assert not marker.exists(), marker.read_text()
    assert "httpx" in modules and "httpcore" in modules
    assert not {m.split(".")[0] for m in modules} & set(HIDDEN)
    lists = target.srv.requests("tools/list")
    assert lists and {e["headers"].get("accept-encoding") for e in lists} == {"gzip, deflate"}


# A site hook that records every TLS context the process builds (ssl.SSLContext.__new__ is Python code)
_COUNT_CONTEXTS = """
import ssl
_new = ssl.SSLContext.__new__
def _counted(cls, *args, **kwargs):
    open({marker!r}, "a").write("SSLContext\\n")
    return _new(cls, *args, **kwargs)
ssl.SSLContext.__new__ = staticmethod(_counted)
"""


def test_http_url_builds_no_tls_context_and_loads_no_certifi(tmp_path: Path, mock) -> None:
    """Issue 31 item 5: an http:// server needs no TLS set-up: `--tools` and a call (fresh interpreter) build no
    ``SSLContext`` and never import certifi (its CA bundle lookup pulls importlib.resources in)."""
    target = mock({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "contexts.txt"
    (hooks / "sitecustomize.py").write_text(_COUNT_CONTEXTS.format(marker=str(marker)), encoding="utf-8")
    for args in (("--tools",), ("echo", "--body", '{"a": 1}')):
        code, modules, proc = run_bkmcp_modules(
            tmp_path, "--config", str(target.config), target.name, *args, env={"PYTHONPATH": str(hooks)}
        )
        assert code == 0, proc.stdout + proc.stderr
        assert "ssl" in modules and "httpcore" in modules  # the hook ran; httpcore itself imports ssl
        assert not {"certifi", "idna", "mimetypes"} & modules  # 127.0.0.1: no IDNA encoding either, no uploads
        assert not marker.exists(), marker.read_text()
    assert len(target.srv.requests("tools/list")) == 2
    assert [json.loads(e["body"])["params"]["arguments"] for e in target.srv.requests("tools/call")] == [{"a": 1}]


_HTTPS_AFTER_HTTP = """
import ssl, sys
sys.path.insert(0, sys.argv[1])
import bkmcp
bkmcp.new_http_client("http://127.0.0.1:9/mcp", insecure=False)
assert "certifi" not in sys.modules
client = bkmcp.new_http_client("https://127.0.0.1:9/mcp", insecure=False)
import certifi, httpcore._ssl
context = client._transport._pool._ssl_context
assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle was loaded
assert getattr(certifi, "__file__", None) and httpcore._ssl.certifi.where() == certifi.where()
print("ok")
"""


def _probe(code: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter without site (``-S``), bkmcp's checkout as its argv[1], the test venv's
    packages on PYTHONPATH."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(
        [sys.executable, "-S", "-c", code, str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": _site_packages()},
    )


def test_https_url_after_http_still_verifies_with_the_real_certifi(tmp_path: Path) -> None:
    """The certifi stand-in of ``import_httpx`` is gone once httpx is loaded: an https:// client built later gets
    a verifying context from the real CA bundle, and httpcore's own reference to certifi answers the same path."""
    proc = _probe(_HTTPS_AFTER_HTTP, tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


_IDNA_AFTER_IMPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import bkmcp
httpx = bkmcp.import_httpx()
assert not {"idna", "ipaddress", "mimetypes"} & set(sys.modules), sorted(sys.modules)
import httpx._multipart, mimetypes, urllib.parse
assert httpx._multipart.mimetypes.guess_type("a.json") == mimetypes.guess_type("a.json") == ("application/json", None)
assert urllib.parse.urlsplit("http://[::1]:8080/").hostname == httpx.URL("http://[::1]:8080/").host == "::1"
import ipaddress
assert urllib.parse.ipaddress.ip_address is httpx._urlparse.ipaddress.ip_address is ipaddress.ip_address
try:
    urllib.parse.urlsplit("http://[127.0.0.1]/")  # urllib.parse's own check, through the stand-in it holds
except ValueError as exc:
    assert "IPv4" in str(exc)
url = httpx.URL("http://B\u00fccher.example:8080/mcp")
import idna, httpx._urlparse
assert url.host == "b\u00fccher.example"
assert url.raw_host == idna.encode("b\u00fccher.example") == b"xn--bcher-kva.example"
assert httpx._urlparse.idna.IDNAError is idna.IDNAError and getattr(idna, "__file__", None)
try:
    httpx.URL("http://a\u200db.example/")
except httpx.InvalidURL as exc:
    print("ok", exc)
"""


def test_modules_stood_in_for_while_httpx_loads_answer_as_the_real_ones_afterwards(tmp_path: Path) -> None:
    """The stand-ins of ``import_httpx`` (idna, ipaddress, mimetypes: imported at a module's top, used only in
    functions) are never resolved while httpx loads and are gone once it is loaded; what holds one gets the real
    module's answers: a multipart file's type, an IPv6 literal (httpx's and urllib.parse's, whose IPv4-in-brackets
    check also goes through it), a non-ASCII host encoded by the real idna, whose ``IDNAError`` httpx turns into
    ``InvalidURL``."""
    proc = _probe(_IDNA_AFTER_IMPORT, tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("ok Invalid IDNA hostname"), proc.stdout + proc.stderr


_STDLIB_AFTER_IMPORT = """
import gc, sys
sys.path.insert(0, sys.argv[1])
import bkmcp
collections = []
def seen(phase, info):  # a collection while the HTTP stack loads: httpcore's import began, httpx's has not ended
    if phase == "start" and "httpcore" in sys.modules and not bkmcp._HTTPX:
        collections.append(info["generation"])
gc.callbacks.append(seen)
httpx = bkmcp.import_httpx()
assert gc.isenabled() and collections == [], collections  # none while httpx loaded; the collector is back
stood_in = set(STOOD_IN)  # tests.helpers.STOOD_IN_STDLIB, given on the probe's first line
assert not stood_in & set(sys.modules), sorted(stood_in & set(sys.modules))
import calendar, hashlib, locale, logging, selectors, shutil, socket, tempfile, traceback
import httpx._auth
digest = httpx._auth.DigestAuth._ALGORITHM_TO_HASH_FUNCTION
assert digest["SHA-256"](b"x").hexdigest() == hashlib.sha256(b"x").hexdigest()
assert digest["MD5"](b"x", usedforsecurity=False).hexdigest() == hashlib.md5(b"x").hexdigest()
assert logging.traceback.format_exception is traceback.format_exception
assert tempfile._shutil.rmtree is shutil.rmtree and calendar._locale.setlocale is locale.setlocale
assert socket.selectors.DefaultSelector is selectors.DefaultSelector
print("ok")
"""


def test_stdlib_modules_stood_in_for_load_only_when_used_and_nothing_is_collected_meanwhile(tmp_path: Path) -> None:
    """``import_httpx`` stands in for the stdlib modules that httpx's imports load but use only in functions
    (shutil, traceback, linecache, tokenize, selectors, locale, hashlib and OpenSSL's _hashlib), and runs no
    collection while httpx loads (the collector is enabled again after). What holds a stand-in gets the real
    module's answers afterwards: httpx's DigestAuth table hashes as hashlib does (its constructors are forwarders),
    logging's traceback, tempfile's shutil, calendar's locale and socket's selectors are the real ones."""
    proc = _probe(f"STOOD_IN = {sorted(STOOD_IN_STDLIB)!r}\n" + _STDLIB_AFTER_IMPORT, tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


_FROZEN_AFTER_IMPORT = """
import gc, sys
sys.path.insert(0, sys.argv[1])
import bkmcp
before = gc.get_freeze_count()
bkmcp.import_httpx()
assert gc.get_freeze_count() == before, "not a short command: nothing frozen"
del bkmcp._HTTPX[:]
for name in [m for m in sys.modules if m.split(".")[0] in ("httpx", "httpcore", "h11")]:
    del sys.modules[name]
bkmcp.SHORT_COMMAND.append(True)
httpx = bkmcp.import_httpx()
assert gc.get_freeze_count() > before + 1000, (before, gc.get_freeze_count())
print("ok")
"""


def test_a_short_commands_http_stack_is_frozen_once_loaded(tmp_path: Path) -> None:
    """``SHORT_COMMAND`` (set by ``main`` for the process's own command, 11.5): once httpx is loaded, the heap is
    frozen (the collections to come, the exit's among them, skip it); in any other process nothing is."""
    proc = _probe(_FROZEN_AFTER_IMPORT, tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


def _site_packages() -> str:
    """Where httpx is installed (``-S`` keeps site's .pth files, which may preload certifi, out of the process)."""
    import httpx

    return str(Path(httpx.__file__).resolve().parents[1])
