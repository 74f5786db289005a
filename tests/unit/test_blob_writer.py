"""The one blob writer of ``--out`` (issue 38 items 4 and 5, bkmcp.py room 2.7; docs/contract.md §7 "Blobs to
files"): names built from a URI and a MIME type, never a path of the server's; a skill's relative paths taken part
by part; files made relative to the directory's descriptor, never through a link, never over a file; a failed
command leaves nothing it wrote.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import bkmcp
from bkmcp import BlobSpot, BlobWriteError, BlobWriter, build_blob_name, parse_relative_path, save_blobs


@pytest.mark.parametrize(
    ("uri", "mime", "kind", "name"),
    [
        ("mock://images/dot.png", "image/png", "blob", "dot.png"),
        ("mock://x/../../../escape.png", "image/png", "blob", "escape.png"),
        ("mock://x/..%2F..%2Fescape.png", None, "blob", "escape.png"),
        ("mock://x/..%5C..%5Cwin.png", None, "blob", "win.png"),
        ("/etc/passwd", "application/octet-stream", "blob", "passwd.bin"),
        ("mock://x/a\x00b\x1b[31mc\n.png", "image/png", "blob", "a_b_31mc_.png"),
        ("mock://x/.", "image/png", "blob", "blob.png"),
        ("mock://x/..", "text/plain", "blob", "blob.txt"),
        ("mock://x/...", None, "blob", "blob.bin"),
        ("mock://x/.bashrc", None, "blob", "bashrc.bin"),
        ("mock://x/-rf", None, "blob", "rf.bin"),
        ("mock://x/report?v=2#top", "application/pdf", "blob", "report.pdf"),
        ("mock://x/3", "text/plain; charset=utf-8", "blob", "3.txt"),
        ("urn:logo:mcp.svg", None, "blob", "mcp.svg"),
        (None, "image/png", "image", "image.png"),
        (None, "audio/wav", "audio", "audio.wav"),
        (None, None, "audio", "audio.bin"),
        ("mock://x/" + "n" * 300 + ".png", None, "blob", "n" * 96 + ".png"),
    ],
)
def test_a_name_comes_from_the_uris_last_segment_and_the_mime_type(uri, mime, kind, name):
    built = build_blob_name(uri, mime, kind)
    assert built == name and "/" not in built and len(built) <= bkmcp.BLOB_NAME_LIMIT


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("SKILL.md", ("SKILL.md",)),
        ("scripts/run.py", ("scripts", "run.py")),
        ("données/été.md", ("données", "été.md")),
        ("../x", None),
        ("a/../b", None),
        ("./a", None),
        ("/etc/passwd", None),
        ("a//b", None),
        ("a/", None),
        ("a\\b", None),
        ("a\x00b", None),
        ("a\nb", None),
        ("-rf", None),
        ("x" * 256, None),
        ("", None),
        (7, None),
    ],
)
def test_a_relative_path_is_taken_part_by_part(path, parts):
    assert parse_relative_path(path) == parts


def test_files_are_new_0644_and_numbered_never_through_a_link(tmp_path):
    os.umask(0o077)
    try:
        writer = BlobWriter(str(tmp_path / "made" / "here"))  # made with its parents
    finally:
        os.umask(0o022)
    (tmp_path / "made" / "here" / "a.txt").symlink_to(tmp_path / "victim")
    try:
        assert writer.write(("a.txt",), b"1") == str(tmp_path / "made" / "here" / "a-1.txt")
        assert writer.write(("sub", "deeper", "b.txt"), b"2", numbered=False).endswith("here/sub/deeper/b.txt")
        with pytest.raises(BlobWriteError, match="exists"):
            writer.write(("sub", "deeper", "b.txt"), b"3", numbered=False)
        assert writer.make_directory("skill") == "skill" and writer.make_directory("skill") == "skill-1"
    finally:
        writer.close()
    assert not (tmp_path / "victim").exists()
    assert (tmp_path / "made/here/a-1.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "made/here/sub/deeper/b.txt").read_bytes() == b"2"


def test_a_link_in_a_relative_path_is_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sub").symlink_to(outside)
    writer = BlobWriter(str(tmp_path / "out"))
    try:
        with pytest.raises(BlobWriteError, match="cannot make sub"):
            writer.write(("sub", "x.txt"), b"no")
    finally:
        writer.close()
    assert list(outside.iterdir()) == []


def test_a_failed_write_removes_what_the_command_wrote(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for number in range(1000):  # every numbered name of b.png taken: the second blob cannot be written
        (out / ("b.png" if number == 0 else f"b-{number}.png")).write_bytes(b"")
    before = sorted(p.name for p in out.iterdir())
    spots = [BlobSpot({"blob": "x"}, "blob", f"mock://{name}", "image/png", "blob") for name in ("a.png", "b.png")]
    writer = BlobWriter(str(out))
    try:
        with pytest.raises(BlobWriteError, match="all taken"):
            save_blobs(spots, [b"a", b"b"], writer)
    finally:
        writer.close()
    assert sorted(p.name for p in out.iterdir()) == before and spots[0].holder == {"blob": "x"}


def test_a_directory_that_cannot_be_made_is_blob_write_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(BlobWriteError) as caught:
        BlobWriter(str(Path(tmp_path, "file", "sub")))
    assert caught.value.code == "blob_write_error" and caught.value.exit_status == 1


def test_numbered_directories_run_out_and_a_file_in_the_way_of_a_folder(tmp_path):
    writer = BlobWriter(str(tmp_path))
    try:
        for number in range(1000):
            (tmp_path / ("s" if number == 0 else f"s-{number}")).mkdir()
        with pytest.raises(BlobWriteError, match="all taken"):
            writer.make_directory("s")
        (tmp_path / "plain").write_text("")
        with pytest.raises(BlobWriteError, match="cannot make plain"):
            writer.write(("plain", "x.txt"), b"x")
    finally:
        writer.close()


def test_find_blobs_skips_what_is_not_a_block():
    assert bkmcp.find_blobs({"result": "not an object"}) == []
    data = {"result": {"content": ["text", None, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}}
    assert [spot.kind for spot in bkmcp.find_blobs(data)] == ["image"]
