"""Issue 28 item 8: the first build says what it downloads (how many wheels, where they are cached, their size) and
shows its progress: one updating line on a terminal, a line per wheel in a log; a build with every wheel cached
says nothing about downloading."""

from __future__ import annotations

import io
from pathlib import Path

import build_zipapp
from build_zipapp import Pin


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


PINS = [
    Pin("idna", "3.20", "idna-3.20-py3-none-any.whl", "0" * 64),
    Pin("h11", "0.16.0", "h11-0.16.0-py3-none-any.whl", "1" * 64),
    Pin("httpx", "0.28.1", "httpx-0.28.1-py3-none-any.whl", "2" * 64),
]


def _fetching(monkeypatch, sizes: dict[str, int]) -> list[str]:
    """``fetch_wheel`` writes a wheel of the given size into the cache (what pip download does), recording each."""
    fetched: list[str] = []

    def fetch(pin: Pin, cache: Path, platforms: list[str]) -> bytes:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / pin.filename).write_bytes(b"w" * sizes[pin.name])
        fetched.append(pin.filename)
        return b""

    monkeypatch.setattr(build_zipapp, "fetch_wheel", fetch)
    return fetched


def test_the_first_build_says_how_many_wheels_where_and_how_big_line_by_line_in_a_log(monkeypatch, tmp_path):
    cache = tmp_path / "vendor_cache"
    cache.mkdir()
    (cache / PINS[0].filename).write_bytes(b"cached")
    fetched = _fetching(monkeypatch, {"h11": 1_500_000, "httpx": 64_000})
    out = io.StringIO()
    assert build_zipapp.prefetch_wheels(PINS, cache, [], out) == 2
    lines = out.getvalue().splitlines()
    assert fetched == [PINS[1].filename, PINS[2].filename]
    assert lines[0].startswith("build_zipapp: downloading 2 of the 3 wheels pinned in vendor.txt")
    assert f"into {cache.resolve()}/, once" in lines[0]
    assert lines[1:3] == [
        "  [1/2] h11-0.16.0-py3-none-any.whl (1.5 MB)",
        "  [2/2] httpx-0.28.1-py3-none-any.whl (64 kB)",
    ]
    assert lines[3] == f"build_zipapp: downloaded 2 wheels, 1.6 MB, into {cache.resolve()}/"
    assert "\r" not in out.getvalue()


def test_on_a_terminal_the_progress_is_one_updating_line(monkeypatch, tmp_path):
    _fetching(monkeypatch, {"idna": 100_000, "h11": 100_000, "httpx": 100_000})
    out = Terminal()
    assert build_zipapp.prefetch_wheels(PINS, tmp_path / "cache", [], out) == 3
    text = out.getvalue()
    assert "\r\033[K  [1/3] idna-3.20-py3-none-any.whl …" in text and "\r\033[K  [3/3] httpx" in text
    assert text.count("\n") == 2  # the announcement and the total: the progress overwrote itself
    assert text.endswith(
        "build_zipapp: downloaded 3 wheels, 0.3 MB, into " + str((tmp_path / "cache").resolve()) + "/\n"
    )


def test_a_build_with_every_wheel_cached_says_nothing_about_downloading(monkeypatch, tmp_path):
    fetched = _fetching(monkeypatch, {})
    for pin in PINS:
        (tmp_path / pin.filename).write_bytes(b"cached")
    out = Terminal()
    assert build_zipapp.prefetch_wheels([*PINS, PINS[0]], tmp_path, [], out) == 0
    assert out.getvalue() == "" and fetched == []


def test_the_readmes_state_how_many_wheels_the_first_build_downloads():
    """The quick start's count is the default build's: every pure pin and the jq natives of the default targets."""
    import re

    from tests.helpers import ROOT

    lock = build_zipapp.load_lock()
    pure = [p for p in lock if not p.native]
    platforms = build_zipapp.resolve_platforms([])
    natives = build_zipapp.select_native_pins(lock, platforms, build_zipapp.JQ_PYTHONS)
    count = len(set(pure + natives))
    for name, pattern in (("README.md", r"\((\d+) wheels, "), ("README_zh.md", r"（(\d+) 个 wheel，")):
        stated = re.findall(pattern, (ROOT / name).read_text(encoding="utf-8"))
        assert stated == [str(count)], (name, stated, count)


def test_a_platform_build_never_replaces_the_full_pyz(tmp_path, monkeypatch, capsys) -> None:
    """Issue 40 item 7: `build_zipapp.py --platform none` used to overwrite dist/bkmcp.pyz, the full build, without a
    word. Another jq set than the default goes to its own file beside it (and says so); the default build, or an
    explicit --output, writes where it always did. The heavy steps are stand-ins: what is written, and where."""
    import json

    full = tmp_path / "dist" / "bkmcp.pyz"
    full.parent.mkdir()
    full.write_bytes(b"the full build")
    monkeypatch.setattr(build_zipapp, "DEFAULT_OUTPUT", full)
    monkeypatch.setattr(build_zipapp, "load_lock", lambda: [])
    monkeypatch.setattr(build_zipapp, "prefetch_wheels", lambda *a, **k: 0)
    monkeypatch.setattr(build_zipapp, "select_native_pins", lambda *a: [])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    info = {"build_id": "b", "bytecode": {"cache_tag": "cpython-311"}, "natives": []}
    monkeypatch.setattr(build_zipapp, "collect", lambda *a: {"BUILD-INFO.json": json.dumps(info)})
    built = iter([b"lean", b"custom", b"fresh full"])
    monkeypatch.setattr(build_zipapp, "write_pyz", lambda files, epoch: next(built))
    assert build_zipapp.main(["--platform", "none"]) == 0
    lean = full.with_name("bkmcp-platform-none.pyz")
    assert lean.read_bytes() == b"lean" and full.read_bytes() == b"the full build"
    assert capsys.readouterr().out.startswith(f"{lean}: sha256 ")
    assert build_zipapp.main(["--platform=-musllinux_1_2_x86_64"]) == 0
    assert full.with_name("bkmcp-platform-custom.pyz").read_bytes() == b"custom"
    assert full.read_bytes() == b"the full build"
    assert build_zipapp.main([]) == 0
    assert full.read_bytes() == b"fresh full"


def test_the_license_is_an_spdx_string_with_the_setuptools_that_reads_it() -> None:
    """Issue 40 item 7: `make venv` and `pip install .` printed setuptools' warning that the TOML-table
    `project.license` stops working on 2027-02-18. The SPDX string form (PEP 639) needs setuptools >= 77."""
    import re

    text = (Path(build_zipapp.__file__).parent / "pyproject.toml").read_text()
    assert re.search(r'^license = "MIT"$', text, re.M), "project.license must be the SPDX string"
    [requires] = re.findall(r"^requires = \[(.*)\]", text, re.M)
    assert '"setuptools>=77"' in requires
