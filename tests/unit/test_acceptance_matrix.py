"""Every acceptance id of the design seed (000 §10) is carried by at least one test and by docs/acceptance.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IDS = (
    "C01 C02 C03 C04 A01 A02 A03 A04 A05 D01 D02 D03 D04 P01 P02 P03 P04 P05 P06 R01 R02 R03 R04 O01 O02 I01"
).split()


def _test_sources() -> str:
    files = [p for d in ("unit", "integration", "artifact") for p in (ROOT / "tests" / d).glob("test_*.py")]
    return "\n".join(p.read_text(encoding="utf-8") for p in files if p.name != Path(__file__).name)


@pytest.mark.parametrize("seed_id", IDS)
def test_seed_id_has_a_test(seed_id: str) -> None:
    """A test name or docstring carries the id (a bare mention in a comment of this file does not count)."""
    assert re.search(rf"\b{seed_id}\b", _test_sources()), f"no test carries acceptance id {seed_id}"


@pytest.mark.parametrize("seed_id", IDS)
def test_seed_id_is_mapped_in_docs(seed_id: str) -> None:
    text = (ROOT / "docs" / "acceptance.md").read_text(encoding="utf-8")
    assert re.search(rf"^\| {seed_id} \|", text, re.M), f"docs/acceptance.md has no row for {seed_id}"


def _row_files(seed_id: str) -> set[str]:
    text = (ROOT / "docs" / "acceptance.md").read_text(encoding="utf-8")
    match = re.search(rf"^\| {seed_id} \|[^|]*\|([^|]*)\|", text, re.M)
    assert match, f"docs/acceptance.md has no row for {seed_id}"
    return set(re.findall(r"`(tests/[^`]+\.py)`", match.group(1)))


@pytest.mark.parametrize("seed_id", IDS)
def test_seed_id_row_names_exactly_the_files_carrying_it(seed_id: str) -> None:
    """The matrix is accurate (every file named carries the id) and complete (every test file carrying it is named)."""
    listed = _row_files(seed_id)
    files = [
        p
        for d in ("unit", "integration", "artifact")
        for p in (ROOT / "tests" / d).glob("test_*.py")
        if p.name != Path(__file__).name
    ]
    carrying = {
        p.relative_to(ROOT).as_posix() for p in files if re.search(rf"\b{seed_id}\b", p.read_text(encoding="utf-8"))
    }
    assert not listed - carrying, f"docs/acceptance.md row {seed_id} names files without the id: {listed - carrying}"
    assert not carrying - listed, f"docs/acceptance.md row {seed_id} should also name: {sorted(carrying - listed)}"
