"""skills/bkmcp/SKILL.md (issue 17 item 7): the English half says what the Chinese half says, section by section —
the same sections, the same error codes in its table, the same argument rules."""

from __future__ import annotations

import re

import bkmcp
from tests.helpers import ROOT

SKILL = (ROOT / "skills" / "bkmcp" / "SKILL.md").read_text(encoding="utf-8")
ZH, EN = SKILL.split("\n# English\n")


def _sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.M)


def _table_codes(text: str) -> list[str]:
    return re.findall(r"^\| `([a-z_]+)`", text, flags=re.M)


def _section(text: str, index: int) -> str:
    return re.split(r"^## .+$", text, flags=re.M)[index + 1]


def test_both_halves_have_the_same_sections() -> None:
    assert len(_sections(ZH)) == len(_sections(EN)) >= 5, (_sections(ZH), _sections(EN))


def test_both_halves_have_the_same_error_table() -> None:
    codes = _table_codes(ZH)
    assert codes and codes == _table_codes(EN)
    known = {cls.code for cls in bkmcp.error_classes()}
    assert set(codes) <= known
    assert "mcp_cancelled" in codes


def test_both_halves_have_the_same_bullets_per_section() -> None:
    for index in range(len(_sections(ZH))):
        assert _section(ZH, index).count("\n- ") == _section(EN, index).count("\n- "), _sections(EN)[index]


def test_both_halves_state_the_argument_rules() -> None:
    zh_rules = _section(ZH, _sections(ZH).index("参数规则"))
    en_rules = _section(EN, _sections(EN).index("Argument rules"))
    for text in (zh_rules, en_rules):
        for needle in ("--flag=true", "--body", "`body`", "`timeout`", "1e400", "00123", "null"):
            assert needle in text, needle
    assert zh_rules.count("\n- ") == en_rules.count("\n- ")
