"""Blobs to files, on request only (issue 38 item 4, docs/contract.md §7 "Blobs to files"): ``--out DIR`` on
``--read``, ``--prompt`` and a tool call writes each blob through the one writer and puts ``{path, bytes, sha256,
mimeType}`` in place of its base64; ``--out -`` writes the one blob's bytes to stdout. Against the mock server over
HTTP and stdio in both eras, with its hostile blobs (``hostile_blobs``: URIs that try to choose the file, a huge
blob, a blob that is not base64), and against server-everything over stdio (``get-tiny-image``, the blob
template, an embedded blob resource, the resource prompt). Nothing is written outside DIR, no link is followed, no
file is overwritten, the cap holds, and nothing at all is written without ``--out``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mock_server.mcp_mock import HOSTILE_BLOB_BYTES, TINY_PNG, mock_tool
from tests.helpers import ROOT, MockTarget, run_bkmcp, write_mcp_json

pytestmark = pytest.mark.integration

MODERN, LEGACY = "2026-07-28", "2025-11-25"
PNG = base64.b64decode(TINY_PNG)


class Mock(MockTarget):
    """The mock with ``hostile_blobs`` over one transport and era."""

    def __init__(self, tmp: Path, transport: str, version: str, scenario: dict[str, Any] | None = None) -> None:
        super().__init__(tmp, transport, version, {"hostile_blobs": True, **(scenario or {})})
        self.tmp = tmp

    def calls(self, method: str) -> list[dict[str, Any]]:
        """The params of every ``method`` request the server received."""
        return [r.get("params") or {} for r in self.requests() if r.get("method") == method]


@pytest.fixture(params=[("http", LEGACY), ("http", MODERN), ("stdio", LEGACY), ("stdio", MODERN)], ids="-".join)
def mock(request, tmp_path):
    made = Mock(tmp_path, *request.param)
    yield made
    made.stop()


@pytest.fixture
def http_mock(tmp_path):
    made = Mock(tmp_path, "http", MODERN, {"tools": [mock_tool("tiny", "image")]})
    yield made
    made.stop()


def files_under(root: Path) -> dict[str, bytes | str]:
    """Every entry below ``root``: a file's bytes, a link's target."""
    found: dict[str, bytes | str] = {}
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder, name)
            found[str(path.relative_to(root))] = os.readlink(path) if path.is_symlink() else path.read_bytes()
    return found


def test_read_out_writes_the_blob_as_a_0644_file_and_replaces_its_base64(mock):
    result = mock.run("--read", "mock://images/dot.png", "--out", "pics")
    assert result.exit_status == 0, result.stdout + result.stderr
    path = mock.cwd / "pics" / "dot.png"
    assert result.json["data"]["result"]["contents"] == [
        {
            "uri": "mock://images/dot.png",
            "mimeType": "image/png",
            "blob": {
                "path": str(path),
                "bytes": len(PNG),
                "sha256": hashlib.sha256(PNG).hexdigest(),
                "mimeType": "image/png",
            },
        }
    ]
    assert path.read_bytes() == PNG and (path.stat().st_mode & 0o777) == 0o644
    assert files_under(mock.tmp / "work") == {"pics/dot.png": PNG}
    assert [p["uri"] for p in mock.calls("resources/read")] == ["mock://images/dot.png"]
    # -r names the file instead of the bytes; a second read never overwrites the first
    raw = mock.run("--read", "mock://images/dot.png", "--out", "pics", "-r")
    assert (
        raw.stdout == f"[resource mock://images/dot.png, image/png, 70 bytes, saved as {path.parent / 'dot-1.png'}]\n"
    )
    assert files_under(mock.cwd) == {"pics/dot.png": PNG, "pics/dot-1.png": PNG}


def test_without_out_nothing_is_written(http_mock):
    for args in (("--read", "mock://images/dot.png"), ("--read", "mock://hostile/many"), ("tiny",)):
        result = http_mock.run(*args)
        assert result.exit_status == 0, result.stderr
    assert files_under(http_mock.cwd) == {}
    assert http_mock.run("--read", "mock://images/dot.png").json["data"]["result"]["contents"][0]["blob"] == TINY_PNG


# the hostile contents' URIs (mock_server HOSTILE_RESOURCES) and the only file each may become
HOSTILE_NAMES = {
    "traversal": "escape.png",  # mock://hostile/../../../escape.png
    "encoded": "escape.png",  # mock://hostile/..%2F..%2F..%2Fescape.png
    "absolute": "passwd.bin",  # /etc/passwd
    "controls": "a_b_31mc_.png",  # a NUL, an ESC and a newline in the name
    "dot": "blob.png",  # mock://hostile/.
    "dotdot": "blob.png",  # mock://hostile/..
}


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_a_hostile_uri_never_chooses_where_the_file_goes(tmp_path, version):
    made = Mock(tmp_path, "http", version)
    try:
        out = made.cwd / "deep" / "out"
        for resource, name in HOSTILE_NAMES.items():
            result = made.run("--read", f"mock://hostile/{resource}", "--out", str(out))
            assert result.exit_status == 0, result.stdout + result.stderr
            path = Path(result.json["data"]["result"]["contents"][0]["blob"]["path"])
            assert path.parent == out and path.name.split("-")[0].rsplit(".")[0] == name.rsplit(".")[0], path
        written = files_under(tmp_path)
        assert sorted(k for k in written if not k.startswith("work/deep/out/")) == [made.config.name]
        names = sorted(k.rsplit("/", 1)[1] for k in written if k.startswith("work/"))
        assert names == ["a_b_31mc_.png", "blob-1.png", "blob.png", "escape-1.png", "escape.png", "passwd.bin"]
        assert not Path("/etc/passwd.bin").exists() and not (tmp_path / "escape.png").exists()
    finally:
        made.stop()


def test_a_link_with_the_would_be_name_is_never_followed(http_mock, tmp_path):
    out = http_mock.cwd / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (out / "dot.png").symlink_to(victim)
    (out / "dot-1.png").symlink_to(tmp_path / "created-through-a-link")  # dangling: O_EXCL must refuse it too
    (out / "dot-2.png").write_bytes(b"mine")  # an existing file is never overwritten
    result = http_mock.run("--read", "mock://images/dot.png", "--out", "out")
    assert result.exit_status == 0, result.stderr
    assert result.json["data"]["result"]["contents"][0]["blob"]["path"] == str(out / "dot-3.png")
    assert victim.read_text() == "keep me" and not (tmp_path / "created-through-a-link").exists()
    assert (out / "dot-2.png").read_bytes() == b"mine" and (out / "dot-3.png").read_bytes() == PNG


def test_the_cap_holds_and_the_envelope_says_so(mock):
    limit = str(HOSTILE_BLOB_BYTES - 1)
    result = mock.run("--read", "mock://hostile/huge", "--out", "out", "--max-blob-bytes", limit)
    assert result.exit_status == 2 and result.stderr == ""
    envelope = result.json
    assert envelope["error"]["code"] == "blob_too_large"
    assert (envelope["error"]["bytes"], envelope["error"]["limit"]) == (HOSTILE_BLOB_BYTES, int(limit))
    assert envelope["data"]["result"]["contents"][0]["blob"] == {
        "path": None,
        "bytes": HOSTILE_BLOB_BYTES,
        "mimeType": "image/png",
    }
    assert files_under(mock.cwd) == {}  # the directory was made; nothing is in it
    exact = mock.run("--read", "mock://hostile/huge", "--out", "out", "--max-blob-bytes", str(HOSTILE_BLOB_BYTES))
    assert exact.exit_status == 0, exact.stderr
    assert (mock.cwd / "out" / "huge.png").stat().st_size == HOSTILE_BLOB_BYTES


def test_a_blob_that_is_not_base64_writes_nothing(http_mock):
    result = http_mock.run("--read", "mock://hostile/not-base64", "--out", "out")
    assert (result.exit_status, result.json["error"]["code"]) == (2, "mcp_protocol_error")
    assert files_under(http_mock.cwd) == {}


def test_every_blob_of_a_result_gets_its_own_file(http_mock):
    result = http_mock.run("--read", "mock://hostile/many", "--out", "out", "--jq", ".data.result.contents[]")
    items = [json.loads(line) for line in result.stdout.splitlines()]
    assert [item.get("blob", {}).get("path") for item in items] == [
        str(http_mock.cwd / "out" / name) for name in ("same.png", "same-1.png")
    ] + [None, str(http_mock.cwd / "out" / "same-2.png")]
    assert items[2] == {"uri": "mock://hostile/note.txt", "mimeType": "text/plain", "text": "not a blob"}


def test_out_dash_writes_the_one_blob_to_stdout(http_mock):
    argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(http_mock.config), "m"]
    done = subprocess.run([*argv, "--read", "mock://images/dot.png", "--out", "-"], capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, PNG, b"")
    for uri, count in (("mock://hostile/many", 3), ("mock://notes/readme", 0)):
        refused = subprocess.run(
            [*argv, "--read", uri, "--out", "-"], capture_output=True, timeout=60, cwd=http_mock.cwd
        )
        assert (refused.returncode, refused.stdout) == (1, b"")
        error = json.loads(refused.stderr.decode().splitlines()[-1])["error"]
        assert (error["code"], error["blobs"]) == ("out_needs_one_blob", count)
    assert files_under(http_mock.cwd) == {}


def test_a_tool_call_and_a_prompt_write_their_blobs(tmp_path):
    audio = base64.b64encode(b"RIFF....WAVE").decode()
    tool = {
        "name": "media",
        "description": "an image, audio and an embedded blob",
        "inputSchema": {"type": "object"},
        "x-mock": "result",
        "x-mock-result": {
            "content": [
                {"type": "image", "data": TINY_PNG, "mimeType": "image/png"},
                {"type": "audio", "data": audio, "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///x/../../r.bin", "blob": TINY_PNG}},
                {"type": "text", "text": "done"},
            ]
        },
    }
    picture = {
        "name": "picture",
        "x-mock-messages": [
            {"role": "user", "content": {"type": "image", "data": TINY_PNG, "mimeType": "image/png"}},
            {"role": "assistant", "content": {"type": "text", "text": "a dot"}},
        ],
    }
    made = Mock(tmp_path, "stdio", MODERN, {"tools": [tool], "prompts": [picture]})
    called = made.run("media", "--out", "out", "--jq", "[.data.result.content[] | .data.path? // .resource.blob.path?]")
    assert called.exit_status == 0, called.stderr
    out = made.cwd / "out"
    assert json.loads(called.stdout) == [str(out / "image.png"), str(out / "audio.wav"), str(out / "r.bin"), None]
    assert (out / "audio.wav").read_bytes() == b"RIFF....WAVE" and (out / "r.bin").read_bytes() == PNG
    prompt = made.run("--prompt", "picture", "--out", "out", "-r")
    assert (
        prompt.stdout == f"[user]\n[image image/png, 70 bytes, saved as {out / 'image-1.png'}]\n\n[assistant]\na dot\n"
    )
    assert len(made.calls("tools/call")) == 1 and len(made.calls("prompts/get")) == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--tools", "--out", "out"), "--tools and --out cannot be combined"),
        (("--resources", "--out", "out"), "--resources and --out cannot be combined"),
        (("--out", "out"), "--out writes the blobs of a result"),
        (("--read", "mock://images/dot.png", "--max-blob-bytes", "10"), "only valid with --out"),
        (("--read", "mock://images/dot.png", "--out", "o", "--max-blob-bytes", "ten"), "positive number of bytes"),
        (("--read", "mock://images/dot.png", "--out", "-", "--jq", "."), "neither --jq nor --raw"),
        (("--read", "mock://images/dot.png", "--out", "-", "-r"), "neither --jq nor --raw"),
        (("--read", "mock://images/dot.png", "--out="), "--out needs a directory"),
        (("tiny", "--body", "{}", "--dry-run", "--out", "o"), "--dry-run cannot be combined with --out"),
    ],
)
def test_out_misused_is_a_usage_error_before_anything_is_sent(http_mock, args, words):
    result = http_mock.run(*args)
    assert result.exit_status == 1 and result.stdout == ""
    error = json.loads(result.stderr.splitlines()[-1])["error"]
    assert error["code"] == "usage_error" and words in error["message"]
    assert http_mock.http is not None and http_mock.http.log == []
    assert files_under(http_mock.cwd) == {}


def test_an_unusable_directory_fails_before_anything_is_sent(http_mock):
    (http_mock.cwd / "taken").write_text("a file, not a directory")
    result = http_mock.run("--read", "mock://images/dot.png", "--out", "taken")
    assert result.exit_status == 1 and result.stdout == ""
    assert json.loads(result.stderr.splitlines()[-1])["error"]["code"] == "blob_write_error"
    assert http_mock.http is not None and http_mock.http.log == []


def test_a_tool_property_named_out_is_reserved(tmp_path):
    tool = {"name": "save", "inputSchema": {"type": "object", "properties": {"out": {"type": "string"}}}}
    made = Mock(tmp_path, "http", MODERN, {"tools": [tool]})
    try:
        helped = made.run("save", "--help")
        assert helped.exit_status == 0 and "collides with bkmcp's own option --out" in helped.stdout
        sent = made.run("save", "--body", '{"out": "x"}')
        assert sent.exit_status == 0, sent.stderr
        assert made.calls("tools/call")[0]["arguments"] == {"out": "x"}
    finally:
        made.stop()


@pytest.mark.interop
def test_server_everything_blobs_over_stdio(tmp_path, everything_stdio_argv):
    config = write_mcp_json(
        tmp_path / "mcp.json",
        {"ev": {"type": "stdio", "command": everything_stdio_argv[0], "args": everything_stdio_argv[1:]}},
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}

    def run(*args: str) -> dict[str, Any]:
        argv = [sys.executable, str(ROOT / "bkmcp.py"), "--config", str(config), "ev", *args, "--out", "out"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return json.loads(done.stdout)["data"]["result"]

    image = run("get-tiny-image")["content"][1]
    assert image["type"] == "image" and image["data"]["path"] == str(tmp_path / "out" / "image.png")
    png = (tmp_path / "out" / "image.png").read_bytes()
    assert png.startswith(b"\x89PNG") and image["data"]["bytes"] == len(png) == 4033
    assert image["data"]["sha256"] == hashlib.sha256(png).hexdigest()
    read = run("--read", "demo://resource/dynamic/blob/{resourceId}", "--resourceId", "3")["contents"][0]
    assert read["blob"]["path"] == str(tmp_path / "out" / "3.txt")
    embedded = run("get-resource-reference", "--resourceType", "Blob", "--resourceId", "2")["content"][1]
    assert embedded["resource"]["blob"]["path"] == str(tmp_path / "out" / "2.txt")
    prompt = run("--prompt", "resource-prompt", "--resourceType", "Blob", "--resourceId", "2")["messages"][1]
    assert prompt["content"]["resource"]["blob"]["path"] == str(tmp_path / "out" / "2-1.txt")
    assert sorted(files_under(tmp_path)) == ["mcp.json", "out/2-1.txt", "out/2.txt", "out/3.txt", "out/image.png"]


def test_out_runs_one_shot_even_with_keep_alive(http_mock, tmp_path):
    """docs/contract.md §14: a command with --out writes its files itself; no background process is started."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    argv = ("--config", str(http_mock.config), "--keep-alive", "m", "--read", "mock://images/dot.png", "--out", "o")
    result = run_bkmcp(*argv, env=env, cwd=str(http_mock.cwd))
    assert result.exit_status == 0, result.stderr
    assert (http_mock.cwd / "o" / "dot.png").read_bytes() == PNG
    assert list(runtime.iterdir()) == []  # no background process's folder: nothing warm was asked
