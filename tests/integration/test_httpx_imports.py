"""Remote commands load httpx without its optional extras (``bkmcp._import_httpx``): no async back end (trio,
anyio, sniffio), no httpx CLI (click, rich, pygments), no brotli/zstandard decoders, whatever the host has
installed. Run as a real process against the mock over HTTP, with fake versions of those modules first on the
path: each records being imported, and the server shows which encodings bkmcp offered."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import run_bkmcp_modules

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
