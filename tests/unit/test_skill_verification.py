"""SEP-2640 verification, pure (bkmcp.py room 5.10; issue 38 item 5): SKILL.md's YAML frontmatter read for the
subset skills use (anything beyond it refused, never guessed), a skill entry's files, and each file's bytes checked
against the listed digest and size and, for SKILL.md, the listed frontmatter field by field.
"""

from __future__ import annotations

import base64
import hashlib
from decimal import Decimal

import pytest

from bkmcp import SkillUnverifiedError, parse_frontmatter, parse_skill_files, verify_skill_file


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("---\nname: a\ndescription: b\n---\nbody", {"name": "a", "description": "b"}),
        ("\ufeff---\r\nname: a\r\n---\r\n", {"name": "a"}),
        ("---\nname: \"a: b\"\nx: 'it''s'\n---\n", {"name": "a: b", "x": "it's"}),
        (
            '---\nmetadata:\n  version: "2.1"\n  n: 3\n  f: 1.50\n---\n',
            {"metadata": {"version": "2.1", "n": 3, "f": Decimal("1.50")}},
        ),
        ("---\nt: true\nn: null\ne:\nw: ~\n---\n", {"t": True, "n": None, "e": None, "w": None}),
        (
            "---\ntools:\n  - Bash\n  - Read\nflow: [a, 2]\nnone: []\n---\n",
            {"tools": ["Bash", "Read"], "flow": ["a", 2], "none": []},
        ),
        ("---\ntools:\n- Bash\n- Read\nafter: x\n---\n", {"tools": ["Bash", "Read"], "after": "x"}),
        ("---\nd: |\n  one\n  two\n\nk: v\n---\n", {"d": "one\ntwo\n", "k": "v"}),
        ("---\nd: >-\n  one\n  two\n\n  three\n---\n", {"d": "one two\nthree"}),
        ("---\nd: a long\n  plain line\n# a comment\nk: v # trailing\n---\n", {"d": "a long plain line", "k": "v"}),
        ("no frontmatter", None),
        ("---\nname: a\n", None),  # never closed
        ("---\n- a\n---\n", None),  # not a mapping
        ("---\na: &x 1\nb: *x\n---\n", None),  # anchors: beyond the subset
        ("---\na: !!str 1\n---\n", None),  # tags
        ("---\na: {b: 1}\n---\n", None),  # flow mappings
        ("---\na: 1\na: 2\n---\n", None),  # a key twice
        ("---\nlist:\n  - k: v\n---\n", None),  # a sequence of mappings
        ("---\na: 1\n   b: 2\n---\n", None),  # bad indentation
        ('---\na: "open\n---\n', None),
        ("---\na: 'open\n---\n", None),
        ("---\na: [x, 'y']\n---\n", None),  # a quoted flow item: beyond the subset
        ("---\na: |2\n  x\n---\n", None),  # an indentation indicator
        ("---\n\ta: 1\n---\n", None),  # a tab
        ("---\njust text\n---\n", None),  # not a key
        ("---\nd: |+\n  kept\n\n---\n", {"d": "kept\n\n"}),
        ("---\nnested:\n  deeper:\n    - [1, 2]\n---\n", {"nested": {"deeper": [[1, 2]]}}),
    ],
)
def test_frontmatter_subset(text, value):
    assert parse_frontmatter(text) == value


SKILL_MD = "---\nname: demo\ndescription: A demo\nmetadata:\n  version: 1.0\n---\nBody\n"
OTHER = b"\x00\x01binary"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def entry(**changes) -> dict:
    made = {
        "uri": "skill://acme/demo/SKILL.md",
        "frontmatter": {"name": "demo", "description": "A demo", "metadata": {"version": Decimal("1.0")}},
        "resources": [
            {"uri": "skill://acme/demo/bin/tool", "digest": sha(OTHER), "size": len(OTHER)},
            {"uri": "skill://acme/demo/SKILL.md", "digest": sha(SKILL_MD.encode())},
        ],
    }
    made.update(changes)
    return made


def test_files_come_skill_md_first_with_their_relative_paths():
    files = parse_skill_files(entry())
    assert [(f.parts, f.size) for f in files] == [(("SKILL.md",), None), (("bin", "tool"), len(OTHER))]


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ("dynamic", "no_digests"),
        (None, "no_digests"),
        ([{"uri": "skill://acme/demo/bin/tool", "digest": sha(OTHER)}], "manifest"),  # no SKILL.md among them
        ([{"uri": "skill://acme/demo/SKILL.md", "digest": "md5:00"}], "manifest"),
        ([{"uri": "skill://acme/demo/SKILL.md", "digest": sha(b"x").upper()}], "manifest"),
        ([{"uri": "skill://acme/demo/SKILL.md", "digest": sha(b"x"), "size": -1}], "manifest"),
        ([{"uri": "skill://acme/demo/SKILL.md", "digest": sha(b"x"), "size": True}], "manifest"),
        ([{"uri": "skill://acme/demo/SKILL.md", "digest": sha(b"x")}] * 2, "manifest"),
        ([{"digest": sha(b"x")}], "manifest"),
        ([{"uri": "skill://acme/other/x.md", "digest": sha(b"x")}], "path"),
        ([{"uri": "skill://acme/demo/a/../../x.md", "digest": sha(b"x")}], "path"),
        ([{"uri": "skill://acme/demo//x.md", "digest": sha(b"x")}], "path"),
    ],
)
def test_a_manifest_bkmcp_cannot_verify_is_refused(resources, reason):
    with pytest.raises(SkillUnverifiedError) as caught:
        parse_skill_files(entry(resources=resources) if resources is not None else {"uri": entry()["uri"]})
    assert caught.value.details["reason"] == reason and caught.value.code == "skill_unverified"


def read(text: str | None = None, blob: bytes | None = None, uri: str = "skill://acme/demo/SKILL.md") -> dict:
    item = {"uri": uri, **({"text": text} if text is not None else {})}
    if blob is not None:
        item["blob"] = base64.b64encode(blob).decode()
    return {"contents": [item]}


def test_a_file_verified_by_digest_size_and_frontmatter():
    skill_md, tool = parse_skill_files(entry())
    assert verify_skill_file(entry(), skill_md, read(SKILL_MD)) == SKILL_MD.encode()
    assert verify_skill_file(entry(), tool, read(blob=OTHER, uri=tool.uri)) == OTHER


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (read(SKILL_MD.replace("Body", "Evil")), "digest"),
        ({"contents": []}, "contents"),
        ({"contents": [read(SKILL_MD)["contents"][0]] * 2}, "contents"),
        (read(SKILL_MD, uri="skill://acme/demo/other.md"), "contents"),
        ({"contents": [{"uri": "skill://acme/demo/SKILL.md", "blob": "%%"}]}, "contents"),
    ],
)
def test_skill_md_not_as_listed_is_refused(answer, reason):
    with pytest.raises(SkillUnverifiedError) as caught:
        verify_skill_file(entry(), parse_skill_files(entry())[0], answer)
    assert caught.value.details["reason"] == reason


@pytest.mark.parametrize(
    ("frontmatter", "text"),
    [
        ({"name": "demo", "description": "A demo", "metadata": {"version": "1.0"}}, SKILL_MD),  # a string, not 1.0
        ({"name": "demo", "description": "A demo"}, SKILL_MD),  # a field the listing lacks
        ({"name": "demo", "description": "A demo", "metadata": {"version": 1}, "license": "MIT"}, SKILL_MD),
        ({"name": "other", "description": "A demo"}, "---\nname: other\ndescription: A demo\n---\n"),  # not its dir
        ({"name": "demo", "description": "A demo"}, "# no frontmatter\n"),
    ],
)
def test_frontmatter_unlike_the_listing_is_refused(frontmatter, text):
    listed = entry(frontmatter=frontmatter, resources=[{"uri": entry()["uri"], "digest": sha(text.encode())}])
    with pytest.raises(SkillUnverifiedError) as caught:
        verify_skill_file(listed, parse_skill_files(listed)[0], read(text))
    assert caught.value.details["reason"] == "frontmatter"


def test_a_listed_size_that_differs_is_refused_before_the_digest():
    listed = entry(resources=[{"uri": entry()["uri"], "digest": sha(SKILL_MD.encode()), "size": 1}])
    with pytest.raises(SkillUnverifiedError, match="listed as 1") as caught:
        verify_skill_file(listed, parse_skill_files(listed)[0], read(SKILL_MD))
    assert caught.value.details == {"file": "skill://acme/demo/SKILL.md", "reason": "size"}


def test_a_list_in_the_frontmatter_is_compared_item_by_item():
    text = "---\nname: demo\ndescription: A demo\ntools: [Bash, 2]\n---\n"
    listed = entry(
        frontmatter={"name": "demo", "description": "A demo", "tools": ["Bash", 2]},
        resources=[{"uri": entry()["uri"], "digest": sha(text.encode())}],
    )
    assert verify_skill_file(listed, parse_skill_files(listed)[0], read(text)) == text.encode()
    listed["frontmatter"]["tools"] = ["Bash", "2"]
    with pytest.raises(SkillUnverifiedError):
        verify_skill_file(listed, parse_skill_files(listed)[0], read(text))


def test_an_entry_whose_uri_is_not_a_skill_md_is_refused():
    with pytest.raises(SkillUnverifiedError) as caught:
        parse_skill_files(entry(uri="skill://acme/demo/README.md"))
    assert caught.value.details["reason"] == "uri"
