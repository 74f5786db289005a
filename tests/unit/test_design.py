"""docs/design.md stays true to the module (issue 31 item 4): its section table lists exactly bkmcp.py's numbered
banners, in order, with their numbers and titles."""

from __future__ import annotations

import re

from tests.helpers import ROOT

_TOP = re.compile(r"^# (\d+)\. (.+)$")
_SUB = re.compile(r"^# -- (\d+(?:\.\d+)+) (.+?)(?: \(docs/[^)]*\))? -*$")
_ROW = re.compile(r"^\| (\d+(?:\.\d+)*) +\| (.+?) +\|")


def module_sections(source: str) -> list[tuple[str, str]]:
    """(number, title) of every numbered banner: a section's line under a ``# ====`` rule, a numbered
    ``# -- N.M title`` sub-banner (its trailing ``(docs/…)`` reference and dashes dropped)."""
    lines = source.splitlines()
    found = []
    for i, line in enumerate(lines):
        top = _TOP.match(line) if i and lines[i - 1].startswith("# ====") else None
        sub = _SUB.match(line)
        if top or sub:
            number, title = (top or sub).groups()  # type: ignore[union-attr]
            found.append((number, title.strip()))
    return found


def design_sections(text: str) -> list[tuple[str, str]]:
    """The rows of design.md's section table (``| N | title | … |``), in order."""
    return [m.groups() for m in map(_ROW.match, text.splitlines()) if m]  # type: ignore[misc]


def test_design_md_lists_every_section_banner_by_number_and_title():
    banners = module_sections((ROOT / "bkmcp.py").read_text(encoding="utf-8"))
    assert [n for n, _ in banners if "." not in n] == [str(i) for i in range(1, 12)]  # the parser sees all eleven
    assert any("." in n for n, _ in banners)  # and the numbered rooms
    assert design_sections((ROOT / "docs" / "design.md").read_text(encoding="utf-8")) == banners


def test_the_comparison_sees_a_renamed_or_missing_banner():
    source = "\n".join(
        [
            "# " + "=" * 20,
            "# 1. Errors & exit codes",
            "x = 1",
            "# -- 1.1 the codes (docs/contract.md §7) -------",
            "# -- not numbered ---",
            "# 2. not a banner: no rule above",
        ]
    )
    assert module_sections(source) == [("1", "Errors & exit codes"), ("1.1", "the codes")]
    table = "| § | Banner | What |\n|---|---|---|\n| 1 | Errors & exit codes | x |\n| 1.1 | the codes | y |\n"
    assert design_sections(table) == module_sections(source)
    assert design_sections(table.replace("the codes", "codes")) != module_sections(source)
    assert design_sections(table.replace("| 1.1 | the codes | y |\n", "")) != module_sections(source)
